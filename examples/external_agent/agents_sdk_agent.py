"""The same calculator agent built with a real agent framework, the OpenAI Agents SDK, trained
through ``posttrain serve`` with no change to the agent:

    pip install openai-agents
    posttrain train configs/quickstart.yaml \\
        agent.external=examples/external_agent/agents_sdk_agent.py:solve

The SDK runs its own tool loop through the Responses API; posttrain records the session.
"""

import agents
from openai import AsyncOpenAI

agents.set_tracing_disabled(True)  # no trace upload: the machine may be offline


@agents.function_tool
def calculate(a: int, b: int, op: str) -> str:
    """Apply an arithmetic operation to two integers.

    Args:
        a: the left operand.
        b: the right operand.
        op: one of +, - and *.
    """
    ops = {"+": a + b, "-": a - b, "*": a * b}
    return str(ops[op]) if op in ops else f"error: unknown operation {op!r}"


def solve(base_url: str, api_key: str, task) -> None:
    client = AsyncOpenAI(base_url=base_url, api_key=api_key, max_retries=0)
    agent = agents.Agent(name="calculator", instructions="Use calculate for arithmetic.",
                         tools=[calculate],
                         model=agents.OpenAIResponsesModel(model="policy",
                                                           openai_client=client))
    question = task.messages()[-1]["content"]
    agents.Runner.run_sync(agent, question, max_turns=4)
    return None  # the run's reward function scores the last reply
