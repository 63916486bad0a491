"""Tinker's built-in losses, each a **sum** over the tokens of every datum of a request
(gradients accumulate across ``forward_backward`` calls until ``optim_step``). Position ``t``
of a datum scores ``target_tokens[t]`` after ``model_input[: t + 1]``; ``lp`` is the
trainer's log-prob of it and ``q`` the sampler's (``loss_fn_inputs["logprobs"]``).

- ``cross_entropy``: ``L = -sum_t w_t lp_t`` (``weights``);
- ``importance_sampling``: ``L = -sum_t r_t A_t`` with ``r_t = exp(lp_t - q_t)``
  (``advantages``);
- ``ppo``: ``L = -sum_t min(r_t A_t, clip(r_t, lo, hi) A_t)``, ``lo``/``hi`` from
  ``loss_fn_config`` (or per-token inputs) ``clip_low_threshold`` / ``clip_high_threshold``,
  0.8 / 1.2 when absent.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import torch

CLIP_DEFAULTS = {"clip_low_threshold": 0.8, "clip_high_threshold": 1.2}


class BadRequest(ValueError):
    """A request the server refuses for its content (inputs that do not fit the loss, another
    base model, an unsupported option): the client's error, never retried."""


def _needs(inputs: Mapping[str, torch.Tensor], *keys: str) -> list[torch.Tensor]:
    missing = [k for k in keys if k not in inputs]
    if missing:
        raise BadRequest(f"loss_fn_inputs lacks {missing}")
    return [inputs[k].to(torch.float32) for k in keys]


def cross_entropy(lp: torch.Tensor, inputs: Mapping[str, torch.Tensor],
                  config: Mapping[str, float]) -> torch.Tensor:
    (w,) = _needs(inputs, "weights") if "weights" in inputs else [torch.ones_like(lp)]
    return -(w.to(lp.device) * lp).sum()


def importance_sampling(lp: torch.Tensor, inputs: Mapping[str, torch.Tensor],
                        config: Mapping[str, float]) -> torch.Tensor:
    q, adv = (t.to(lp.device) for t in _needs(inputs, "logprobs", "advantages"))
    return -(torch.exp(lp - q) * adv).sum()


def ppo(lp: torch.Tensor, inputs: Mapping[str, torch.Tensor],
        config: Mapping[str, float]) -> torch.Tensor:
    q, adv = (t.to(lp.device) for t in _needs(inputs, "logprobs", "advantages"))
    lo, hi = (inputs[k].to(lp) if k in inputs else float(config.get(k, CLIP_DEFAULTS[k]))
              for k in CLIP_DEFAULTS)
    ratio = torch.exp(lp - q)
    clipped = torch.minimum(torch.maximum(ratio, torch.as_tensor(lo, device=lp.device)),
                            torch.as_tensor(hi, device=lp.device))
    return -torch.minimum(ratio * adv, clipped * adv).sum()


LOSSES: dict[str, Callable[..., torch.Tensor]] = {
    "cross_entropy": cross_entropy, "importance_sampling": importance_sampling, "ppo": ppo}
