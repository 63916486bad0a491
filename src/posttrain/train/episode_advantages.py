"""From scored episodes to advantages: KL in the reward, the configured estimator, then the
per-token modifiers.

Group estimators count episodes, not segments (ALGORITHMS.md §11): each runs over one row per
episode whose mask holds the episode's trainable-token count, and the episode's advantage is
broadcast to every trainable token of every segment. ``gae`` runs per segment on the critic's
values; ``gigpo`` gives each step's tokens their own advantage. No estimator is named here: each
declares its inputs and its output in the catalogue.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from posttrain.algos import LazyInputs, entry, get, long_success_penalty
from posttrain.config import AlgoConfig
from posttrain.config.sections.rl import ESTIMATOR_OPTIONS
from posttrain.types import Batch, Episode


def token_kl(batch: Batch, estimator: str) -> torch.Tensor:
    """``KL_t(old, ref)`` with ``estimator`` on the loss-mask tokens."""
    kl = get("kl", estimator)(logp=batch.old_logprobs, ref_logp=batch.ref_logprobs)
    return kl * batch.loss_mask


def episode_rows(episodes: Sequence[Episode]) -> torch.Tensor:
    """``[B]``: the episode of every batch row (one row per segment)."""
    return torch.tensor([i for i, ep in enumerate(episodes) for _ in ep.segments],
                        dtype=torch.long)


def per_episode(values: torch.Tensor, rows: torch.Tensor, n: int) -> torch.Tensor:
    """Sum per-row ``values`` over each episode's rows."""
    return torch.zeros(n, dtype=values.dtype).index_add_(0, rows, values)


def _episode_mask(batch: Batch, rows: torch.Tensor, n: int) -> torch.Tensor:
    """``[E, max n_e]``: row ``e`` holds ``n_e`` ones, ``n_e`` the episode's trainable tokens."""
    counts = per_episode(batch.loss_mask.sum(dim=1), rows, n).long()
    width = max(int(counts.max()), 1)
    return (torch.arange(width)[None, :] < counts[:, None]).to(batch.loss_mask.dtype)


def _group_index(keys: Sequence[str]) -> torch.Tensor:
    index: dict[str, int] = {}
    return torch.tensor([index.setdefault(k, len(index)) for k in keys], dtype=torch.long)


def step_tokens(step_values: Sequence[torch.Tensor], episodes: Sequence[Episode],
                batch: Batch) -> torch.Tensor:
    """``[B, T]``: value ``k`` of an episode on the tokens of its ``k``-th step (steps counted
    over its segments in order), masked to trainable tokens."""
    out = torch.zeros_like(batch.loss_mask)
    row = 0
    for ep, values in zip(episodes, step_values):
        k = 0
        for seg in ep.segments:
            for span in seg.steps:
                out[row, span.start:span.end] = float(values[k])
                k += 1
            row += 1
    return out * batch.loss_mask


def error_tokens(episodes: Sequence[Episode], batch: Batch) -> torch.Tensor:
    """``[B, T]``: 1 on the tokens of steps whose tool calls were malformed."""
    flags = [torch.tensor(ep.meta["step_errors"], dtype=torch.float32) for ep in episodes]
    return step_tokens(flags, episodes, batch)


