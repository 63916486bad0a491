"""Step- and token-level credit assignment (docs/algorithms.md): estimators that need structure
beyond one reward a sequence (anchor states, trees, per-token statistics, grader scores,
flagged error tokens). The agent harness maps their outputs onto episodes."""

from __future__ import annotations

import math
from collections.abc import Hashable, Sequence

import torch

from posttrain.algos.advantages import grpo
from posttrain.algos.registry import register
from posttrain.algos.tensors import EPS, group_stats, normalise, per_token, require_finite


@register("advantage", "gigpo",
          source=("GiGPO: Feng et al. 2025, 'Group-in-Group Policy Optimization for LLM Agent "
                  "Training', arXiv 2505.10978"), output="step")
def gigpo(
    *, rewards: torch.Tensor, group_ids: torch.Tensor, step_states: Sequence[Sequence[Hashable]],
    step_rewards: Sequence[Sequence[float]] | None = None,
    step_actions: Sequence[Sequence[Hashable]] | None = None, gamma: float = 0.95,
    omega: float = 1.0, merge_same_action: bool = False, eps: float = EPS,
) -> list[torch.Tensor]:
    """``A_t = A_E(tau) + omega A_S(a_t)``: ``A_E`` = ``grpo`` on episode rewards; ``A_S`` =
    the step return ``R_t = sum_{k>=t} gamma^(k-t) r_k`` normalised within its anchor group
    (every step, of any rollout of the same prompt, taken from the same state).

    Without ``step_rewards`` the episode reward is the last step's. ``merge_same_action``
    first averages returns over identical (state, action). Returns one ``[n_steps]`` tensor
    per episode, for the action tokens of each step.
    """
    require_finite("gigpo", rewards=rewards)
    n = len(step_states)
    if merge_same_action and step_actions is None:
        raise ValueError("gigpo: merge_same_action needs step_actions")
    episode = grpo(rewards=rewards, group_ids=group_ids, mask=torch.ones(n, 1))[:, 0]
    returns: list[list[float]] = []
    anchors: dict[tuple, list[tuple[int, int]]] = {}
    for i, states in enumerate(step_states):
        rs = list(step_rewards[i]) if step_rewards is not None else [0.0] * (len(states) - 1) + [
            float(rewards[i])]
        acc, out = 0.0, []
        for r in reversed(rs):
            acc = r + gamma * acc
            out.append(acc)
        returns.append(out[::-1])
        for t, s in enumerate(states):
            anchors.setdefault((int(group_ids[i]), s), []).append((i, t))
    step_adv = [torch.zeros(len(s), dtype=torch.float64) for s in step_states]
    for members in anchors.values():
        keys = [(i, t) if not merge_same_action else step_actions[i][t] for i, t in members]
        distinct = list(dict.fromkeys(keys))
        vals = torch.tensor([
            sum(returns[i][t] for (i, t), k in zip(members, keys) if k == d)
            / sum(k == d for k in keys) for d in distinct], dtype=torch.float64)
        mean, std, _ = group_stats(vals, torch.zeros(len(vals), dtype=torch.long))
        norm = normalise(vals, mean, std, eps)
        for (i, t), k in zip(members, keys):
            step_adv[i][t] = norm[distinct.index(k)]
    return [episode[i] + omega * step_adv[i] for i in range(n)]


@register("advantage", "tree_grpo",
          source=("Tree-GRPO: Ji et al. 2025, 'Tree Search for LLM Agent Reinforcement Learning', "
                  "arXiv 2509.21240"), output="episode")
def tree_grpo(
    *, rewards: torch.Tensor, tree_ids: torch.Tensor, group_ids: torch.Tensor, mask: torch.Tensor,
    eps: float = EPS,
) -> torch.Tensor:
    """``A = grpo over the trajectories of the same tree + grpo over all G of the prompt``.
    A branch's mask covers only tokens generated after its branch point."""
    intra = grpo(rewards=rewards, group_ids=tree_ids, mask=mask, eps=eps)
    return intra + grpo(rewards=rewards, group_ids=group_ids, mask=mask, eps=eps)


@register("advantage", "taco",
          source=("TACO: 'When Implausible Tokens Get Reinforced: Tail-Aware Credit Calibration "
                  "for LLM Reinforcement Learning' (no arXiv id found)"))
def taco(
    *, advantages: torch.Tensor, old_logp: torch.Tensor, old_entropy: torch.Tensor, alpha: float,
    lam: float,
) -> torch.Tensor:
    """Positive advantages of tail tokens shrink: ``r_t = -log p_t - H_t + log alpha``;
    ``w_t = 1 - lam (1 - exp(-r_t))`` if ``r_t > 0`` else 1; ``A_t <- w_t A_t`` where ``A > 0``.
    """
    require_finite("taco", advantages=advantages, old_logp=old_logp, old_entropy=old_entropy)
    if alpha <= 0 or not 0 <= lam <= 1:
        raise ValueError(f"taco: need alpha > 0 and lam in [0, 1], got {alpha}, {lam}")
    r_tail = -old_logp - old_entropy + math.log(alpha)
    w = torch.where(r_tail > 0, 1 - lam * (1 - torch.exp(-r_tail)), torch.ones_like(r_tail))
    return torch.where(advantages > 0, w * advantages, advantages)


@register("advantage", "top_entropy", aliases=("entropy_quantile", "high_entropy_tokens"),
          source=("Wang et al. (Qwen) 2025, 'Beyond the 80/20 Rule: High-Entropy Minority "
                  "Tokens', arXiv 2506.01939"))
