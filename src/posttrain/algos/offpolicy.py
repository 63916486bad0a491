"""Off-policy and train/inference mismatch correction (docs/algorithms.md).

``lambda_t = old_logp_t - behaviour_logp_t`` (trainer vs engine). Every weight is detached and
multiplies the per-token policy loss; masks multiply the loss mask.
"""

from __future__ import annotations

import torch

from posttrain.algos.registry import register
from posttrain.algos.tensors import LOG_RATIO_CLAMP, require_finite


def _log_ratio(old_logp: torch.Tensor, behaviour_logp: torch.Tensor, mask: torch.Tensor):
    require_finite("off-policy weight", old_logp=old_logp, behaviour_logp=behaviour_logp)
    return ((old_logp - behaviour_logp) * mask).detach().clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)


@register("offpolicy", "tis_token", aliases=("token_truncate", "tis"),
          source=("TIS: Yao et al. 2025, 'Your Efficient RL Framework Secretly Brings You "
                  "Off-Policy RL Training' (blog)"))
def tis_token(
    *, old_logp: torch.Tensor, behaviour_logp: torch.Tensor, mask: torch.Tensor,
    c_min: float = 0.0, c_max: float = 2.0,
) -> torch.Tensor:
    """``w_t = clip(exp(lambda_t), C_min, C_max)``."""
    lam = _log_ratio(old_logp, behaviour_logp, mask)
    return lam.exp().clamp(c_min, c_max) * mask


@register("offpolicy", "tis_seq", aliases=("sequence_truncate",),
          source=("TIS: Yao et al. 2025, 'Your Efficient RL Framework Secretly Brings You "
                  "Off-Policy RL Training' (blog)"))
def tis_seq(
    *, old_logp: torch.Tensor, behaviour_logp: torch.Tensor, mask: torch.Tensor,
    c_min: float = 0.0, c_max: float = 2.0,
) -> torch.Tensor:
    """``w_i = clip(exp(sum_t lambda_t), C_min, C_max)`` on every token of the sequence."""
    lam = _log_ratio(old_logp, behaviour_logp, mask).sum(dim=1, keepdim=True)
    return lam.clamp(max=LOG_RATIO_CLAMP).exp().clamp(c_min, c_max) * mask


@register("offpolicy", "mis_token", aliases=("token_mask", "icepop"),
          source=("IcePop: Ling Team 2025, Ring-1T report, arXiv 2510.18855; MiMo-V2.6 IS mask "
                  "(Xiaomi 2026)"))
def mis_token(
    *, old_logp: torch.Tensor, behaviour_logp: torch.Tensor, mask: torch.Tensor,
    c_lo: float = 0.5, c_hi: float = 5.0,
) -> torch.Tensor:
    """``w_t = exp(lambda_t) 1[C_lo <= exp(lambda_t) <= C_hi]``: outlier tokens are dropped."""
    ratio = _log_ratio(old_logp, behaviour_logp, mask).exp()
    return ratio * ((ratio >= c_lo) & (ratio <= c_hi)) * mask


@register("offpolicy", "mis_seq", aliases=("sequence_mask", "seq_mask_tis"),
          source=("IcePop: Ling Team 2025, Ring-1T report, arXiv 2510.18855; TIS: Yao et al. "
                  "2025, 'Your Efficient RL Framework Secretly Brings You Off-Policy RL Training' "
                  "(blog); verl, OpenRLHF"))
def mis_seq(
    *, old_logp: torch.Tensor, behaviour_logp: torch.Tensor, mask: torch.Tensor,
    c_lo: float = 0.5, c_hi: float = 5.0,
) -> torch.Tensor:
    """``w_it = exp(lambda_t) 1[C_lo <= exp(mean_t lambda_t) <= C_hi]``: a sequence whose
    geometric-mean ratio is an outlier is dropped whole."""
    lam = _log_ratio(old_logp, behaviour_logp, mask)
    geo = (lam.sum(dim=1) / mask.sum(dim=1).clamp(min=1)).exp()[:, None]
    return lam.exp() * ((geo >= c_lo) & (geo <= c_hi)) * mask


def importance_stats(weights: torch.Tensor, mask: torch.Tensor) -> dict[str, float]:
    """Effective sample size ``(sum w)^2 / sum w^2`` as a share of the valid tokens."""
    w = weights[mask > 0]
    if w.numel() == 0 or float((w**2).sum()) == 0:
        return {"ess": 0.0}
    return {"ess": float(w.sum() ** 2 / (w**2).sum()) / w.numel()}


@register("offpolicy", "staleness_mask",
          source=("DeepSeek-V4.1 Flash technical report (DeepSeek-AI 2026); AReaL (Fu et al. "
                  "2025, arXiv 2505.24298), prime-rl"))
def staleness_mask(
    *, versions: torch.Tensor, mask: torch.Tensor, current_version: int,
    max_off_policy_steps: int | None = None,
) -> torch.Tensor:
    """``m_t <- m_t 1[v_now - v_t <= S_max]`` per token (a partial rollout may mix versions);
    ``S_max = None`` keeps every token."""
    if max_off_policy_steps is None:
        return mask
    return mask * ((current_version - versions) <= max_off_policy_steps).to(mask.dtype)


@register("offpolicy", "opsm",
          source="DeepSeek-V3.2 (DeepSeek-AI 2025, arXiv 2512.02556), off-policy sequence masking")
