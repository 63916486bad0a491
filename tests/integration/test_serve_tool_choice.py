"""``tool_choice`` is honoured in all three APIs: a forced tool (or ``required``) opens the call
for the model, whose continuation is its own sample (the opening is prompt, mask 0), and the
reply is that call; a choice the server cannot honour is a 400 naming it. So are the inputs a
text model cannot read (images), and the options it cannot give (top_logprobs, thinking)."""

import anthropic
import openai
import pytest
from serve_helpers import Scripted, served

from posttrain.harness import episode_problems

USER = [{"role": "user", "content": "What is 2+3?"}]
ADD = {"type": "function", "function": {"name": "add", "parameters": {
    "type": "object", "properties": {"a": {"type": "number"}, "b": {"type": "number"}}}}}
OTHER = {"type": "function", "function": {"name": "other", "parameters": {"type": "object"}}}


def client_of(url):
    return openai.OpenAI(base_url=url, api_key="k", max_retries=0)


@pytest.mark.parametrize("choice, continuation", [
    ({"type": "function", "function": {"name": "add"}}, '"a": 2, "b": 3}}</tool_call>'),
    ("required", 'add", "arguments": {"a": 2, "b": 3}}</tool_call>'),
], ids=["named", "required"])
def test_a_forced_call_is_opened_for_the_model_and_returned(tokenizer, choice, continuation):
    engine = Scripted(tokenizer, [continuation])
    prompts = []
    generate = engine.generate
    engine.generate = lambda p, *a, **k: prompts.extend(p) or generate(p, *a, **k)
    with served(engine, tokenizer) as (url, sessions):
        reply = client_of(url).chat.completions.create(model="tiny", messages=USER,
                                                       tools=[OTHER, ADD], tool_choice=choice)
        (call,) = reply.choices[0].message.tool_calls
        assert (call.function.name, call.function.arguments) == ("add", '{"a": 2, "b": 3}')
        assert reply.choices[0].finish_reason == "tool_calls"
        opening = tokenizer.decode(prompts[0])
        assert opening.endswith('<tool_call>{"name": "add", "arguments": {'
                                if choice != "required" else '<tool_call>{"name": "')
        episode = sessions.episode("k")
        assert episode_problems(episode, tokenizer) == []
        (seg,) = episode.segments
        sampled = tokenizer.encode(continuation, add_special_tokens=False)
        assert seg.loss_mask.count(1) == len(sampled) + 1  # its tokens and eos, not the opening


@pytest.mark.parametrize("choice, message", [
    ("banana", "tool_choice 'banana' is not"),
    ({"type": "function", "function": {"name": "mul"}}, "names the tool 'mul', which is not"),
])
def test_a_choice_that_cannot_be_honoured_is_a_400(tokenizer, choice, message):
    with served(Scripted(tokenizer, []), tokenizer) as (url, sessions):
        with pytest.raises(openai.BadRequestError, match=message):
            client_of(url).chat.completions.create(model="tiny", messages=USER, tools=[ADD],
                                                   tool_choice=choice)
        with pytest.raises(openai.BadRequestError, match="tool_choice 'required' needs tools"):
            client_of(url).chat.completions.create(model="tiny", messages=USER,
                                                   tool_choice="required")
        assert sessions.keys() == []


def test_responses_and_anthropic_force_calls_and_echo_the_choice(tokenizer):
    texts = ['"a": 1, "b": 1}}</tool_call>', '"a": 2, "b": 2}}</tool_call>']
    with served(Scripted(tokenizer, texts), tokenizer) as (url, _):
        response = client_of(url).responses.create(
            model="tiny", input="2+3?", tools=[{"type": "function", "name": "add",
                                                "parameters": ADD["function"]["parameters"]}],
            tool_choice={"type": "function", "name": "add"})
        assert response.tool_choice.name == "add"
        assert [(o.type, o.name) for o in response.output] == [("function_call", "add")]
        message = anthropic.Anthropic(base_url=url.removesuffix("/v1"), api_key="k",
                                      max_retries=0).messages.create(
            model="tiny", max_tokens=16, messages=USER, tool_choice={"type": "tool",
                                                                     "name": "add"},
            tools=[{"name": "add", "input_schema": ADD["function"]["parameters"]}])
        assert [(b.type, b.input) for b in message.content] == [("tool_use", {"a": 2, "b": 2})]


def test_what_a_text_model_cannot_read_or_give_is_refused(tokenizer):
    image = {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}
    with served(Scripted(tokenizer, []), tokenizer) as (url, _):
        client = client_of(url)
        with pytest.raises(openai.BadRequestError, match="'image_url' is not supported"):
            client.chat.completions.create(model="tiny", messages=[
                {"role": "user", "content": [{"type": "text", "text": "What is it?"}, image]}])
        with pytest.raises(openai.BadRequestError, match="top_logprobs is not supported"):
            client.chat.completions.create(model="tiny", messages=USER, logprobs=True,
                                           top_logprobs=3)
        with pytest.raises(openai.BadRequestError, match="'input_image' is not supported"):
            client.responses.create(model="tiny", input=[{"role": "user", "content": [
                {"type": "input_image", "image_url": "data:image/png;base64,AAAA"}]}])
        claude = anthropic.Anthropic(base_url=url.removesuffix("/v1"), api_key="k",
                                     max_retries=0)
        with pytest.raises(anthropic.BadRequestError, match="'image' is not supported"):
            claude.messages.create(model="tiny", max_tokens=8, messages=[{"role": "user",
                "content": [{"type": "image", "source": {"type": "base64", "media_type":
                                                         "image/png", "data": "AAAA"}}]}])
        with pytest.raises(anthropic.BadRequestError, match="thinking is not supported"):
            claude.messages.create(model="tiny", max_tokens=8, messages=USER,
                                   thinking={"type": "enabled", "budget_tokens": 1024})
