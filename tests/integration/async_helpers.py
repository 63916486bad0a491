"""Shared pieces of the asynchronous-pipeline tests: a tiny RL config, a training run, and a
plan that makes a run go stale whatever the timing (``Plan``, ``PlannedEngine``), with a
trainer that keeps what its loss was given (``RecordingTrainer``)."""

import dataclasses
import json
import threading
from typing import ClassVar

import pytest
import torch

from posttrain.config import ActorConfig, AlgoConfig, EvalConfig, OptimConfig, RLConfig
from posttrain.engines import EngineRestarted, GenerationOutput, TorchEngine
from posttrain.envs import ArithmeticTasks
from posttrain.recipes.sampling_loop import RLRun
from posttrain.reporting import Reporter
from posttrain.rewards import VERIFIERS, RewardFunction
from posttrain.rollout.async_source import step_groups
from posttrain.train import Trainer

TASKS = ArithmeticTasks(("+",), 1)


@pytest.fixture(autouse=True)
def length_reward(monkeypatch):
    """The untrained model never answers right; a length-based reward gives groups spread."""
    monkeypatch.setitem(VERIFIERS, "length_mod3", lambda text, ref: float(len(text) % 3 == 0))


def rl_config(**async_options):
    mode = {"mode": "async", "async": async_options} if async_options else {}
    return RLConfig(steps=3, prompts_per_step=3, group_size=4, max_new_tokens=8, eval_every=0,
                    optim=OptimConfig(lr=3e-3), **mode)


def train(run, model, tokenizer, path, cfg, algo=None, engine=None, trainer=None):
    """``run`` (``run_rl`` or ``run_async_rl``) on ``TASKS``; returns the model and the
    metrics log. ``engine`` and ``trainer``: local ones of ``model`` by default."""
    if engine is None:
        engine = TorchEngine(model, tokenizer.pad_token_id, tokenizer.eos_token_id)
    reward = RewardFunction({"correct": ("length_mod3", 1.0)})
    run(RLRun(trainer or Trainer(model, cfg.optim, cfg.steps), tokenizer, TASKS, [], reward,
              EvalConfig(), "correct", Reporter(path, quiet=True), seed=3, cfg=cfg,
              algo=algo or AlgoConfig(), actor=ActorConfig()), engine)
    lines = (path / "metrics.jsonl").read_text().splitlines()
    return model, [json.loads(line) for line in lines]


class Plan:
    """When each sample of a forced-staleness run may generate: ``rl_config`` at
    ``max_staleness: 1`` (3 steps of 3 groups of 4 samples, seed 3), so whatever the timing
    step ``s`` trains on ``STEPS[s]`` and group 0's first three samples, sampled under version
    0, are trained at version 2, beyond the bound.

    Group ``g`` has ``PHASES[g] = (first, last)`` (groups 9 on: ``(3, 3)``, after the run): its
    last sample runs at version ``last``; the others start at ``first`` and, with a partial
    rollout, stop after their first chunk (first call, for an agent) and go on at ``last``
    (without one they run whole at ``first``: an update waits for the samples in flight). A
    group can only complete at its ``last`` version, and only ``STEPS[s]`` complete at ``s``:
    step ``s`` (trained at version ``s``) takes exactly them."""

    PHASES: ClassVar[dict[int, tuple[int, int]]] = {
        0: (0, 2), 1: (0, 0), 2: (0, 0), 3: (0, 0), 4: (0, 1), 5: (0, 1), 6: (1, 1), 7: (1, 2),
        8: (1, 2)}
    STEPS: ClassVar[list[set[int]]] = [{1, 2, 3}, {4, 5, 6}, {0, 7, 8}]
    GROUP_SIZE = 4

    def __init__(self, partial: bool):
        self.partial = partial
        self.cond = threading.Condition()  # version changes, sessions started, calls done
        source = step_groups(TASKS, 3, 3, self.GROUP_SIZE)  # train()'s seed and shape
        self.of_seed = {int(s): (g, i) for g in range(24) for i, s in enumerate(source(g)[1])}
        assert len(self.of_seed) == 24 * self.GROUP_SIZE  # a seed names its sample
        self.step_of = {g: s for s, groups in enumerate(self.STEPS) for g in groups}

    def versions(self, group: int, index: int) -> tuple[int, int]:
        """The versions of a sample's first chunk (call) and of the rest."""
        first, last = self.PHASES.get(group, (3, 3))
        if index == self.GROUP_SIZE - 1:
            return last, last
        return first, last if self.partial else first

    def wait(self, ready, what: str, timeout_s: float = 120.0) -> None:
        """Until ``ready()``; the timeout only keeps a broken run from hanging."""
        with self.cond:
            if not self.cond.wait_for(ready, timeout_s):
                raise TimeoutError(f"the plan's run never reached: {what}")

    def notify(self) -> None:
        with self.cond:
            self.cond.notify_all()


