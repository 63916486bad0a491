"""A real agent framework from PyPI against ``posttrain serve``: the OpenAI Agents SDK runs a
tool-using agent (its own tool loop, through the Responses API and through chat completions),
and its session is recorded token for token and replays."""

import pytest
from serve_helpers import Scripted, served

from posttrain.harness import episode_problems

agents = pytest.importorskip("agents")
CALL = '<tool_call>{"name": "add", "arguments": {"a": 2, "b": 3}}</tool_call>'


@agents.function_tool
def add(a: int, b: int) -> int:
    """Add two integers.

    Args:
        a: the first number.
        b: the second number.
    """
    return a + b


@pytest.mark.parametrize("api", ["responses", "chat_completions"])
def test_an_agents_sdk_agent_uses_its_tool_through_the_server_and_replays(tokenizer, api):
    from openai import AsyncOpenAI

    agents.set_tracing_disabled(True)  # the SDK would upload traces to OpenAI otherwise
    engine = Scripted(tokenizer, [CALL, "It is 5."])
    with served(engine, tokenizer, max_tokens=32) as (url, sessions):
        client = AsyncOpenAI(base_url=url, api_key="sdk-session", max_retries=0)
        model = (agents.OpenAIResponsesModel if api == "responses"
                 else agents.OpenAIChatCompletionsModel)(model="tiny", openai_client=client)
        agent = agents.Agent(name="adder", instructions="Add with the tool.", tools=[add],
                             model=model)
        result = agents.Runner.run_sync(agent, "What is 2+3?")
    assert result.final_output == "It is 5."
    episode = sessions.episode("sdk-session")
    assert episode.meta["calls"] == 2
    assert len(episode.segments) == 1 and episode.meta["splits"] == []  # bridged exactly
    assert episode_problems(episode, tokenizer) == []  # posttrain replay's check
    text = tokenizer.decode(episode.segments[0].token_ids)
    assert "<|im_start|>tool\n5<|im_end|>" in text  # the SDK ran the tool and sent back 5
