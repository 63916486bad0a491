"""What the viewer's API answers, from a ``RunFiles``: a filtered, sorted page of episode
summaries, one episode token by token, and a group's samples side by side."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from posttrain.algos.advantages import grpo
from posttrain.viewer.runs import RunFiles

SORTS = {"index": ("index", False), "reward": ("reward", False), "-reward": ("reward", True),
         "length": ("length", False), "-length": ("length", True), "step": ("step", False),
         "-step": ("step", True)}


@dataclass(frozen=True)
class EpisodeQuery:
    """Which summaries a page shows: filters (None: any), ``sort`` (``SORTS``), the page."""

    finish: str | None = None
    task: str | None = None
    q: str | None = None
    step_min: int | None = None
    step_max: int | None = None
    reward_min: float | None = None
    reward_max: float | None = None
    length_min: int | None = None
    length_max: int | None = None
    sort: str = "index"
    offset: int = 0
    limit: int = 50

    def keeps(self, s: dict) -> bool:
        def within(value, low, high) -> bool:
            return (low is None or value >= low) and (high is None or value <= high)

        return ((self.finish is None or s["finish_reason"] == self.finish)
                and (self.task is None or s["task"] == self.task)
                and (self.q is None or self.q.lower() in s["prompt"].lower())
                and within(s["step"] if s["step"] is not None else 0, self.step_min,
                           self.step_max)
                and within(s["reward"], self.reward_min, self.reward_max)
                and within(s["length"], self.length_min, self.length_max))


def episode_page(run: RunFiles, query: EpisodeQuery) -> dict:
    """``{"total": matching, "episodes": the page's summaries, "tasks": every task the run's
    episodes name}``."""
    run.refresh()
    key, descending = SORTS[query.sort]
    kept = sorted((s for s in run.summaries if query.keeps(s)),
                  key=lambda s: (s[key] is None, s[key] or 0, s["index"]), reverse=descending)
    return {"total": len(kept), "episodes": kept[query.offset:query.offset + query.limit],
            "tasks": sorted({s["task"] for s in run.summaries} - {""})}


def episode_detail(run: RunFiles, index: int) -> dict:
    """Episode ``index`` with every token decoded on its own: its text, whether it was
    sampled (trained), its behaviour log-prob and weight version, and where the run recorded
    them (``rl.token_stats``) its advantage, trainer log-prob, entropy and ``mismatch``
    (behaviour - trainer log-prob); None where not sampled or not recorded."""
    episode, tokenizer = run.episode(index), run.tokenizer()
    stats = episode.meta.get("token_stats", {})
    segments = []
    for k, seg in enumerate(episode.segments):
        advantage, trainer, entropy = (
            stats[key][k] if stats else [None] * len(seg.token_ids)
            for key in ("advantage", "trainer_logprob", "entropy"))
        segments.append({"tokens": [
            {"text": tokenizer.decode([t]), "trained": bool(m),
             "logprob": lp if m else None, "version": v if m else None,
             "advantage": a if m else None, "trainer_logprob": q if m else None,
             "entropy": h if m else None,
             "mismatch": lp - q if m and q is not None else None}
            for t, m, lp, v, a, q, h in zip(seg.token_ids, seg.loss_mask, seg.logprobs,
                                            seg.versions, advantage, trainer, entropy)]})
    meta = {k: v for k, v in episode.meta.items()
            if k not in ("segment_messages", "token_stats")}
    return {**run.summaries[index], "rewards": episode.rewards, "meta": meta,
            "segments": segments, "token_stats": bool(stats)}


def group_view(run: RunFiles, step: int | None, group: str) -> dict:
    """The samples of group ``group`` at step ``step``: summary, response text, and as
    advantage GRPO's group-normalised reward (``algos.advantages.grpo``)."""
    run.refresh()
    members = [s for s in run.summaries if s["group"] == group and s["step"] == step]
    if not members:
        return {"episodes": []}
    advantages = grpo(rewards=torch.tensor([s["reward"] for s in members], dtype=torch.float64),
                      group_ids=torch.zeros(len(members), dtype=torch.long),
                      mask=torch.ones(len(members), 1, dtype=torch.float64))[:, 0].tolist()
    tokenizer, out = run.tokenizer(), []
    for s, advantage in zip(members, advantages):
        episode = run.episode(s["index"])
        response = " / ".join(
            tokenizer.decode([t for t, m in zip(seg.token_ids, seg.loss_mask) if m],
                             skip_special_tokens=True) for seg in episode.segments)
        out.append({**s, "advantage": advantage, "response": response})
    return {"episodes": out}
