"""The ``search`` tool through the agent loop: the call runs and the model reads the card."""

import json

from agent_helpers import ScriptedEngine

from posttrain.config import LoopLimits
from posttrain.envs import SearchTasks
from posttrain.harness import AgentLoop, ToolRegistry
from posttrain.rewards import RewardFunction
from posttrain.rollout.scoring import tool_use_rate
from posttrain.types import SamplingParams


def test_the_loop_runs_search_and_appends_the_card(tokenizer):
    tasks = SearchTasks(seed=0)
    p = tasks.eval_set(1)[0]
    call = json.dumps({"name": "search", "arguments": {"query": p.doc.title}})
    engine = ScriptedEngine(tokenizer, [f"<tool_call>{call}</tool_call>",
                                        f"<answer>{p.answer}</answer>"])
    loop = AgentLoop(engine, tokenizer, ToolRegistry([tasks.tool]), LoopLimits())
    ep = loop.run(p.messages(), SamplingParams(max_new_tokens=96),
                  RewardFunction({"correct": ("numeric", 1.0)}), p.reference)
    assert ep.finish_reason == "answer" and ep.reward == 1.0 and tool_use_rate([ep]) == 1.0
    card = tasks.tool(p.doc.title)
    assert card.startswith(p.doc.text) and ep.meta["messages"][2] == {"role": "tool",
                                                                     "content": card}
    assert f"<|im_start|>tool\n{card}<|im_end|>" in tokenizer.decode(engine.prompts[1])
