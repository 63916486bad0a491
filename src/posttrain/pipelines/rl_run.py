"""``RLRun``: what the synchronous and asynchronous RL loops share — the trainer (and critic),
the tasks, the reward, the settings, where results go, and where to start."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from posttrain.envs import Task
from posttrain.pipelines.policy_update import PolicyUpdate
from posttrain.pipelines.report import Reporter
from posttrain.pipelines.settings import AlgoConfig, EvalConfig, RLConfig, ShapingRule
from posttrain.rewards import RewardFunction
from posttrain.train import ActorConfig, CriticConfig, Trainer


@dataclass
class RLRun:
    """Steps ``start_step .. cfg.steps`` of RL on ``tasks``. With a ``critic`` (PPO), its
    values feed GAE and it trains on the returns alongside the actor; ``shaping`` rules reshape
    rewards before groups are filtered and scored; ``on_step_end(step)`` runs after each step
    (checkpoints)."""

    trainer: Trainer
    tokenizer: Any
    tasks: Any
    eval_tasks: Sequence[Task]
    reward_fn: RewardFunction
    cfg: RLConfig
    algo: AlgoConfig
    actor: ActorConfig
    eval_cfg: EvalConfig
    accuracy_part: str
    reporter: Reporter
    seed: int = 0
    start_step: int = 0
    on_step_end: Callable[[int], None] | None = None
    critic: Trainer | None = None
    critic_cfg: CriticConfig | None = None
    shaping: Sequence[ShapingRule] = ()

    def policy_update(self) -> PolicyUpdate:
        return PolicyUpdate(
            self.trainer, self.cfg, self.algo, self.actor, self.tokenizer.pad_token_id,
            {name: weight for name, (_, weight) in self.reward_fn.weights.items()},
            self.critic, self.critic_cfg)

    def eval_due(self, step: int) -> bool:
        """Whether held-out evaluation follows step ``step`` (0-based)."""
        every = self.cfg.eval_every
        return bool(every) and ((step + 1) % every == 0 or step + 1 == self.cfg.steps)

    def finish_step(self, step: int, metrics: dict[str, float]) -> None:
        """Log step ``step``'s metrics, advance the progress bar, run ``on_step_end``."""
        self.reporter.log("rl", step + 1, metrics)
        self.reporter.advance(step + 1,
                              f"reward {metrics['reward']:.3f} acc {metrics['accuracy']:.3f}")
        if self.on_step_end is not None:
            self.on_step_end(step + 1)
