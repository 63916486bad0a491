"""Agent swarms: an orchestrator spawns sub-agents that run batched on the same engine when it
waits for them, each sub-agent's turns become rows of the orchestrator's episode, the cost is
the critical path (not the sum of steps), and PARL's parallel and finish parts are scored."""

import json
import re
import time

import pytest
from tests.integration.agent_helpers import ScriptedEngine
from typer.testing import CliRunner

from posttrain.cli.app import app
from posttrain.config import LoopLimits, load_config
from posttrain.config.sections.agent import SUBAGENT_PROMPT
from posttrain.harness import AgentLoop, ToolRegistry
from posttrain.harness.swarm import Swarm, SwarmSettings
from posttrain.harness.tool_calls import format_tool_call
from posttrain.recipes.build import RunParts
from posttrain.rewards import RewardFunction
from posttrain.rollout.scoring import rollout_metrics, shape_rewards
from posttrain.types import Batch, SamplingParams

CODES = {"alpha": 17, "beta": 25, "gamma": 8}
REWARD = RewardFunction({"correct": ("numeric", 1.0), "parallel": ("env", 0.5),
                         "finish": ("env", 0.5)})
TASK = [{"role": "user", "content": "What is the sum of the codes of alpha and beta?"}]


def lookup(name: str) -> str:
    """The code of a name.

    Args:
        name: The name to look up.
    """
    return str(CODES[name])


def results(prompt):
    return re.findall(r"<\|im_start\|>tool\n(.*?)<\|im_end\|>", prompt, re.DOTALL)


def orchestrator(names, silent=()):
    def reply(prompt):
        if SUBAGENT_PROMPT in prompt:  # a sub-agent: look its name up, then answer
            name = re.findall(r"the code of (\w+)", prompt)[-1]
            seen = results(prompt)
            if name in silent:
                return format_tool_call("lookup", {"name": name})  # never answers
            return format_tool_call("lookup", {"name": name}) if not seen else seen[-1]
        seen = results(prompt)
        if not seen:
            return "".join(format_tool_call("spawn", {"task": f"Find the code of {n}."})
                           for n in names)
        if len(seen) == len(names):
            return format_tool_call("wait", {"handles": [f"agent-{i + 1}"
                                                          for i in range(len(names))]})
        answers = [int(x) for x in re.findall(r"agent-\d+: (\d+)", seen[-1])]
        return f"<answer>{sum(answers)}</answer>"
    return reply


class Batches(ScriptedEngine):
    """Records how many prompts each generate call held."""

    def __init__(self, *args):
        super().__init__(*args)
        self.sizes = []

    def generate(self, prompts, sampling, seeds=None):
        self.sizes.append(len(prompts))
        return super().generate(prompts, sampling, seeds)


def play(tokenizer, names, silent=(), **settings):
    engine = Batches(tokenizer, orchestrator(names, silent))
    swarm = SwarmSettings(ToolRegistry([lookup]), limits=LoopLimits(max_turns=3), **settings)
    loop = AgentLoop(engine, tokenizer, ToolRegistry(), LoopLimits(max_turns=4, max_tokens=4096),
                     swarm=swarm)
    episode = loop.run(TASK, SamplingParams(max_new_tokens=256), REWARD, "42")
    return episode, engine


def test_sub_agents_run_batched_and_join_the_episode_as_rows(tokenizer):
    episode, engine = play(tokenizer, ["alpha", "beta"])
    assert episode.meta["final"] == "<answer>42</answer>" and episode.rewards["correct"] == 1.0
    # the orchestrator spawns, then waits: its wait plays the two sub-agents' 2 turns each,
    # generated together; then the orchestrator answers
    assert engine.sizes == [1, 1, 2, 2, 1]
    assert len(episode.segments) == 3
    for seg, name in zip(episode.segments[1:], ["alpha", "beta"]):
        text = tokenizer.decode(seg.token_ids)
        assert SUBAGENT_PROMPT in text and f"Find the code of {name}." in text
        assert sum(seg.loss_mask) > 0  # the sub-agent's own turns are trained
    assert "agent-1: 17\nagent-2: 25" in tokenizer.decode(episode.segments[0].token_ids)
    meta = episode.meta
    assert meta["subagents"] == 2 and meta["subagent_turns"] == [2, 2]
    assert (meta["critical_steps"], meta["total_steps"]) == (3 + 2, 3 + 2 + 2)
    assert episode.rewards["parallel"] == 0.5 and episode.rewards["finish"] == 1.0  # 2 of 4
    assert episode.reward == 1.0 + 0.5 * 0.5 + 0.5 * 1.0
    batch = Batch.from_episodes([episode], pad_token_id=tokenizer.pad_token_id)
    assert batch.input_ids.shape[0] == 3 and batch.rewards.tolist() == [episode.reward] * 3


def test_the_swarm_limits_and_a_sub_agent_that_never_answers(tokenizer):
    episode, _ = play(tokenizer, ["alpha", "beta", "gamma"], silent=("gamma",),
                      max_subagents=2)
    spawned = tokenizer.decode(episode.segments[0].token_ids)
    assert "spawned agent-2" in spawned and "not spawned: the limit of 2" in spawned
    assert "agent-3: unknown handle (spawned: agent-1, agent-2)" in spawned
    assert episode.meta["subagents"] == 2 and episode.rewards["finish"] == 1.0
    silent, _ = play(tokenizer, ["alpha", "gamma"], silent=("gamma",), target=2)
    # the same lookup three turns in a row: the loop detector ends it
    assert "agent-2: no answer (loop)" in tokenizer.decode(silent.segments[0].token_ids)
    assert silent.rewards["parallel"] == 1.0 and silent.rewards["finish"] == 0.5
    assert silent.meta["subagent_turns"] == [2, 3] and silent.meta["critical_steps"] == 3 + 3


