"""Tinker's built-in losses, each a **sum** over the tokens of every datum of a request
(gradients accumulate across ``forward_backward`` calls until ``optim_step``). Position ``t``
of a datum scores ``target_tokens[t]`` after ``model_input[: t + 1]``; ``lp`` is the
trainer's log-prob of it and ``q`` the sampler's (``loss_fn_inputs["logprobs"]``).

- ``cross_entropy``: ``L = -sum_t w_t lp_t`` (``weights``);
- ``importance_sampling``: ``L = -sum_t r_t A_t`` with ``r_t = exp(lp_t - q_t)``
  (``advantages``);
- ``ppo``: ``L = -sum_t min(r_t A_t, clip(r_t, lo, hi) A_t)``, ``lo``/``hi`` from
  ``loss_fn_config`` (or per-token inputs) ``clip_low_threshold`` / ``clip_high_threshold``,
  0.8 / 1.2 when absent;
- ``cispo``: ``L = -sum_t sg(clip(r_t, lo, hi)) lp_t A_t``, the clipped ratio a constant
  coefficient (no token's gradient is zeroed), ``lo``/``hi`` 0.0 / 4.0 when absent;
- ``dro``: ``L = -sum_t (lp_t A_t - beta/2 (lp_t - q_t)^2)``, ``beta`` from ``loss_fn_config``
  (required: Tinker documents no default).

The formulas and defaults are Tinker's documented ones (docs/tinker.md).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import torch

CLIP_DEFAULTS = {"clip_low_threshold": 0.8, "clip_high_threshold": 1.2}
CISPO_DEFAULTS = {"clip_low_threshold": 0.0, "clip_high_threshold": 4.0}


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


def _clipped_ratio(lp: torch.Tensor, q: torch.Tensor, inputs: Mapping[str, torch.Tensor],
                   config: Mapping[str, float], defaults: Mapping[str, float]
                   ) -> tuple[torch.Tensor, torch.Tensor]:
    """``(r, clip(r, lo, hi))``, the thresholds per token from ``inputs``, else from
    ``config``, else ``defaults``."""
    lo, hi = (inputs[k].to(lp) if k in inputs else
              torch.as_tensor(float(config.get(k, defaults[k])), device=lp.device)
              for k in CLIP_DEFAULTS)
    ratio = torch.exp(lp - q)
    return ratio, torch.minimum(torch.maximum(ratio, lo), hi)


def ppo(lp: torch.Tensor, inputs: Mapping[str, torch.Tensor],
        config: Mapping[str, float]) -> torch.Tensor:
    q, adv = (t.to(lp.device) for t in _needs(inputs, "logprobs", "advantages"))
    ratio, clipped = _clipped_ratio(lp, q, inputs, config, CLIP_DEFAULTS)
    return -torch.minimum(ratio * adv, clipped * adv).sum()


def cispo(lp: torch.Tensor, inputs: Mapping[str, torch.Tensor],
          config: Mapping[str, float]) -> torch.Tensor:
    q, adv = (t.to(lp.device) for t in _needs(inputs, "logprobs", "advantages"))
    _, clipped = _clipped_ratio(lp, q, inputs, config, CISPO_DEFAULTS)
    return -(clipped.detach() * lp * adv).sum()


def dro(lp: torch.Tensor, inputs: Mapping[str, torch.Tensor],
        config: Mapping[str, float]) -> torch.Tensor:
    q, adv = (t.to(lp.device) for t in _needs(inputs, "logprobs", "advantages"))
    if "beta" not in config:
        raise BadRequest("loss_fn dro needs loss_fn_config beta (its quadratic penalty's "
                         "weight)")
    return -(lp * adv - 0.5 * float(config["beta"]) * (lp - q) ** 2).sum()


LOSSES: dict[str, Callable[..., torch.Tensor]] = {
    "cross_entropy": cross_entropy, "importance_sampling": importance_sampling, "ppo": ppo,
    "cispo": cispo, "dro": dro}