class PlannedEngine(TorchEngine):
    """A local engine whose samples never stop before ``max_new_tokens`` and whose version
    changes wake ``plan``'s waiters. With ``hold``, a row (a sample, known by its seed) that
    ``plan`` does not let generate yet gets no tokens (it stays in flight), and a call of such
    rows only, where an update waits for the samples in flight (no partial rollout), is lost as
    if the engine restarted (``EngineRestarted``): the loop dispatches them again, and once the
    update is waiting for them, after it."""

    def __init__(self, model, tokenizer, plan: Plan, hold: bool):
        super().__init__(model, tokenizer.pad_token_id)  # no eos: every sample full length
        self.plan, self.hold = plan, hold
        self._prompt_len: dict[int, int] = {}

    def update_weights(self, named_tensors, version):
        super().update_weights(named_tensors, version)
        self.plan.notify()

    def _may_run(self, prompt, seed) -> bool:
        group, index = self.plan.of_seed[seed]
        first, rest = self.plan.versions(group, index)
        started = len(prompt) > self._prompt_len.setdefault(seed, len(prompt))
        return self.version >= (rest if started else first)

    def generate(self, prompts, sampling, seeds=None):
        sampling = dataclasses.replace(sampling, stop_token_ids=())
        if not self.hold:
            return super().generate(prompts, sampling, seeds)
        runs = [self._may_run(p, s) for p, s in zip(prompts, seeds, strict=True)]
        if not any(runs):
            threading.Event().wait(0.005)  # not to spin; nothing waits on it
            if not self.plan.partial:
                raise EngineRestarted("these samples may not start before a later version")
        outs = iter(super().generate([p for p, r in zip(prompts, runs) if r], sampling,
                                     [s for s, r in zip(seeds, runs) if r]) if any(runs) else [])
        return [next(outs) if r else GenerationOutput(list(p), [], [], "length", self.version)
                for p, r in zip(prompts, runs)]


class RecordingTrainer(Trainer):
    """A ``Trainer`` that keeps the versions and loss mask of each optimiser step's batch: the
    tokens the loss was given."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.seen: list[tuple[torch.Tensor, torch.Tensor]] = []

    def optimizer_step(self, batch, *args, **kwargs):
        self.seen.append((batch.versions.clone(), batch.loss_mask.clone()))
        return super().optimizer_step(batch, *args, **kwargs)


def loss_tokens(seen: tuple[torch.Tensor, torch.Tensor], version: int, max_staleness: int
                ) -> dict[str, int]:
    """Of a step's sampled tokens (version >= 0), trained at ``version``: how many, how many
    beyond the bound (``stale``), and how many of each the loss was given."""
    versions, mask = seen
    sampled = versions >= 0
    stale = sampled & (version - versions > max_staleness)
    return {"sampled": int(sampled.sum()), "stale": int(stale.sum()),
            "stale_in_loss": int(mask[stale].sum()),
            "fresh_in_loss": int(mask[sampled & ~stale].sum())}


def planned_steps(episodes) -> list[set[int]]:
    """The groups each of the plan's three steps trained on (``Plan.STEPS`` when it held)."""
    steps: list[set[int]] = [set(), set(), set()]
    for e in episodes:
        steps[e.meta["step"] - 1].add(int(e.meta["sample_id"].split(":")[0]))
    return steps


def assert_stale_tokens_left_the_loss(log, trainer: RecordingTrainer, sampled: int,
                                      stale: list[int]) -> None:
    """Step ``s`` (trained at version ``s``, bound 1) sampled ``sampled`` tokens, ``stale[s]``
    of them beyond the bound: its loss got none of those and every fresh one, and its metrics
    say so exactly (``stale[s] / sampled`` is a power of two in these runs, exact in float32)."""
    for step, (row, seen) in enumerate(zip(log, trainer.seen, strict=True)):
        assert loss_tokens(seen, step, max_staleness=1) == {
            "sampled": sampled, "stale": stale[step], "stale_in_loss": 0,
            "fresh_in_loss": sampled - stale[step]}, step
        assert row["staleness/max"] == step  # each step holds tokens of version 0, step old
        assert row["staleness/masked"] == stale[step] / sampled
