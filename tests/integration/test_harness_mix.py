"""Several harnesses in one run (``agent.harnesses``): tasks go whole groups at a time to
harnesses in proportion to their shares, by a draw that depends only on the call's group
prefix, the task's position and the seed; a harness's system message opens its episodes; its
loop settings replace ``agent``'s; per-harness metrics are hand-countable; a run logs them."""

import json
import math

import pytest
from typer.testing import CliRunner

from posttrain.cli.app import app
from posttrain.config import ConfigError, load_config
from posttrain.envs.arithmetic import ArithmeticTasks
from posttrain.rollout.harness_mix import Harness, HarnessMix, WithSystem, draw
from posttrain.rollout.scoring import harness_metrics
from posttrain.types import Episode, SamplingParams, Segment


def test_draws_follow_the_shares():
    """4,000 hashed draws at shares 3:1: the count of the first is binomial (sd 27.4), so
    4 sd (110) bounds it; the hash is fixed, so this either always holds or never does."""
    hs = [Harness("a", 3.0, None), Harness("b", 1.0, None)]
    first = sum(draw(hs, f"s1:{k}:0") == 0 for k in range(4000))
    assert abs(first - 3000) < 4 * math.sqrt(4000 * 0.75 * 0.25)


def episode(reward: float, meta: dict | None = None) -> Episode:
    return Episode([Segment([1, 2], [0, 1], [0.0, -1.0], [0, 0])], {"correct": reward},
                   reward, meta=meta or {})


def test_a_mix_plays_whole_groups_in_task_order_and_opens_with_each_system_message():
    calls = {}

    def stand_in(name):  # a harness's rollout: records what it was given
        def play(engine, tok, tasks, reward_fn, sampling, group_size, group_prefix):
            calls[name] = ([t.messages() for t in tasks], group_prefix)
            return [episode(1.0, {"task": t.messages()[-1]["content"]})
                    for t in tasks for _ in range(group_size)]
        return play

    tasks = ArithmeticTasks().sample(12, __import__("random").Random(0))
    mix = HarnessMix([Harness("plain", 1.0, stand_in("plain")),
                      Harness("brief", 1.0, stand_in("brief"), "Be brief.")])
    sampling = SamplingParams(seed=4)
    out = mix(None, None, tasks, None, sampling, 3, "s7:")
    assert len(out) == 36 and set(calls) == {"plain", "brief"}
    for k, t in enumerate(tasks):  # task k's group, contiguous, from one harness
        group = out[3 * k:3 * k + 3]
        assert {e.meta["task"] for e in group} == {t.messages()[-1]["content"]}
        assert len({e.meta["harness"] for e in group}) == 1
    briefed, prefix = calls["brief"]
    assert prefix == "s7:brief:" and all(m[0] == {"role": "system", "content": "Be brief."}
                                         for m in briefed)
    again = mix(None, None, tasks, None, sampling, 3, "s7:")
    assert [e.meta["harness"] for e in again] == [e.meta["harness"] for e in out]
    merged = WithSystem(type("T", (), {"messages": lambda self: [
        {"role": "system", "content": "Tools."}, {"role": "user", "content": "2+2?"}]})(), "Hi.")
    assert merged.messages()[0] == {"role": "system", "content": "Hi.\n\nTools."}


def test_harness_metrics_are_the_hand_counts():
    eps = [episode(1.0, {"harness": "a"}), episode(0.0, {"harness": "a"}),
           episode(1.0, {"harness": "b"}), episode(0.5, {"harness": "a"})]
    eps[3].rewards["correct"] = 1.0
    assert harness_metrics(eps, "correct") == {
        "harness/a/share": 0.75, "harness/a/reward": 0.5, "harness/a/accuracy": 2 / 3,
        "harness/b/share": 0.25, "harness/b/reward": 1.0, "harness/b/accuracy": 1.0}
    assert harness_metrics([episode(1.0)], "correct") == {}


AGENT = "examples/external_agent/agent.py:solve"  # its own loop and calculator
def test_a_reported_reward_stands_for_every_part_in_the_metrics():
    """A session whose agent reported its reward (part ``agent`` alone) beside episodes with
    the reward function's parts: metrics average over all of them, hand counts."""
    from posttrain.rollout.scoring import rollout_metrics

    scored = episode(1.0, {"harness": "plain"})
    scored.rewards["format"] = 0.1
    reported = Episode(scored.segments, {"agent": 0.5}, 0.5, meta={"harness": "own"})
    out = rollout_metrics([scored, reported], "correct")
    assert out["accuracy"] == 0.75 and out["reward/correct"] == 0.75
    assert out["reward/agent"] == 0.25 and math.isclose(out["reward/format"], 0.3)
    assert out["harness/own/accuracy"] == 0.5


HARNESSES = "agent.harnesses=[{name: plain}, {name: brief, system: Be brief., max_turns: 1}]"


@pytest.mark.parametrize(("overrides", "error"), [
    (["task.name=arithmetic"], "not with a single-turn task"),
    (["task.name=calculator", "agent.tree={branches: 2, rounds: 1}", "rl.group_size=3",
      "algo.adv_estimator=tree_grpo"],
     "not with agent.tree"),
    (["task.name=calculator", "agent.harnesses=[{name: a}, {name: a}]"], "distinct"),
    (["task.name=calculator", "agent.harnesses=[{name: a}, {name: b, external: "
      f"{AGENT}, max_turns: 2}}]"], "max_turns configure the built-in loop"),
    (["task.name=calculator", f"agent.external={AGENT}"], "make the external agent one of"),
])
def test_harnesses_are_refused_where_they_cannot_take_effect(overrides, error):
    with pytest.raises(ConfigError, match=error):
        load_config(None, [HARNESSES, *overrides])


def test_a_three_harness_run_logs_each_harness_an_external_agent_among_them(tmp_path):
    """The built-in loop twice and examples/external_agent's own loop (its own calculator,
    through ``posttrain serve``) in one run."""
    out = tmp_path / "run"
    own = f"{{name: own, share: 2, external: {AGENT}}}"
    result = CliRunner().invoke(app, [
        "train", "configs/calculator.yaml", "model.preset=nano", "threads=1", "sft.steps=2",
        "sft.batch_size=4",
        "rl.steps=2", "rl.prompts_per_step=4", "rl.group_size=2", "rl.max_new_tokens=16",
        "eval.num_problems=4", "eval.max_new_tokens=16", f"out_dir={out}",
        HARNESSES[:-1] + f", {own}]"])
    assert result.exit_code == 0, result.output
    rows = [json.loads(line) for line in open(out / "metrics.jsonl")]
    steps = [r for r in rows if r.get("stage") == "rl" and "reward" in r]
    for r in steps:
        shares = [v for k, v in r.items() if k.startswith("harness/") and k.endswith("/share")]
        assert shares and math.isclose(sum(shares), 1.0)
    assert {k for r in steps for k in r if k.startswith("harness/")} >= {
        f"harness/{h}/reward" for h in ("plain", "brief", "own")}
