"""Config -> what sampling a run's task needs (``RunTasks``): the task family (built in or
named by dotted path), the function that plays its episodes, the reward and its judges, the
held-out evaluation and the data a stage reads. Commands that only sample or evaluate
(``eval``, ``filter``, ``env audit``, ``harness-search``) use it alone; a run's stages use
``RunParts`` (``recipes.build``), which adds the run directory."""

from __future__ import annotations

import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

from posttrain.config import ConfigError, PairDataConfig, RunConfig
from posttrain.config.extension import load_extension, load_tools
from posttrain.config.sections.task import TaskParts
from posttrain.data import ChatData, generate_arithmetic_sft, load_chat_data
from posttrain.data.preference_pairs import PreferencePair, arithmetic_pairs, load_preference_data
from posttrain.data.prompt_stream import StreamedDatasetTasks
from posttrain.data.prompt_tasks import DatasetTasks
from posttrain.engines import Engine
from posttrain.envs import Task
from posttrain.harness import ToolRegistry
from posttrain.hooks import hooked
from posttrain.recipes.agent_tasks import (
    check_row_tools,
    environment_factory,
    row_tools,
)
from posttrain.recipes.judges.chats import ServedChats, build_guard
from posttrain.reporting import StepProgress
from posttrain.rewards import RewardFunction
from posttrain.rollout import AgentRollout, ExternalAgentRollout, command_agent, rollout
from posttrain.rollout.evaluation import absent_columns, evaluate
from posttrain.rollout.harness_mix import Harness, HarnessMix
from posttrain.rollout.wrappers.judged import JudgedRollout
from posttrain.types import Episode


def task_family(cfg: RunConfig) -> TaskParts:
    """The task family ``task`` selects, built (``TaskParts``), with ``agent.tools`` added to
    its tools (the agent loop then plays the task; also for ``task.env`` without tools). A
    dataset row's own tools are checked against them (``agent_tasks.row_tools``)."""
    parts = cfg.task.build(cfg.seed, ServedChats(cfg.trainer.compute_dtype, cfg.seed))
    if cfg.agent.tools or cfg.task.env is not None:  # the agent loop plays the task
        parts.tools = parts.tools or ToolRegistry()
        for spec in cfg.agent.tools:
            for fn in load_tools(spec):
                parts.tools.add(fn)
    if cfg.task.ROW_TOOLS:  # a row's own tools must be implemented
        check_row_tools(parts.tasks, row_tools(parts.tools or ToolRegistry()))
    return parts


def rollout_function(cfg: RunConfig, tools: ToolRegistry | None, env_factory: Callable | None,
                     env_score: Callable | None = None, family_agent: Callable | None = None
                     ) -> Callable[..., list[Episode]]:
    """What plays and scores episodes: ``task.rollout`` if named, the family's own
    ``family_agent`` (an environment library's loop), the agent loop when the task has
    ``tools`` (with a dataset row's own tools, ``task.env``'s environment and the features'
    ``agent_options``), else one
    completion a sample (scored with the family's ``env_score``, if any)."""
    if cfg.task.rollout is not None:
        return load_extension("rollout", cfg.task.rollout)
    if family_agent is not None:
        return ExternalAgentRollout(family_agent, cfg.agent.timeout_s)
    agent = cfg.agent
    if agent.harnesses and tools is not None:
        return HarnessMix([Harness(h.name, h.share, rollout_function(
            harness_config(cfg, h), offered_tools(tools, h.tools, h.name), env_factory),
            h.system) for h in agent.harnesses])
    if agent.plays_externally:
        play = load_extension("external_agent", agent.external) if agent.external else \
            command_agent(agent.external_command, agent.timeout_s)
        return ExternalAgentRollout(play, agent.timeout_s)
    if tools is None:
        return rollout if env_score is None else partial(rollout, env_score=env_score)
    tree, guard = cfg.agent.tree, cfg.agent.guard
    task_tools = row_tools(tools) if cfg.task.ROW_TOOLS else None
    features = {k: v for options in hooked("agent_options")
                for k, v in options(cfg, tools).items()}
    return AgentRollout(
        tools, cfg.agent.limits(), cfg.agent.compaction,
        tree=None if tree is None else (tree.branches, tree.rounds),
        env_factory=with_features(env_factory, cfg),
        guard=None if guard is None else build_guard(guard, cfg.trainer.compute_dtype, cfg.seed),
        retain_reasoning=cfg.agent.retain_reasoning, task_tools=task_tools,
        task_env=with_features(environment_factory(cfg, task_tools or (lambda task: tools)), cfg),
        **features)