def test_handles_follow_the_order_of_a_turns_spawn_calls(tokenizer, monkeypatch):
    """A turn's calls run concurrently; a spawn that is slow to start keeps its place (a
    sync spawn in a worker thread lost it: beta took agent-1 and the limit refused alpha)."""
    spawn = Swarm.spawn

    def slow_for_alpha(self, task):
        if "alpha" in task:
            time.sleep(0.2)
        return spawn(self, task)

    monkeypatch.setattr(Swarm, "spawn", slow_for_alpha)
    episode, _ = play(tokenizer, ["alpha", "beta", "gamma"], max_subagents=2)
    text = tokenizer.decode(episode.segments[0].token_ids)
    assert "agent-1: 17\nagent-2: 25" in text and "not spawned: the limit of 2" in text
    assert ["alpha" in tokenizer.decode(seg.token_ids) for seg in episode.segments[1:]] == \
        [True, False]


def test_a_config_with_a_swarm_plays_it_and_reports_its_cost(tokenizer, tmp_path):
    """agent.swarm through the run's parts: the calculator task's orchestrator spawns a
    sub-agent that uses the calculate tool; the parl shaping rule and the metrics see it."""
    cfg = load_config("configs/calculator.yaml", [
        "agent.swarm.target=1", "agent.max_tokens=4096", "eval.num_problems=1",
        "reward.parts.correct={verifier: numeric, weight: 1.0}",
        "reward.parts.parallel={verifier: env, weight: 0.0}",
        "reward.shaping=[{name: parl, lam1: 0.5, lam2: 0.5, anneal_steps: 10}]"])
    parts = RunParts(cfg.model_copy(update={"out_dir": str(tmp_path / "run")}))
    assert parts.out == tmp_path / "run" and parts.out.is_dir()  # the run writes here only
    (task,) = parts.eval_tasks
    a, b = map(int, re.findall(r"\d+", task.messages()[-1]["content"])[:2])

    def reply(prompt):
        seen = results(prompt)
        if SUBAGENT_PROMPT in prompt:
            return format_tool_call("calculate", {"expression": f"{a} * {b}"}) if not seen \
                else seen[-1]
        if not seen:
            return format_tool_call("spawn", {"task": f"Compute {a} * {b}."})
        if len(seen) == 1:
            return format_tool_call("wait", {"handles": ["agent-1"]})
        return f"<answer>{seen[-1].split(': ')[-1]}</answer>"

    (episode,) = parts.rollout_fn(ScriptedEngine(tokenizer, reply), tokenizer, [task],
                                  parts.reward_fn, SamplingParams(max_new_tokens=256), 1)
    assert episode.rewards["correct"] == 1.0 and episode.rewards["parallel"] == 1.0
    assert len(episode.segments) == 2 and episode.meta["critical_steps"] == 3 + 2
    metrics = rollout_metrics([episode], "correct")
    assert metrics["swarm/subagents"] == 1.0 and metrics["swarm/critical_steps"] == 5.0
    assert metrics["swarm/spawning"] == 1.0
    (shaped,) = shape_rewards([episode], cfg.reward.shaping, step=5)
    assert shaped.reward == pytest.approx(episode.reward + 0.5 * (0.5 * 1.0 + 0.5 * 1.0))


def test_the_swarm_config_trains_through_the_cli(tmp_path):
    result = CliRunner().invoke(app, [
        "train", "configs/swarm.yaml", "model.preset=nano", "sft.steps=2", "sft.batch_size=2",
        "rl.steps=2",
        "rl.prompts_per_step=2", "rl.group_size=2", "rl.max_new_tokens=16",
        "eval.num_problems=2", "eval.max_new_tokens=16", "rl.eval_every=0",
        "--out", str(tmp_path / "run")])
    assert result.exit_code == 0, result.output
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").open()]
    rl = [r for r in rows if r["stage"] == "rl"]
    assert len(rl) == 2 and all("swarm/critical_steps" in r for r in rl)
    assert all(r["swarm/critical_steps"] >= r["turns"] for r in rl)


def test_a_loop_with_a_swarm_refuses_trees_and_per_episode_environments():
    """Sub-agents share the task's tools: the loop refuses an environment factory, an
    episode that brings its own environment, and a tree rollout, before playing anything."""
    from posttrain.harness import run_tree
    from posttrain.rollout import AgentRollout

    swarm = SwarmSettings(ToolRegistry(), limits=LoopLimits(max_turns=2))
    with pytest.raises(ValueError, match="no trees, no per-episode environments"):
        AgentLoop(None, None, ToolRegistry(), swarm=swarm, env_factory=lambda ref: None)
    loop = AgentLoop(None, None, ToolRegistry(), swarm=swarm)
    with pytest.raises(ValueError, match="no trees, no per-episode environments"):
        loop.start([([], "ref", "g", None, lambda: None)], SamplingParams())
    with pytest.raises(ValueError, match="no trees, no per-episode environments"):
        run_tree(loop, [([], "ref", "g")], SamplingParams(), None, 1, 1)
    played = AgentRollout(ToolRegistry(), swarm=swarm, tree=(1, 1))  # the loop's keyword
    with pytest.raises(ValueError, match="no trees, no per-episode environments"):
        played(None, None, [], None, SamplingParams(), group_size=2)
