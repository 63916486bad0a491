"""The tool-call formats of other model families: Qwen3-Coder's XML and Llama 3's JSON come
back as structured calls and bridge when sent back; the format is read off the template."""

import json

import openai
import pytest
from serve_helpers import Scripted, served

from posttrain.serve.tool_formats import FORMATS, detect

USER = [{"role": "user", "content": "What is 2+3?"}]
TOOLS = [{"type": "function", "function": {"name": "add", "parameters": {
    "type": "object", "properties": {"a": {"type": "number"}, "b": {"type": "number"}}}}}]
QWEN3 = ("<tool_call>\n<function=add>\n<parameter=a>\n2\n</parameter>\n<parameter=b>\n3\n"
         "</parameter>\n</function>\n</tool_call>")
LLAMA3 = '{"name": "add", "parameters": {"a": 2, "b": 3}}'


@pytest.mark.parametrize("fmt,text", [("qwen3_coder", QWEN3), ("llama3_json", LLAMA3)])
def test_a_familys_calls_round_trip_and_bridge(tokenizer, fmt, text):
    engine = Scripted(tokenizer, [text, "It is 5."])
    with served(engine, tokenizer, "t", max_tokens=32, tool_format=FORMATS[fmt]) as (
            url, sessions):
        client = openai.OpenAI(base_url=url, api_key="k", max_retries=0)
        choice = client.chat.completions.create(model="t", messages=USER,
                                                tools=TOOLS).choices[0]
        (call,) = choice.message.tool_calls
        assert choice.finish_reason == "tool_calls" and call.function.name == "add"
        assert json.loads(call.function.arguments) == {"a": 2, "b": 3}
        client.chat.completions.create(model="t", tools=TOOLS, messages=[
            *USER, choice.message.model_dump(exclude_none=True),
            {"role": "tool", "tool_call_id": call.id, "content": "5"}])
    episode = sessions.episode("k")
    assert len(episode.segments) == 1 and episode.meta["splits"] == []


@pytest.mark.parametrize("fmt,text", [
    ("qwen3_coder", "<tool_call>\n<function=add>\n<parameter=a>\n2\n"),
    ("llama3_json", '{"name": "add", "parameters": [2, 3]}'),
    ("llama3_json", '{"name": "add", "parameters": {"a": 2'),
])
def test_an_unreadable_call_is_an_error_on_the_call(fmt, text):
    (call,) = FORMATS[fmt].parse(text, None)
    assert call.error and call.name is None


def test_qwen3_coder_values_follow_the_tools_schema():
    text = ("<tool_call>\n<function=lookup>\n<parameter=code>\n007\n</parameter>\n"
            "<parameter=count>\n3\n</parameter>\n<parameter=exact>\ntrue\n</parameter>\n"
            "</function>\n</tool_call>")
    tools = [{"type": "function", "function": {"name": "lookup", "parameters": {
        "type": "object", "properties": {"code": {"type": "string"},
                                         "count": {"type": "integer"},
                                         "exact": {"type": "boolean"}}}}}]
    (typed,) = FORMATS["qwen3_coder"].parse(text, tools)
    assert typed.arguments == {"code": "007", "count": 3, "exact": True}
    (untyped,) = FORMATS["qwen3_coder"].parse(text, None)  # no schema: JSON where it parses
    assert untyped.arguments["count"] == 3 and untyped.arguments["exact"] is True


def test_the_format_is_read_off_the_template(tokenizer):
    assert detect(tokenizer).name == "hermes"  # the tiny template shows Hermes calls

    class Template:
        def __init__(self, text):
            self.chat_template = text

    assert detect(Template("... <function={{ name }}> ...")).name == "qwen3_coder"
    assert detect(Template("{{ '<|python_tag|>' }} ...")).name == "llama3_json"