def with_features(make: Callable | None, cfg: RunConfig) -> Callable | None:
    """An episode environment factory through the features' ``wrap_environment`` hooks."""
    for wrap in hooked("wrap_environment"):
        make = wrap(make, cfg)
    return make


def harness_config(cfg: RunConfig, h) -> RunConfig:
    """``cfg`` with harness ``h``'s loop settings (or external agent) instead of
    ``agent``'s."""
    changes = {k: getattr(h, k) for k in ("max_turns", "max_tokens", "retain_reasoning",
                                          "compaction", "external", "external_command")
               if getattr(h, k) is not None}
    agent = cfg.agent.model_copy(update=changes | {"harnesses": []})
    return cfg.model_copy(update={"agent": agent})


def offered_tools(tools: ToolRegistry, names: list[str] | None, harness: str) -> ToolRegistry:
    """The task's ``tools`` a harness offers (``names``; None: all of them)."""
    if names is None:
        return tools
    unknown = sorted(set(names) - set(tools.tools))
    if unknown:
        raise ValueError(f"agent.harnesses[{harness}].tools: the task has no tool "
                         f"{', '.join(unknown)} (it has {', '.join(tools.tools)})")
    return ToolRegistry([tools.tools[n] for n in names], tools.max_output_lines,
                        tools.max_output_bytes)


