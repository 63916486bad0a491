"""The agent-swarm task family: codes behind a lookup tool, and SFT conversations of three
kinds, each shown the tools its agent has in a swarm episode."""

import random

import pytest

from posttrain.config import ConfigError, load_config
from posttrain.config.sections.agent import SUBAGENT_PROMPT
from posttrain.data import generate_arithmetic_sft
from posttrain.envs import LookupTasks


def test_a_problem_asks_for_codes_only_the_records_hold():
    tasks = LookupTasks(seed=3, n_problems=50)
    p = tasks.splits["train"][0]
    assert 2 <= len(p.names) <= 4
    assert p.reference == " ".join(str(tasks.codes[n]) for n in p.names)
    assert all(n in p.messages()[0]["content"] for n in p.names)
    record = tasks.record(p.names[0]).splitlines()
    assert len(record) == 1 + 6 and record[-1] == f"code: {tasks.codes[p.names[0]]}"
    assert tasks.record("nobody") == "no record for 'nobody'"
    assert len(tasks.splits["eval"]) == 5 and LookupTasks(seed=3, n_problems=50).codes == \
        tasks.codes


def test_sft_conversations_come_in_three_kinds_with_their_agents_tools():
    tasks = LookupTasks(seed=0, n_problems=200)
    data = generate_arithmetic_sft(tasks, 60, 0.0, seed=0)
    kinds = {}
    for conv, tools in zip(data.conversations, data.tools):
        names = [t["function"]["name"] for t in tools]
        if conv[0]["role"] == "system":
            assert conv[0]["content"] == SUBAGENT_PROMPT and names == ["lookup"]
            kinds["sub-agent"] = kinds.get("sub-agent", 0) + 1
            assert conv[-1]["content"] == conv[-2]["content"].splitlines()[-1][len("code: "):]
        else:
            assert names == ["lookup", "spawn", "wait"]
            kind = "swarm" if '"spawn"' in conv[1]["content"] else "serial"
            kinds[kind] = kinds.get(kind, 0) + 1
            listed = conv[0]["content"].split("codes of ")[1].removesuffix(", in that order?")
            reference = " ".join(str(tasks.codes[n])
                                 for n in listed.replace(" and ", ", ").split(", "))
            assert conv[-1]["content"] == f"<answer>{reference}</answer>"
    assert set(kinds) == {"sub-agent", "swarm", "serial"} and sum(kinds.values()) == 60
    off = generate_arithmetic_sft(tasks, 30, 1.0, seed=0)
    assert any(c[-1]["content"].startswith("<answer>") for c in off.conversations)
    rng = random.Random(0)
    assert tasks.sft_conversation(tasks.splits["train"][0], 0.0, rng)


def test_the_lookup_task_needs_a_swarm():
    with pytest.raises(ConfigError, match="task.name=lookup is the agent-swarm task family"):
        load_config(None, ["task.name=lookup"])
    assert load_config("configs/swarm.yaml").agent.swarm.max_subagents == 4