def advantage_inputs(batch: Batch, episodes: Sequence[Episode], algo: AlgoConfig,
                     part_weights: dict[str, float]) -> LazyInputs:
    """What the pipeline can feed an estimator, by input name. Per episode: ``rewards``
    (``behaviour_reg``'s reward rule applied, then minus ``coef sum_t KL_t(old, ref)`` with the
    KL in the reward), ``group_ids``, ``mask`` (``[E, max
    n_e]``, ``n_e`` ones), ``reward_parts`` ``[E, K]`` and ``part_weights``, ``tree_ids``,
    ``step_states``, ``baseline_rewards`` (its prompt's greedy decode: ``GreedyBaseline``),
    ``grader_quality`` (the reward part ``algo.quality_part``);
    per row: ``outcome_rewards`` (its episode's reward, no KL: estimators that take ``kl`` per
    token add it themselves); per token: ``token_rewards``, ``values``, ``loss_mask``, ``kl``
    (in the reward only) and ``kl_coef``."""
    rows, n = episode_rows(episodes), len(episodes)
    in_reward = algo.kl.coef > 0 and algo.kl.placement == "in_reward"
    names = list(part_weights)

    def rewards() -> torch.Tensor:
        r = torch.tensor([ep.reward for ep in episodes], dtype=torch.float32)
        rule = algo.behaviour_reg.reward_rule() if algo.behaviour_reg else None
        if rule is not None:
            r = long_success_penalty(
                rewards=r, lengths=per_episode(batch.loss_mask.sum(dim=1), rows, n),
                group_ids=_group_index([ep.group_id for ep in episodes]), **rule)
        if in_reward:
            kl = token_kl(batch, algo.kl.estimator).sum(dim=1)
            r = r - algo.kl.coef * per_episode(kl, rows, n)
        return r

    return LazyInputs(
        rewards=rewards,
        group_ids=lambda: _group_index([ep.group_id for ep in episodes]),
        mask=lambda: _episode_mask(batch, rows, n),
        reward_parts=lambda: torch.tensor([[ep.rewards[k] for k in names] for ep in episodes],
                                          dtype=torch.float64),
        part_weights=lambda: [part_weights[k] for k in names],
        tree_ids=lambda: _group_index([ep.meta["tree_id"] for ep in episodes]),
        step_states=lambda: [ep.meta["state_keys"] for ep in episodes],
        outcome_rewards=lambda: torch.tensor([ep.reward for ep in episodes],
                                             dtype=torch.float32)[rows],
        baseline_rewards=lambda: torch.tensor([ep.meta["baseline_reward"] for ep in episodes],
                                              dtype=torch.float32),
        grader_quality=lambda: torch.tensor([ep.rewards[algo.quality_part] for ep in episodes],
                                            dtype=torch.float64),
        token_rewards=lambda: batch.rewards,
        values=lambda: batch.old_values,
        loss_mask=lambda: batch.loss_mask,
        kl=lambda: token_kl(batch, algo.kl.estimator) if in_reward else None,
        kl_coef=lambda: algo.kl.coef,
    )


def _episode_tokens(adv: torch.Tensor, inputs: LazyInputs, episodes: Sequence[Episode],
                    batch: Batch) -> torch.Tensor:
    """An episode's advantage (the mean over its row of ``adv [E, max n_e]``) on every
    trainable token of its segments."""
    mask = inputs["mask"]
    scalar = (adv.sum(dim=1) / mask.sum(dim=1).clamp(min=1)).to(batch.loss_mask.dtype)
    return scalar[episode_rows(episodes)][:, None] * batch.loss_mask


# an estimator's result, by its declared output, as [B, T] token advantages
TO_TOKENS = {
    "token": lambda adv, inputs, episodes, batch: adv,
    "step": lambda adv, inputs, episodes, batch: step_tokens(adv, episodes, batch),
    "episode": _episode_tokens,
}


def estimator_options(algo: AlgoConfig) -> dict[str, Any]:
    """The estimator's options ``algo`` sets (not null), by the estimator's parameter
    names."""
    return {name: getattr(algo, key) for key, (_, name) in ESTIMATOR_OPTIONS.items()
            if getattr(algo, key) is not None}


def compute_advantages(
    batch: Batch, episodes: Sequence[Episode], algo: AlgoConfig, part_weights: dict[str, float]
) -> torch.Tensor:
    """``[B, T]`` advantages of ``batch`` (built from ``episodes``) under ``algo``: the
    estimator takes what it asks for from ``advantage_inputs`` and its declared output says
    how its result reaches the tokens."""
    estimator = entry("advantage", algo.adv_estimator)
    inputs = advantage_inputs(batch, episodes, algo, part_weights)
    adv = estimator.call(inputs, **estimator_options(algo))
    return _modified(TO_TOKENS[estimator.output](adv, inputs, episodes, batch), episodes, batch,
                     algo)


def _modified(adv: torch.Tensor, episodes: Sequence[Episode], batch: Batch,
              algo: AlgoConfig) -> torch.Tensor:
    """The per-token modifiers applied to ``adv``: ``taco`` (on ``batch.old_logprobs`` and
    ``batch.old_entropy``), then ``behaviour_reg``."""
    if algo.taco is not None:
        if batch.old_logprobs is None or batch.old_entropy is None:
            raise ValueError("taco needs batch.old_logprobs and batch.old_entropy")
        mask = batch.loss_mask > 0  # outside it log-probs are 0: no tail there
        adv = torch.where(mask, get("advantage", "taco")(
            advantages=adv, old_logp=batch.old_logprobs, old_entropy=batch.old_entropy,
            **algo.taco.model_dump()), adv)
    if algo.behaviour_reg is not None:
        adv = get("advantage", "behaviour_reg")(
            advantages=adv, error_mask=error_tokens(episodes, batch),
            **algo.behaviour_reg.token_rule())
    return adv
