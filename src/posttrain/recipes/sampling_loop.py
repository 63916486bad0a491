"""``LoopRun``: what a sampling training loop (RL, on-policy distillation) needs besides its
own settings — the trainer, the tasks and their reward, held-out evaluation, where results go
and where to start. Each loop's run adds its settings as keyword-only fields, among them
``cfg`` with ``steps`` and ``eval_every``: ``RLRun`` (the sync and async RL loops) here,
``OPDRun`` beside on-policy distillation."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

from posttrain.config import (
    ActorConfig,
    AlgoConfig,
    CriticConfig,
    EvalConfig,
    RLConfig,
    ShapingRule,
)
from posttrain.engines import Engine
from posttrain.envs import Task
from posttrain.reporting import Reporter
from posttrain.rewards import RewardFunction
from posttrain.rollout import rollout
from posttrain.rollout.evaluation import evaluated
from posttrain.rollout.prompt_budgets import PromptBudgets
from posttrain.rollout.single_turn import RolloutPlan
from posttrain.train import PolicyTrainer, Trainer
from posttrain.train.rl_update import PolicySteps, PolicyUpdate
from posttrain.types import Episode


def due(every: int, step: int, steps: int) -> bool:
    """Whether what runs every ``every`` steps (0: never) follows step ``step`` (0-based) of
    ``steps``; it also follows the last step."""
    return bool(every) and ((step + 1) % every == 0 or step + 1 == steps)


@dataclass
class LoopRun:
    """Steps ``start_step .. cfg.steps`` on ``tasks``, logged as ``STAGE``;
    ``on_step_end(step)`` runs after each step (checkpoints)."""

    STAGE: ClassVar[str]
    trainer: PolicyTrainer
    tokenizer: Any
    tasks: Any
    eval_tasks: Sequence[Task]
    reward_fn: RewardFunction
    eval_cfg: EvalConfig
    accuracy_part: str
    reporter: Reporter
    seed: int = 0
    start_step: int = 0
    on_step_end: Callable[[int], None] | None = None
    cfg: Any = field(kw_only=True)

    def eval_due(self, step: int) -> bool:
        """Whether held-out evaluation follows step ``step`` (0-based)."""
        return due(self.cfg.eval_every, step, self.cfg.steps)

    def held_out(self, engine: Engine, step: int, rollout_fn: Callable[..., list] = rollout
                 ) -> dict[str, float]:
        """Held-out evaluation of the weights ``engine`` holds after step ``step`` (0-based);
        its samples go to the trackers as ``<stage>_step_<n>``."""
        episodes, metrics = evaluated(engine, self.tokenizer, self.eval_tasks, self.reward_fn,
                                      self.eval_cfg, self.accuracy_part, self.seed, rollout_fn)
        self.reporter.samples(f"{self.STAGE}_step_{step + 1}", episodes, self.tokenizer)
        return metrics

    @staticmethod
    def record_eval(step: int, result: dict[str, float], evals: list[dict]) -> dict[str, float]:
        """Append ``result`` to ``evals`` as step ``step``'s; returns its ``eval/`` metrics."""
        evals.append({"step": step + 1, **result})
        return {f"eval/{k}": v for k, v in result.items()}

    def finish_step(self, step: int, metrics: dict[str, float]) -> None:
        """Log step ``step``'s metrics, advance the progress bar, run ``on_step_end``."""
        self.reporter.log(self.STAGE, step + 1, metrics)
        self.reporter.advance(step + 1,
                              f"reward {metrics['reward']:.3f} acc {metrics['accuracy']:.3f}")
        if self.on_step_end is not None:
            self.on_step_end(step + 1)


@dataclass(kw_only=True)
class RLRun(LoopRun):
    """RL with ``cfg``, ``algo`` and ``actor``. With a ``critic`` (PPO), its values feed GAE
    and it trains on the returns alongside the actor; ``shaping`` rules reshape rewards before
    groups are filtered and scored (``prompt_budgets``: the per-prompt budgets of rules with
    ``budget: auto``). ``sleep_engines`` (``engine.sleep``): the engines free their memory
    for each update; the weight sync after it wakes them. ``evolve(step, episodes)`` runs
    after each update with the step's sampled episodes (SkillRL's skill evolution); its
    metrics are logged with the step's."""

    STAGE: ClassVar[str] = "rl"
    cfg: RLConfig
    algo: AlgoConfig
    actor: ActorConfig
    critic: Trainer | None = None
    critic_cfg: CriticConfig | None = None
    shaping: Sequence[ShapingRule] = ()
    prompt_budgets: PromptBudgets | None = None
    sleep_engines: bool = False
    evolve: Callable[[int, Sequence[Episode]], dict[str, float]] | None = None

    def rollout_plan(self) -> RolloutPlan:
        """Where the loop's episodes come from and how they are scored."""
        return RolloutPlan(self.tokenizer, self.tasks, self.reward_fn, self.cfg,
                           self.cfg.params((self.tokenizer.eos_token_id,)),
                           self.algo.dynamic_sampling, self.shaping, self.seed,
                           self.prompt_budgets)

    def policy_update(self) -> PolicyUpdate:
        return PolicyUpdate(
            trainer=self.trainer, algo=self.algo,
            steps=PolicySteps.of(self.cfg, self.algo, self.actor),
            pad_token_id=self.tokenizer.pad_token_id, part_weights=self.reward_fn.part_weights,
            critic=self.critic, critic_cfg=self.critic_cfg,
            token_stats=self.cfg.token_stats if self.cfg.save_episodes else 0)