def opsm(
    *, behaviour_logp: torch.Tensor, logp: torch.Tensor, advantages: torch.Tensor,
    mask: torch.Tensor, delta: float,
) -> torch.Tensor:
    """Off-policy negative mask: a sequence is dropped iff ``A_i < 0`` and
    ``mean_t (behaviour_logp - sg logp) > delta``. Returns the new loss mask."""
    require_finite("opsm", behaviour_logp=behaviour_logp, logp=logp)
    n = mask.sum(dim=1).clamp(min=1)
    drift = ((behaviour_logp - logp.detach()) * mask).sum(dim=1) / n
    seq_adv = advantages if advantages.dim() == 1 else (advantages * mask).sum(dim=1) / n
    drop = (seq_adv < 0) & (drift > delta)
    return mask * (~drop).to(mask.dtype)[:, None]


@register("offpolicy", "m2po",
          source="M2PO: Zheng et al. 2025, 'Prosperity before Collapse', arXiv 2510.01161; AReaL")
def m2po(
    *, old_logp: torch.Tensor, behaviour_logp: torch.Tensor, mask: torch.Tensor,
    tau: float = 0.04,
) -> torch.Tensor:
    """Second-moment trust region: with ``d_t = (old_logp - behaviour_logp)^2`` on the valid
    tokens sorted in decreasing order, the first ``j`` are masked, ``j`` the least for which
    the mean of the rest is ``< tau`` (all but the smallest when none is), over the tokens it
    is given (the trainer gives a micro-batch's). Returns the mask."""
    d = _log_ratio(old_logp, behaviour_logp, mask) ** 2
    valid = torch.nonzero(mask.flatten() > 0).flatten()
    if len(valid) == 0:
        return mask
    values, order = torch.sort(d.flatten()[valid].double(), descending=True, stable=True)
    n = len(values)
    suffix_mean = values.flip(0).cumsum(0).flip(0) / torch.arange(n, 0, -1, dtype=values.dtype,
                                                                 device=values.device)
    below = torch.nonzero(suffix_mean < tau).flatten()
    j = int(below[0]) if len(below) else n - 1
    out = mask.clone()
    out.view(-1)[valid[order[:j]]] = 0
    return out


@register("offpolicy", "kpop",
          source=("KPop: Guo, Sun et al. (Ant Group Ring team) 2026, 'Taming Training-Inference "
                  "Mismatch in RL with Adaptive Masking Regions' (blog); AReaL (binary_kl)"))
def kpop(
    *, old_logp: torch.Tensor, behaviour_logp: torch.Tensor, mask: torch.Tensor,
    phi: float = 0.1,
) -> torch.Tensor:
    """A token is kept iff ``max(D_B(p||q), D_B(q||p)) <= phi``: ``p`` the trainer's and
    ``q`` the engine's probability of it (each clamped to ``[1e-8, 1 - 1e-8]``), ``D_B(p||q)
    = p log(p/q) + (1-p) log((1-p)/(1-q))`` the KL of the two Bernoullis. Returns the mask."""
    require_finite("kpop", old_logp=old_logp, behaviour_logp=behaviour_logp)
    p = old_logp.detach().double().exp().clamp(1e-8, 1 - 1e-8)
    q = behaviour_logp.detach().double().exp().clamp(1e-8, 1 - 1e-8)

    def binary_kl(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return a * (a / b).log() + (1 - a) * ((1 - a) / (1 - b)).log()

    far = torch.maximum(binary_kl(p, q), binary_kl(q, p)) > phi
    return mask * (~far).to(mask.dtype)


@register("offpolicy", "keep_sampling_mask",
          source="DeepSeek-V3.2 (DeepSeek-AI 2025, arXiv 2512.02556), Keep Sampling Mask")
def keep_sampling_mask(
    *, logits: torch.Tensor, temperature: float = 1.0, top_k: int = 0, top_p: float = 1.0,
    keep: torch.Tensor | None = None,
) -> torch.Tensor:
    """Log-probs over the engine's truncated support: ``pi(v) 1[v in S] / sum_S pi`` (-inf
    outside). Top-k keeps the k largest; top-p the smallest prefix by probability whose mass
    reaches ``top_p`` (the top token always); ``keep [...]`` token ids are in ``S`` whatever
    their rank. The trainer applies this with ``keep`` = the sampled tokens before log-probs,
    KL and entropy, so they describe the distribution actually sampled from and a token the
    engine drew at the top-p boundary never scores -inf through rounding."""
    z = logits.to(torch.promote_types(logits.dtype, torch.float32))
    z = z / (temperature if temperature > 0 else 1.0)
    drop = torch.zeros(z.shape, dtype=torch.bool, device=z.device)
    if top_k and top_k < z.shape[-1]:
        drop |= z < torch.topk(z, top_k, dim=-1).values[..., -1:]
    if top_p < 1.0:
        sorted_z, order = torch.sort(z.masked_fill(drop, float("-inf")), dim=-1,
                                     descending=True)
        probs = torch.softmax(sorted_z, dim=-1)
        drop |= torch.zeros_like(drop).scatter(-1, order, probs.cumsum(-1) - probs >= top_p)
    if keep is not None:
        drop &= ~torch.zeros_like(drop).scatter(-1, keep.unsqueeze(-1), True)
    return torch.log_softmax(z.masked_fill(drop, float("-inf")), dim=-1)


@register("offpolicy", "routing_replay", aliases=("r3", "rollout_routing_replay"),
          source=("DeepSeek-V3.2 (DeepSeek-AI 2025, arXiv 2512.02556), Keep Routing; Composer 2 "
                  "(Cursor 2026, arXiv 2603.24477)"))
def routing_replay(*, router_logits: torch.Tensor, forced_experts: torch.Tensor) -> torch.Tensor:
    """MoE gate weights over the replayed experts: ``softmax`` of the current router logits
    restricted to ``forced_experts [..., k]`` (the engine's choices), so the router keeps its
    gradient while the trainer uses the experts the engine used."""
    return torch.softmax(router_logits.gather(-1, forced_experts), dim=-1)
