"""``posttrain config explain``: the resolved config, where each value came from, what each key
means, which keys the run never reads, and what each stage will do.

Where a value came from: ``override`` when a ``dotted.key=value`` override set it (or a
section above it), ``file`` when the config file did, else ``default``. What a key means: its
description (``config.keys``).

Which keys the run never reads (``--unused``): those a validation rule would refuse set away
from their defaults, because no code path of this run reads them (``combinations.unread_keys``:
the section of a stage the run lacks, ``rm`` (read by ``posttrain reward-model`` only),
``agent`` options on a single-turn task, an option of a switch that is off such as
``algo.kl.*`` with ``coef: 0``, one a mode or strategy does not read). The rule is sound, not
complete: a key it marks is never read, and a key it leaves unmarked may still go unread.

What a stage does (``plan``), as its recipe does it: an optimiser step trains on the step's
rows — RL: ``prompts_per_step x group_size`` samples (x ``task.efforts`` levels) split into
``mini_batches`` parts, each pass of ``epochs``; on-policy distillation: ``prompts_per_step x
group_size`` samples; SFT and offline distillation: ``batch_size`` conversations; preference
optimisation: ``batch_size`` pairs, two rows each. Each optimiser step runs its rows in
micro-batches of ``trainer.micro_batch_size`` rows (pairs kept whole: an even size), split
among ``dist.trainer_processes``. A sampling step samples at most ``rows x max_new_tokens``
tokens (x ``agent.max_turns`` in posttrain's agent loop). A checkpoint follows every
``checkpoint_every``-th step. Held-out evaluation runs before the first stage and after each,
and within RL and on-policy distillation (held-out tasks) and preference optimisation
(held-out pairs) after every ``eval_every``-th step and the last. The numbers are those of a
run that keeps every group (dynamic sampling may train on fewer rows) and packs nothing
(``sft.pack_tokens`` makes fewer, longer rows). A stage that fine-tunes ``model.path`` in
full at its default learning rate is noted: the defaults are sized for the tiny models.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from posttrain.config.combinations import unread_keys
from posttrain.config.schema import RunConfig


def leaves(tree: Any, prefix: str = "") -> Iterator[tuple[str, Any]]:
    """``(dotted.key, value)`` for every leaf of a nested mapping (a mapping or list value that
    is empty is a leaf)."""
    if isinstance(tree, dict) and tree:
        for key, value in tree.items():
            yield from leaves(value, f"{prefix}.{key}" if prefix else str(key))
    else:
        yield prefix, tree


def sources(resolved: dict, file_tree: dict, overrides: Sequence[str]
            ) -> dict[str, tuple[Any, str]]:
    """Each resolved leaf's value and source: ``override``, ``file`` or ``default``."""
    overridden = [o.split("=", 1)[0].strip() for o in overrides]
    from_file = [key for key, _ in leaves(file_tree)]

    def under(key: str, keys: list[str]) -> bool:
        return any(key == k or key.startswith(f"{k}.") or k.startswith(f"{key}.") for k in keys)

    return {key: (value, "override" if under(key, overridden)
                  else "file" if under(key, from_file) else "default")
            for key, value in leaves(resolved)}


def unused(cfg: RunConfig, keys: Iterable[str]) -> dict[str, str]:
    """The dotted ``keys`` (as dumped) that no code path of ``cfg``'s run reads, each with the
    reason its widest noted section gives (``combinations.unread_keys``)."""
    noted = unread_keys(cfg)
    found = {}
    for key in keys:
        parts = key.split(".")
        reason = next((noted[p] for p in (".".join(parts[:n]) for n in range(1, len(parts) + 1))
                       if p in noted), None)
        if reason is not None:
            found[key] = reason
    return found


def split_sizes(rows: int, parts: int) -> list[int]:
    """The sizes ``Batch.split(ceil(rows / parts))`` makes."""
    size = math.ceil(rows / parts)
    return [min(size, rows - start) for start in range(0, rows, size)]


