"""Hooks: the few points where a feature plugs into the core, which names no feature. A feature
is one folder, ``posttrain/features/<name>/``, whose ``__init__.py`` holds ``FEATURE = Feature(
...)`` (a user's package registers one under the entry-point group ``posttrain.features``); the
core finds every feature and calls the hooks it declares, in the features' ``order``.

The hooks (each optional; a feature whose setting is off returns its input unchanged):

- ``rewards(rewards [E], update) -> [E]``: an RL update's per-episode rewards before the
  estimator (and before a KL in the reward is subtracted); ``update`` is an ``UpdateView``;
- ``advantages(adv [B, T], update) -> [B, T]``: the token advantages the estimator gave;
- ``shaping_inputs(episodes) -> {name: () -> value}``: inputs the feature offers reward
  shaping rules (``reward.shaping``), computed when a rule asks;
- ``needs_old_entropy(algo) -> bool``: the update computes the old policy's token entropy
  (``batch.old_entropy``) beside its log-probs;
- ``rollout_metrics(rollout) -> dict``: a rollout's (or an evaluation's) metrics of the
  feature's own episodes (empty for others); ``rollout`` is a ``RolloutView``;
- ``set_aside(episode) -> bool``: an episode that is not the task's (a grading prompt, say),
  left out of the task's reward and accuracy means;
- ``wrap_rollout(rollout_fn, cfg, tokenizer) -> rollout_fn``: what plays and scores a run's
  episodes, after the judges are attached (a wrapper with ``finish_group`` also finishes each
  group an asynchronous step takes);
- ``prepare_tasks(run, out) -> None``: a run's task side as it is built (``run``: its
  ``RunTasks``; ``out``: the run directory or None): the feature may add to ``run.tools``,
  wrap ``run.tasks`` and ``run.eval_tasks``, and keep what it made in ``run.state[name]``;
- ``after_update(parts, tokenizer) -> after | None``: run after each RL update,
  ``after(step, episodes) -> metrics`` with the step's task episodes (its metrics join the
  step's);
- ``checkpoint(parts) -> {key: value}``: entries a checkpoint's cursor keeps for the feature;
  ``resume(parts, cursor)``: the feature's state restored from a checkpoint's cursor;
- ``agent_options(cfg, tools) -> {keyword: value}``: keywords of the agent loop
  (``rollout.AgentRollout``) the feature sets, given the task's ``tools``;
- ``wrap_environment(make, cfg) -> make``: the agent loop's per-episode environment factory
  (``make`` may be None: no environment);
- ``wrap_training_rollout(rollout_fn, cfg, run) -> rollout_fn``: what an RL step plays to
  train on (never an evaluation), ``run`` the stage's ``RLRun``;
- ``eval_watch(parts, run, engine, evals) -> watch | None``: a metric of every held-out
  evaluation of the RL stage, ``watch(episodes) -> dict`` (``parts``: the run's ``RunParts``;
  ``evals``: the run's evaluations so far, where the watch may record its starting figures);
- ``sft_turns(cfg) -> then | None``: turns appended to generated SFT conversations,
  ``then(task, conversation, rng) -> [message]`` drawing from the generator's ``rng``;
- ``sft_conversations(conversations, cfg) -> conversations``: generated SFT conversations
  rewritten (the data of the ``sft`` stage, not distillation's);
- ``section``: the pydantic section (a ``config.section.Section``) of the feature's own keys,
  ``features.<name>`` in a run's config; the RL update's hooks read them in
  ``update.features[name]`` (absent: the feature is off);
- ``check(cfg)``: the feature's rules across a run's sections (a ``ValueError`` refuses it);
- ``scored_parts(cfg) -> [part]``: reward parts (verifier ``env``) the feature scores itself;
- ``trainer_addon(parts, model) -> TrainerAddon | None``: a module trained beside the policy,
  one for a run's stages (``parts``: the run's ``RunParts``; ``model``: the first stage's
  policy), which each stage's policy ``Trainer`` trains, checkpoints and resumes and the run
  saves beside every model it saves (``TrainerAddon``);
- ``engine_options(cfg, start_dir) -> {keyword: value}``: keywords of the run's engine
  member's ``build`` (``recipes.placement.make_engine``): an engine add-on that starts from
  beside the run's starting model, in ``start_dir``, all run;
- ``engine_metrics(engine) -> measured | None``: called before a held-out evaluation plays
  its episodes, ``measured() -> dict`` after it: the feature's figures of what the engine did
  for them.

- ``reward_model(rm) -> train | None``: a reward model the feature trains itself for the
  ``rm`` section (``posttrain reward-model``), ``train(parts, backbone, out) -> evaluations``;
- ``active(cfg) -> bool``: whether the feature is on in the run config ``cfg`` (undeclared: when
  ``features.<name>`` is set).

A feature also declares what it refuses, ``refuses={shape: why}``: the run shapes it cannot work
in (``SHAPES``), each with the error the config gives when the feature is ``active`` in a run of
that shape (``why`` is formatted with ``cfg``: ``"task.name={cfg.task.name} is ..."``). The config
derives these refusals; no rule of the core names the feature.

``section``, ``check``, ``scored_parts`` and ``active`` run when a config is validated, which never
imports torch: their modules import no heavy library.

A hook given as a string ``"module:attr"`` (``.module`` relative to the feature's package) is
imported on first use, so declaring a feature imports no heavy library.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field, fields
from functools import cache
from importlib.metadata import entry_points
from pathlib import Path
from types import MappingProxyType
from typing import Any, Protocol

FEATURES = "posttrain.features"  # the package whose sub-packages are the built-in features
ENTRY_POINTS = "posttrain.features"  # the entry-point group of a user's features

Hook = Callable[..., Any] | str | None
NO_SETTINGS: Mapping[str, Any] = MappingProxyType({})  # no feature's own keys are set
SHAPES = {  # the run shapes a feature may refuse (``Feature.refuses``), each what it means
    "async": "the RL stage samples asynchronously (rl.mode=async)",
    "agent": "the task is an agent task, not single completions",
    "processes": "several trainer processes (dist.trainer_processes > 1)",
}


@dataclass(frozen=True)
class UpdateView:
    """What an RL update's hooks see: the ``batch`` of its ``episodes`` (one row a segment),
    with old log-probs and entropy where computed, the ``algo`` section and the features'
    own settings (``features.<name>`` of the run's config, by name)."""

    batch: Any
    episodes: Sequence[Any]
    algo: Any
    features: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class RolloutView:
    """What a rollout's metric hooks see: its task ``episodes``, those set ``aside`` (not the
    task's) and the features' own settings, by name."""

    episodes: Sequence[Any]
    aside: Sequence[Any] = ()
    features: Mapping[str, Any] = field(default_factory=dict)


class TrainerAddon(Protocol):
    """A module trained beside the policy (hook ``trainer_addon``): a policy ``Trainer``
    calls ``attach`` when it is made (the add-on's own optimiser, afresh), ``step`` after each
    optimiser step it does not skip (the returned metrics join the step's), and keeps
    ``state_dict`` in its own under ``name`` (a key of the trainer's state no other uses);
    ``save`` puts the module beside a saved model (a stage's, a checkpoint's)."""

    name: str

    def attach(self, device: Any) -> None: ...

    def step(self, model: Any, batch: Any, micro_size: int,
             autocast: Callable[[], AbstractContextManager]) -> dict[str, float]: ...

    def state_dict(self) -> dict: ...

    def load_state_dict(self, state: dict) -> None: ...

    def save(self, directory: Path) -> None: ...


@dataclass(frozen=True)
class Feature:
    """A feature: its ``name``, where it runs among the features (``order``, low first) and
    its hooks and the run shapes it ``refuses`` (see the module docstring). ``package`` anchors
    relative hook paths."""

    name: str
    order: int = 50
    package: str = ""
    rewards: Hook = None
    advantages: Hook = None
    needs_old_entropy: Hook = None
    shaping_inputs: Hook = None
    rollout_metrics: Hook = None
    set_aside: Hook = None
    wrap_rollout: Hook = None
    prepare_tasks: Hook = None
    after_update: Hook = None
    checkpoint: Hook = None
    resume: Hook = None
    agent_options: Hook = None
    wrap_environment: Hook = None
    wrap_training_rollout: Hook = None
    eval_watch: Hook = None
    sft_turns: Hook = None
    sft_conversations: Hook = None
    section: Hook = None
    check: Hook = None
    scored_parts: Hook = None
    trainer_addon: Hook = None
    engine_options: Hook = None
    engine_metrics: Hook = None
    reward_model: Hook = None
    active: Hook = None
    refuses: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        unknown = sorted(set(self.refuses) - set(SHAPES))
        if unknown:
            raise ValueError(f"feature {self.name!r} refuses {unknown}: not run shapes "
                             f"({', '.join(SHAPES)})")

    def hook(self, name: str) -> Callable[..., Any] | None:
        """The callable of hook ``name`` (a string path imported now), or None."""
        value = getattr(self, name)
        if not isinstance(value, str):
            return value
        module, _, attr = value.partition(":")
        return getattr(importlib.import_module(module, self.package or None), attr)


HOOKS = tuple(f.name for f in fields(Feature)
              if f.name not in ("name", "order", "package", "refuses"))


@cache
def features() -> tuple[Feature, ...]:
    """Every feature: the built-in ones (``posttrain/features/*/``) and those of installed
    packages (entry points ``posttrain.features``), by ``order`` then name."""
    package = importlib.import_module(FEATURES)
    found = [importlib.import_module(f"{FEATURES}.{info.name}").FEATURE
             for info in pkgutil.iter_modules(package.__path__) if info.ispkg]
    found += [ep.load() for ep in entry_points(group=ENTRY_POINTS)]
    for f in found:
        if not isinstance(f, Feature):
            raise TypeError(f"a feature must be a posttrain.hooks.Feature, not {f!r}")
    names = [f.name for f in found]
    if len(set(names)) < len(names):
        raise ValueError(f"two features share a name: {sorted(names)}")
    return tuple(sorted(found, key=lambda f: (f.order, f.name)))


def feature(name: str) -> Feature:
    """The feature called ``name``."""
    for f in features():
        if f.name == name:
            return f
    raise ValueError(f"no feature {name!r}; the features: {', '.join(f.name for f in features())}")


@cache
def hooked(name: str) -> tuple[Callable[..., Any], ...]:
    """The callables of hook ``name``, one per feature that declares it, in order."""
    if name not in HOOKS:
        raise ValueError(f"no hook {name!r}; the hooks: {', '.join(HOOKS)}")
    return tuple(h for f in features() if (h := f.hook(name)) is not None)