class RunTasks:
    """What sampling the task of ``cfg`` needs: ``tasks`` (and ``tools``), the ``rollout_fn``
    that plays them, ``reward_fn`` and the held-out ``eval_tasks``, as the features'
    ``prepare_tasks`` hooks leave them (their own objects in ``state``, by feature name; ``out``:
    the run directory, when there is one). A hook may also give every prompt several forms,
    ``variants`` (``Task -> Task``: sampling loops ask a drawn prompt in each, one group each;
    generated SFT data draws one), and ``shaping_inputs`` (fixed values reward shaping may
    read). Messages (skipped rows) go to ``progress``."""

    def __init__(self, cfg: RunConfig, progress: StepProgress | None = None,
                 out: Path | None = None) -> None:
        self.cfg, self.progress = cfg, progress or StepProgress()
        self.skipped_rows: dict[str, dict] = {}  # what -> count, rows, first reason
        self.judged = False  # attach_judges ran
        self.state: dict[str, Any] = {}  # what the features made, by feature name
        self.variants: tuple[Callable[[Task], Task], ...] = ()  # each prompt's forms, if several
        self.shaping_inputs: dict[str, Any] = {}  # what the features offer reward shaping
        family = task_family(cfg)
        self.tasks, self.tools, env_factory = family.tasks, family.tools, family.env_factory
        self.eval_tasks = self.tasks.eval_set(cfg.eval.num_problems)
        if isinstance(self.tasks, StreamedDatasetTasks):  # train rows: once read through
            self.tasks.stream.on_first_pass = lambda rows: self.report_skipped("train prompt", rows)
            self.report_skipped("eval prompt", self.tasks.skipped["eval"])
        elif isinstance(self.tasks, DatasetTasks):
            for split, rows in self.tasks.skipped.items():
                self.report_skipped(f"{split} prompt", rows)
        for prepare in hooked("prepare_tasks"):
            prepare(self, out)
        self.rollout_fn = rollout_function(cfg, self.tools, env_factory, family.env_score,
                                           family.agent)
        self.reward_fn = RewardFunction.of(cfg.reward)
        absent, have = absent_columns(self.eval_tasks, cfg.eval.group_by)
        if absent:
            raise ConfigError(f"eval.group_by: no held-out task has {', '.join(absent)} "
                              f"(columns: {', '.join(have) or 'none'})")

    def attach_judges(self, tokenizer) -> None:
        """Score ``reward.judges``' parts after every rollout (and evaluation), then wrap it
        in the features' ``wrap_rollout`` hooks; once."""
        if self.judged:
            return
        judges, dtype, seed = self.cfg.reward.judges, self.cfg.trainer.compute_dtype, self.cfg.seed
        if judges:
            self.rollout_fn = JudgedRollout(self.rollout_fn, {
                part: j.build(tokenizer, dtype, seed) for part, j in judges.items()})
        for wrap in hooked("wrap_rollout"):
            self.rollout_fn = wrap(self.rollout_fn, self.cfg, tokenizer)
        self.judged = True

    def evaluate(self, engine: Engine, tokenizer) -> tuple[list[Episode], dict[str, float]]:
        """The held-out episodes (``eval.samples`` a problem) and their metrics; ``progress``
        says what is played before (on a real model it takes minutes) and the accuracy, its
        standard error and the time after."""
        e, started = self.cfg.eval, time.monotonic()
        self.progress.message(f"evaluating {len(self.eval_tasks)} held-out problems x "
                              f"{e.samples} sample(s), up to {e.max_new_tokens} new tokens each")
        episodes, metrics = evaluate(engine, tokenizer, self.eval_tasks, self.reward_fn, e,
                                     self.cfg.reward.accuracy_part, self.cfg.seed,
                                     self.rollout_fn, self.cfg.features)
        self.progress.message(f"  accuracy {metrics['accuracy']:.3f} ± "
                              f"{metrics['accuracy_se']:.3f} ({time.monotonic() - started:.0f} s)")
        return episodes, metrics

    # -- data --------------------------------------------------------------------------------
    def report_skipped(self, what: str, skipped: list[tuple[int, str]]) -> None:
        """Say how many ``what`` rows were skipped, which, and why the first was; the run's
        summary keeps it (``skipped_rows``)."""
        if skipped:
            from rich.markup import escape

            rows = [i for i, _ in skipped]
            self.skipped_rows[what] = {"count": len(rows), "rows": rows[:20],
                                       "first_reason": skipped[0][1]}
            self.progress.message(
                f"[yellow]skipped {len(rows)} malformed {what} rows (rows {rows[:5]}"
                f"{'...' if len(rows) > 5 else ''}, counting from 0; row {rows[0]}: "
                f"{escape(skipped[0][1])})")

    def conversations(self, path: str | None, n: int, error_rate: float, what: str,
                      sft: bool = False) -> ChatData:
        """Conversations from the dataset at ``path`` (with their rows' tools, else the task's),
        or ``n`` generated from the task with a share ``error_rate`` of flawed answers; for the
        ``sft`` stage, generated ones go through the features' ``sft_turns`` and
        ``sft_conversations`` hooks."""
        if path is not None:
            data = load_chat_data(path)
            self.report_skipped(what, data.skipped)
        else:
            turns = [t for f in hooked("sft_turns") if sft and (t := f(self.cfg)) is not None]
            data = generate_arithmetic_sft(
                self.tasks, n, error_rate, self.cfg.seed, self.variants,
                (lambda task, c, rng: [m for t in turns for m in t(task, c, rng)]) if turns
                else None)
            for rewrite in hooked("sft_conversations") if sft else ():
                data.conversations = rewrite(data.conversations, self.cfg)
        task_tools = self.tools.schemas() if self.tools else None
        data.tools = [row_tools or task_tools for row_tools in data.tools]
        return data

    def distill_data(self) -> ChatData:
        """The distill stage's conversations: ``distill.data``, or worked solutions."""
        d = self.cfg.distill
        return self.conversations(d.data, d.num_examples, 0.0, "distillation")

    def preference_pairs(self, pref: PairDataConfig
                         ) -> tuple[list[PreferencePair], list[PreferencePair]]:
        """Train and held-out pairs of ``pref`` (the ``pref`` or ``rm`` section): from its
        ``data`` (the last ``eval_pairs`` rows, at most a tenth, held out) or generated from
        the task's train and eval splits."""
        if pref.data is None:
            return (arithmetic_pairs(self.tasks, pref.num_pairs, self.cfg.seed),
                    arithmetic_pairs(self.tasks, pref.eval_pairs, self.cfg.seed, split="eval"))
        data = load_preference_data(pref.data)
        self.report_skipped("preference", data.skipped)
        held = min(pref.eval_pairs, len(data.pairs) // 10)
        return data.pairs[: len(data.pairs) - held], data.pairs[len(data.pairs) - held :]