def top_entropy(
    *, advantages: torch.Tensor, old_entropy: torch.Tensor, mask: torch.Tensor, rho: float = 0.2,
) -> torch.Tensor:
    """Only the highest-entropy share ``rho`` of the batch's tokens keeps its advantage:
    ``A_t <- A_t 1[H_t >= tau]``, ``tau`` the ``1 - rho`` quantile (linear interpolation) of
    the rollout policy's entropy ``H`` over the valid tokens (``mask``)."""
    require_finite("top_entropy", advantages=advantages, old_entropy=old_entropy)
    if not 0 < rho <= 1:
        raise ValueError(f"top_entropy: rho must lie in (0, 1], got {rho}")
    valid = mask > 0
    if not bool(valid.any()):
        return advantages
    values = old_entropy[valid].double().sort().values  # torch.quantile caps its input's size
    at = (1 - rho) * (len(values) - 1)
    low = int(at)
    tau = values[low] + (at - low) * (values[min(low + 1, len(values) - 1)] - values[low])
    return torch.where(old_entropy.double() >= tau, advantages, torch.zeros_like(advantages))


@register("advantage", "gar",
          source="Xiaomi MiMo-V2.6 post-training report, 2026 (GAR)", output="episode")
def gar(
    *, rewards: torch.Tensor, group_ids: torch.Tensor, mask: torch.Tensor,
    grader_quality: torch.Tensor,
) -> torch.Tensor:
    """``A_i = R_i - mean_g``; on the passing rows P of a mixed group,
    ``A'_i = lambda f_i A_i`` with ``lambda = sum_P A / sum_P f A`` (keeps the positive mass and
    the zero group sum). ``f`` of passing rows must lie in (0, 1]."""
    require_finite("gar", rewards=rewards, grader_quality=grader_quality)
    r, f = rewards.to(torch.float64), grader_quality.to(torch.float64)
    passed = r == 1
    if bool(((f[passed] <= 0) | (f[passed] > 1)).any()):
        raise ValueError("gar: grader_quality of passing rows must lie in (0, 1]")
    adv = r - group_stats(r, group_ids)[0]
    pos = torch.where(passed, adv, torch.zeros_like(adv))
    pos_sum = group_stats(pos, group_ids)[0]  # group means; ratios are what matter
    weighted = group_stats(torch.where(passed, f * adv, torch.zeros_like(adv)), group_ids)[0]
    ok = passed & (weighted != 0) & (pos_sum != 0)
    scale = torch.where(ok, pos_sum / torch.where(ok, weighted, torch.ones_like(weighted)), 1.0)
    return per_token(torch.where(ok, scale * f * adv, adv), mask)


@register("advantage", "behaviour_reg", source="Xiaomi MiMo-V2.6 post-training report, 2026")
def behaviour_reg(
    *, advantages: torch.Tensor, error_mask: torch.Tensor, k_err: float, up: float = 0.0,
    down: float = 0.0,
) -> torch.Tensor:
    """Tokens of flagged error segments (``e = 1``) lose positive credit and get ``k_err``
    times the blame: ``A <- 0`` (e=1, A>0), ``k_err A`` (e=1, A<0), ``(1+up) A`` (e=0, A>0),
    ``(1-down) A`` (e=0, A<0)."""
    require_finite("behaviour_reg", advantages=advantages)
    if k_err <= 1:
        raise ValueError(f"behaviour_reg: k_err must be > 1, got {k_err}")
    err, pos = error_mask > 0, advantages > 0
    scale = torch.where(err, torch.where(pos, 0.0, k_err), torch.where(pos, 1 + up, 1 - down))
    return scale.to(advantages.dtype) * advantages


def long_success_penalty(
    *, rewards: torch.Tensor, lengths: torch.Tensor, group_ids: torch.Tensor, c_long: float,
    l_thr: int, s_min: float,
) -> torch.Tensor:
    """``behaviour_reg``'s reward rule: ``R <- R - c_long`` if ``R = 1``, ``|y| > L_thr`` and
    the group's success rate (its share of ``R = 1``) is ``>= s_min`` (no penalty while the
    group mostly fails)."""
    require_finite("long_success_penalty", rewards=rewards)
    passed = rewards == 1
    success = group_stats(passed.to(torch.float64), group_ids)[0]
    hit = passed & (lengths > l_thr) & (success >= s_min)
    return torch.where(hit, rewards - c_long, rewards)


@register("advantage", "confession",
          source=("Confessions: Joglekar et al. (OpenAI) 2025, 'Training LLMs for Honesty via "
                  "Confessions', arXiv 2512.08093"))
def confession(
    *, advantages: torch.Tensor, confession_mask: torch.Tensor, confession_rewards: torch.Tensor,
    group_ids: torch.Tensor, rows: torch.Tensor, eps: float = EPS,
) -> torch.Tensor:
    """The confession's own advantage on its tokens: ``A_c = (c_i - mean_g c) / (std_g c +
    eps)`` over the group's confession rewards; every other token keeps the task's advantage.
    ``confession_rewards``, ``group_ids``: per episode ``[E]``; ``rows [B]``: the episode of
    each row of ``advantages`` and ``confession_mask [B, T]``."""
    require_finite("confession", advantages=advantages, confession_rewards=confession_rewards)
    c = confession_rewards.to(torch.float64)
    mean, std, _ = group_stats(c, group_ids)
    own = ((c - mean) / (std + eps)).to(advantages.dtype)[rows]
    return torch.where(confession_mask > 0, own[:, None].expand_as(advantages), advantages)
