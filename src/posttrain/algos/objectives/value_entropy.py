"""The critic's loss and the entropy bonus (docs/algorithms.md)."""

from __future__ import annotations

import torch

from posttrain.algos.registry import register
from posttrain.algos.tensors import require_finite


@register("policy_loss", "value_clip",
          source=("PPO value clipping as in DeepSpeed-Chat (Yao et al. 2023, arXiv 2308.01320), "
                  "verl, OpenRLHF"))
def value_clip(
    *, values: torch.Tensor, old_values: torch.Tensor, returns: torch.Tensor,
    cliprange_value: float = 0.2,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """``L_t = 1/2 max((V - ret)^2, (clip(V, V_old -+ c) - ret)^2)``; aggregate with the
    actor's mode."""
    require_finite("value_clip", values=values, old_values=old_values, returns=returns)
    clipped_v = old_values + (values - old_values).clamp(-cliprange_value, cliprange_value)
    plain, clipped = (values - returns) ** 2, (clipped_v - returns) ** 2
    return 0.5 * torch.maximum(plain, clipped), {"clipped": (clipped > plain).to(values.dtype)}


@register("policy_loss", "entropy_bonus", aliases=("entropy_coeff", "entropy_coef"),
          source=("Adaptive entropy control: He et al. 2025, 'Skywork Open Reasoner 1 Technical "
                  "Report', arXiv 2505.22312"))
def entropy_bonus(
    *, entropy: torch.Tensor, coef: float
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """``L_t = -alpha H_t`` (a bonus: the loss falls as entropy rises); aggregate with the
    actor's mode. ``AdaptiveEntropyCoef`` chooses ``alpha`` per step."""
    return -coef * entropy, {}


class AdaptiveEntropyCoef:
    """Skywork-OR1's controller: ``alpha`` starts at 0; each step whose batch entropy is below
    ``target`` raises it by ``delta`` and applies it, other steps apply 0 (``alpha`` is kept)."""

    def __init__(self, target: float = 0.2, delta: float = 0.005) -> None:
        self.target, self.delta, self.alpha = target, delta, 0.0

    def step(self, batch_entropy: float) -> float:
        """The coefficient to apply this step."""
        if batch_entropy < self.target:
            self.alpha += self.delta
            return self.alpha
        return 0.0
