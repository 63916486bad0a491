"""The online difficulty curriculum (``task.curriculum``): tasks fall into pools by their
latest pass rate and are drawn in proportion to the pools' weights; the state is a record
that a resumed run cuts back and replays, so a resumed run draws what the straight one
did."""

import json
import math
import random
import re

import pytest
from typer.testing import CliRunner

from posttrain.cli.app import app
from posttrain.config import ConfigError, load_config
from posttrain.config.sections.task import CurriculumConfig
from posttrain.data.curriculum import CurriculumTasks, task_key
from posttrain.envs.arithmetic import ArithmeticTasks
from posttrain.recipes.sampling_loop import LoopRun
from posttrain.types import Episode, Segment


def episodes(rates: list[float], n: int = 4) -> list[Episode]:
    """``n`` episodes a task, the first ``rate * n`` of them correct."""
    seg = Segment([1, 2], [0, 1], [0.0, -1.0], [0, 0])
    return [Episode([seg], {"correct": float(j < r * n)}) for r in rates for j in range(n)]


def test_pools_weights_and_draws_follow_the_pass_rates(tmp_path):
    """Six pool tasks: pass rates 0 and .25 (hard, .2), .5 (normal, 1), 1 (easy, .2), two
    unseen (1). 30,000 draws: each task's count is binomial around its weight's share (4.5
    sd); the record replays to the same state and the same draws."""
    path = tmp_path / "curriculum.jsonl"
    cur = CurriculumTasks(ArithmeticTasks(), CurriculumConfig(pool_size=6), "correct", 0, path)
    pool = cur.pool
    cur.observe(pool[:4], episodes([0.0, 0.25, 0.5, 1.0]), step=0)
    assert [cur.weight(k) for k in cur.keys] == [0.2, 0.2, 1.0, 0.2, 1.0, 1.0]
    assert cur.stats() == {"curriculum/hard": 2 / 6, "curriculum/normal": 1 / 6,
                           "curriculum/easy": 1 / 6, "curriculum/unseen": 2 / 6}
    drawn = cur.sample(30_000, random.Random(1))
    shares = [0.2 / 3.6, 0.2 / 3.6, 1 / 3.6, 0.2 / 3.6, 1 / 3.6, 1 / 3.6]
    for task, share in zip(pool, shares):
        count = sum(d is task for d in drawn)
        assert abs(count - 30_000 * share) < 4.5 * math.sqrt(30_000 * share * (1 - share))
    again = CurriculumTasks(ArithmeticTasks(), CurriculumConfig(pool_size=6), "correct", 0, path)
    assert again.rates == cur.rates
    assert [task_key(t) for t in again.sample(50, random.Random(2))] == \
        [task_key(t) for t in cur.sample(50, random.Random(2))]
    cur.observe(pool[:1], episodes([0.5]), step=1)  # the latest rate replaces the first
    assert cur.weight(cur.keys[0]) == 1.0
    graded = episodes([1.0, 1.0]) + [Episode(episodes([0.0])[0].segments, {"correct": 0.0},
                                             meta={"grading": True})] * 8
    cur.observe(pool[4:6], graded, step=2)  # the policy's gradings do not count
    assert [cur.rates[k] for k in cur.keys[4:6]] == [1.0, 1.0]


def test_a_curriculum_that_cannot_draw_is_refused(tmp_path):
    cfg = CurriculumConfig(pool_size=2, unseen_weight=0.0)
    with pytest.raises(ValueError, match="weight 0"):
        CurriculumTasks(ArithmeticTasks(), cfg, "correct", 0).sample(1, random.Random(0))
    with pytest.raises(ConfigError, match="thresholds must increase"):
        load_config(None, ["task.curriculum.pools=[{name: a, threshold: 0.5, weight: 1}, "
                           "{name: b, threshold: 0.2, weight: 1}]"])
    with pytest.raises(ConfigError, match="rl.mode=sync"):
        load_config(None, ["task.curriculum={}", "rl.mode=async"])


SMALL = ["model.preset=nano", "stages=[rl]", "rl.steps=4", "rl.prompts_per_step=2",
         "rl.group_size=2", "rl.max_new_tokens=8", "rl.eval_every=0", "eval.num_problems=2",
         "eval.max_new_tokens=4", "threads=1", "checkpoint_every=2",
         "task.curriculum={pool_size: 3, pools: [{name: hard, threshold: 0.0, weight: 0.1}, "
         "{name: rest, threshold: 1.0, weight: 1.0}]}"]


TIMING = re.compile(r"time|second|_s$|per_s")  # wall-clock figures differ run to run


def train(out, *extra):
    return CliRunner().invoke(app, ["train", "configs/quickstart.yaml", *SMALL, "--out",
                                    str(out), *extra])


def test_a_resumed_run_draws_and_records_what_the_straight_one_did(tmp_path, monkeypatch):
    through = tmp_path / "through"
    assert train(through).exit_code == 0
    record = (through / "curriculum.jsonl").read_text()
    assert [json.loads(line)["step"] for line in record.splitlines()] == [0, 1, 2, 3]
    rows = (through / "metrics.jsonl").read_text()
    assert '"curriculum/hard"' in rows
    finish = LoopRun.finish_step

    def interrupted(self, step, metrics):
        finish(self, step, metrics)
        if step + 1 == 3:  # the newest checkpoint is step 2's; step 3 observed more
            raise KeyboardInterrupt

    resumed = tmp_path / "resumed"
    monkeypatch.setattr(LoopRun, "finish_step", interrupted)
    assert train(resumed).exit_code == 130
    monkeypatch.setattr(LoopRun, "finish_step", finish)
    result = train(resumed, "--resume")
    assert result.exit_code == 0, result.output
    assert (resumed / "curriculum.jsonl").read_text() == record
    strip = [{k: v for k, v in json.loads(line).items() if not TIMING.search(k)}
             for line in rows.splitlines()]
    again = [{k: v for k, v in json.loads(line).items() if not TIMING.search(k)}
             for line in (resumed / "metrics.jsonl").read_text().splitlines()]
    assert again == strip, [set(a.items()) ^ set(b.items()) for a, b in zip(again, strip)]
