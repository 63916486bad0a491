"""``RLRun``: what the synchronous and asynchronous RL loops share — a ``LoopRun`` with the
RL settings and the critic."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar

from posttrain.pipelines.loop_run import LoopRun
from posttrain.pipelines.policy_update import PolicyUpdate
from posttrain.pipelines.settings import AlgoConfig, RLConfig, ShapingRule
from posttrain.train import ActorConfig, CriticConfig, Trainer


@dataclass(kw_only=True)
class RLRun(LoopRun):
    """RL with ``cfg``, ``algo`` and ``actor``. With a ``critic`` (PPO), its values feed GAE
    and it trains on the returns alongside the actor; ``shaping`` rules reshape rewards before
    groups are filtered and scored."""

    STAGE: ClassVar[str] = "rl"
    cfg: RLConfig
    algo: AlgoConfig
    actor: ActorConfig
    critic: Trainer | None = None
    critic_cfg: CriticConfig | None = None
    shaping: Sequence[ShapingRule] = ()

    def policy_update(self) -> PolicyUpdate:
        return PolicyUpdate(
            self.trainer, self.cfg, self.algo, self.actor, self.tokenizer.pad_token_id,
            self.reward_fn.part_weights,
            self.critic, self.critic_cfg)
