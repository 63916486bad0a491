"""Tinker's built-in losses, each a catalogue entry (``posttrain.algos``) fed from Tinker's
inputs and aggregated by ``token_sum``: a **sum** over the tokens of every datum of a request
(gradients accumulate across ``forward_backward`` calls until ``optim_step``). Position ``t``
of a datum scores ``target_tokens[t]`` after ``model_input[: t + 1]``; ``lp`` is the
trainer's log-prob of it and ``q`` the sampler's (``loss_fn_inputs["logprobs"]``).

- ``cross_entropy``: ``L = -sum_t w_t lp_t`` (``weights``): ``reinforce`` with the weights as
  advantages;
- ``importance_sampling``: ``L = -sum_t r_t A_t`` with ``r_t = exp(lp_t - q_t)``
  (``advantages``): ``ppo_clip`` with no band;
- ``ppo``: ``L = -sum_t min(r_t A_t, clip(r_t, lo, hi) A_t)``, ``lo``/``hi`` from
  ``loss_fn_config`` (or per-token inputs) ``clip_low_threshold`` / ``clip_high_threshold``,
  0.8 / 1.2 when absent: ``ppo_clip`` with ``eps_low = 1 - lo``, ``eps_high = hi - 1``;
- ``cispo``: ``L = -sum_t sg(clip(r_t, lo, hi)) lp_t A_t``, the clipped ratio a constant
  coefficient (no token's gradient is zeroed), ``lo``/``hi`` 0.0 / 4.0 when absent:
  ``cispo`` with ``r_min = lo``, ``r_max = hi``;
- ``dro``: ``L = -sum_t (lp_t A_t - beta/2 (lp_t - q_t)^2)``, ``beta`` from ``loss_fn_config``
  (required: Tinker documents no default): ``reinforce`` plus ``beta`` times the ``k2`` KL
  estimate against the sampler.

The formulas and defaults are Tinker's documented ones (docs/tinker.md); ratios are the
catalogue's (the log-ratio clamped to +-20).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import torch

from posttrain.algos import StepNorm, get

CLIP_DEFAULTS = {"clip_low_threshold": 0.8, "clip_high_threshold": 1.2}
CISPO_DEFAULTS = {"clip_low_threshold": 0.0, "clip_high_threshold": 4.0}
Inputs = Mapping[str, torch.Tensor]


class BadRequest(ValueError):
    """A request the server refuses for its content (inputs that do not fit the loss, another
    base model, an unsupported option): the client's error, never retried."""


def _needs(inputs: Inputs, lp: torch.Tensor, *keys: str) -> list[torch.Tensor]:
    """``inputs[key]`` for each key, as float32 on ``lp``'s device."""
    missing = [k for k in keys if k not in inputs]
    if missing:
        raise BadRequest(f"loss_fn_inputs lacks {missing}")
    return [inputs[k].to(torch.float32).to(lp.device) for k in keys]


def _summed(loss: torch.Tensor) -> torch.Tensor:
    """``token_sum`` of a datum's per-token loss, every position counted (one sequence of
    ``n`` tokens; its norm from the shape, without reading the device)."""
    n = float(loss.numel())
    return get("aggregation", "token_sum")(loss=loss, mask=torch.ones_like(loss),
                                           norm=StepNorm(n, float(n > 0), 1.0, n))


def _thresholds(lp: torch.Tensor, inputs: Inputs, config: Mapping[str, float],
                defaults: Mapping[str, float]) -> tuple[torch.Tensor, torch.Tensor]:
    """``(lo, hi)``: per token from ``inputs``, else from ``config``, else ``defaults``."""
    return tuple(inputs[k].to(lp) if k in inputs else
                 torch.as_tensor(float(config.get(k, defaults[k])), device=lp.device)
                 for k in CLIP_DEFAULTS)


def cross_entropy(lp: torch.Tensor, inputs: Inputs, config: Mapping[str, float]) -> torch.Tensor:
    (w,) = _needs(inputs, lp, "weights") if "weights" in inputs else [torch.ones_like(lp)]
    return _summed(get("policy_loss", "reinforce")(logp=lp, advantages=w)[0])


def importance_sampling(lp: torch.Tensor, inputs: Inputs,
                        config: Mapping[str, float]) -> torch.Tensor:
    q, adv = _needs(inputs, lp, "logprobs", "advantages")
    return _summed(get("policy_loss", "ppo_clip")(logp=lp, old_logp=q, advantages=adv,
                                                  eps_low=1.0, eps_high=float("inf"))[0])


def ppo(lp: torch.Tensor, inputs: Inputs, config: Mapping[str, float]) -> torch.Tensor:
    q, adv = _needs(inputs, lp, "logprobs", "advantages")
    lo, hi = _thresholds(lp, inputs, config, CLIP_DEFAULTS)
    return _summed(get("policy_loss", "ppo_clip")(logp=lp, old_logp=q, advantages=adv,
                                                  eps_low=1 - lo, eps_high=hi - 1)[0])


def cispo(lp: torch.Tensor, inputs: Inputs, config: Mapping[str, float]) -> torch.Tensor:
    q, adv = _needs(inputs, lp, "logprobs", "advantages")
    lo, hi = _thresholds(lp, inputs, config, CISPO_DEFAULTS)
    return _summed(get("policy_loss", "cispo")(logp=lp, old_logp=q, advantages=adv,
                                               r_min=lo, r_max=hi)[0])


def dro(lp: torch.Tensor, inputs: Inputs, config: Mapping[str, float]) -> torch.Tensor:
    q, adv = _needs(inputs, lp, "logprobs", "advantages")
    if "beta" not in config:
        raise BadRequest("loss_fn dro needs loss_fn_config beta (its quadratic penalty's "
                         "weight)")
    policy = get("policy_loss", "reinforce")(logp=lp, advantages=adv)[0]
    return _summed(policy + float(config["beta"]) * get("kl", "k2")(logp=lp, ref_logp=q))


LOSSES: dict[str, Callable[..., torch.Tensor]] = {
    "cross_entropy": cross_entropy, "importance_sampling": importance_sampling, "ppo": ppo,
    "cispo": cispo, "dro": dro}