@dataclass(frozen=True)
class StagePlan:
    """What stage ``stage`` does, step by step and in all."""

    stage: str
    steps: int
    rows_per_step: int
    optimizer_steps_per_step: int
    micro_batches_per_step: int  # over all processes
    micro_batches_per_optimizer_step: int  # the most any of the step's optimiser steps runs
    processes: int
    sampled_tokens_per_step: int | None  # at most; None: the stage samples nothing
    checkpoints: int
    evals: int  # within the stage (the one after it not counted)
    notes: list[str] = field(default_factory=list)

    @property
    def optimizer_steps(self) -> int:
        return self.steps * self.optimizer_steps_per_step

    @property
    def micro_batches(self) -> int:
        return self.steps * self.micro_batches_per_step

    def as_dict(self) -> dict:
        """The plan and its totals."""
        return {**dataclasses.asdict(self), "optimizer_steps": self.optimizer_steps,
                "micro_batches": self.micro_batches,
                "micro_batches_per_process": self.micro_batches_per_process}

    @property
    def micro_batches_per_process(self) -> int:
        """Per optimiser step and process, at most: the gradient accumulation."""
        return math.ceil(self.micro_batches_per_optimizer_step / self.processes)


def _count(steps: int, every: int, last_too: bool) -> int:
    if not every:
        return 0
    return steps // every + (1 if last_too and steps % every else 0)


PRETRAINED_LR = 5e-5  # above it, full fine-tuning of a pretrained model overshoots


def default_lr_on_own_model(cfg: RunConfig, section) -> str | None:
    """A note when ``model.path`` names a model of the user's own and ``section`` trains it at
    its default learning rate, sized for the tiny models trained from scratch (SFT's 3e-3
    wiped SmolLM2-135M out in 20 steps: docs/real_models.md)."""
    optim = getattr(section, "optim", None)
    if cfg.model.path is None or optim is None or cfg.trainer.lora is not None:
        return None
    default = type(section).model_fields["optim"].get_default(call_default_factory=True).lr
    if optim.lr != default or default <= PRETRAINED_LR:
        return None
    return (f"optim.lr={default:g} is the default, sized for tiny models trained from "
            "scratch; a pretrained model (model.path) takes 1e-5 to 2e-5 for full "
            "fine-tuning (docs/real_models.md)")


def plan(cfg: RunConfig) -> list[StagePlan]:
    """Each of ``cfg.stages``' plan (see the module docstring)."""
    mbs, procs = cfg.trainer.micro_batch_size, cfg.dist.trainer_processes
    levels = len(cfg.task.efforts or [None])
    plans = []
    for stage in cfg.stages:
        section = getattr(cfg, stage)
        notes: list[str] = []
        sampled, evals, passes, micro = None, 0, 1, mbs
        if stage == "rl":
            rows = section.prompts_per_step * section.group_size * levels
            passes = section.epochs * section.mini_batches
            parts = split_sizes(rows, section.mini_batches) * section.epochs
            turns = 1 if cfg.single_turn or cfg.agent.plays_externally else cfg.agent.max_turns
            sampled = rows * section.max_new_tokens * turns
            evals = _count(section.steps, section.eval_every, True)
            if cfg.agent.any_external:
                notes.append("an external agent makes as many calls as it likes: sampled "
                             "tokens are counted for one call a session")
            if cfg.algo.dynamic_sampling.enabled:
                notes.append("dynamic sampling keeps only groups with signal: fewer rows, or "
                             "more samples drawn to refill them")
        elif stage == "opd":
            rows = section.prompts_per_step * section.group_size * levels
            parts, sampled = [rows], rows * section.max_new_tokens
            evals = _count(section.steps, section.eval_every, True)
        elif stage == "pref":
            rows, micro = 2 * section.batch_size, 2 * max(1, mbs // 2)
            parts, evals = [rows], _count(section.steps, section.eval_every, True)
        else:  # sft, distill
            rows, parts = section.batch_size, [section.batch_size]
            if stage == "distill" and section.lam > 0:
                sampled = rows * section.max_new_tokens
            if stage == "sft" and section.pack_tokens:
                notes.append(f"sft.pack_tokens={section.pack_tokens} packs the conversations "
                             "into fewer rows: fewer micro-batches")
        if note := default_lr_on_own_model(cfg, section):
            notes.append(note)
        micro_batches = [math.ceil(p / micro) for p in parts]
        plans.append(StagePlan(stage, section.steps, rows, passes, sum(micro_batches),
                               max(micro_batches), procs, sampled,
                               _count(section.steps, cfg.checkpoint_every, False), evals,
                               notes))
    return plans
