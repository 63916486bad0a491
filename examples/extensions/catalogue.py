"""Your own advantage estimator (with an option) and policy loss, named in config by dotted path
instead of a catalogue name (docs/extending.md). Run from the repository root:

    posttrain train configs/quickstart.yaml stages=[rl] --out runs/median \\
        "algo.advantage={name: examples/extensions/catalogue.py:median_baseline, scale: 0.5}" \\
        actor.policy_loss.name=examples/extensions/catalogue.py:clipped

Each is one function. Its parameters say what it reads: the inputs the RL update supplies by
name (an estimator's ``rewards``, ``group_ids``, ``mask``, ...; docs/estimators.md lists them
and what each needs of the run), the rest are its options, keys beside ``name`` with the
function's defaults. An estimator also declares its output (how its result reaches the
tokens) with ``register``; a policy loss needs no declaration.
"""

from __future__ import annotations

import torch

from posttrain.algos import importance_ratio, register


@register("advantage", output="episode", source="an example: the group's median as baseline")
def median_baseline(*, rewards: torch.Tensor, group_ids: torch.Tensor, mask: torch.Tensor,
                    scale: float = 1.0) -> torch.Tensor:
    """``A_i = scale (r_i - median_g)`` on every token of the episode (an even group's median
    is the lower of its two middle rewards)."""
    baseline = torch.stack([rewards[group_ids == g].median() for g in group_ids])
    return (scale * (rewards - baseline)).to(mask.dtype)[:, None] * mask


def clipped(*, logp: torch.Tensor, old_logp: torch.Tensor, advantages: torch.Tensor,
            eps_low: float = 0.2, eps_high: float = 0.2
            ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """PPO's clipped surrogate, the built-in ``ppo_clip`` without its dual clip:
    ``L = -min(rho A, clip(rho, 1 - eps_low, 1 + eps_high) A)``; the statistic ``clipped``
    marks the tokens whose ratio left the band."""
    rho = importance_ratio(logp, old_logp)
    objective = torch.minimum(rho * advantages,
                              torch.clamp(rho, 1 - eps_low, 1 + eps_high) * advantages)
    outside = ((rho < 1 - eps_low) | (rho > 1 + eps_high)).to(logp.dtype)
    return -objective, {"clipped": outside.detach()}
