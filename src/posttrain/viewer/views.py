"""What the viewer's API answers, from a ``RunFiles``: a filtered, sorted page of episode
summaries, one episode token by token, and a group's samples side by side."""

from __future__ import annotations

import statistics
from dataclasses import dataclass

from posttrain.viewer.runs import RunFiles

SORTS = {"index": ("index", False), "reward": ("reward", False), "-reward": ("reward", True),
         "length": ("length", False), "-length": ("length", True), "step": ("step", False),
         "-step": ("step", True)}
CONTEXT_TOKENS = 4  # decoded before a token, so that it decodes as it does in its text


class NoTokenizer(LookupError):
    """A view that needs the run's tokenizer before the run has one."""


@dataclass(frozen=True)
class EpisodeQuery:
    """Which summaries a page shows: filters (None: any; ``q`` searches the prompt,
    ``response`` the response), ``sort`` (``SORTS``), the page."""

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
    response: str | None = None
    traced: bool | None = None

    def keeps(self, s: dict) -> bool:
        def within(value, low, high) -> bool:
            return (low is None or value >= low) and (high is None or value <= high)

        return ((self.finish is None or s["finish_reason"] == self.finish)
                and (self.task is None or s["task"] == self.task)
                and (self.traced is None or s["traced"] == self.traced)
                and (self.response is None or self.response.lower() in s["response"].lower())
                and within(s["step"] if s["step"] is not None else 0, self.step_min,
                           self.step_max)
                and within(s["reward"], self.reward_min, self.reward_max)
                and within(s["length"], self.length_min, self.length_max))


def shown_prompt(run: RunFiles, s: dict) -> str:
    """What the table shows of an episode's prompt: an agent episode's last user message,
    else the prompt decoded ("" until the run has a tokenizer)."""
    return s["question"] or run.prompt(s["index"])


def episode_page(run: RunFiles, query: EpisodeQuery) -> dict:
    """``{"total": matching, "episodes": the page's summaries (with their prompts), "tasks"
    and "finishes": what the run's episodes name, "traced": how many carry token stats,
    "warnings": the newest lines skipped, "skipped": how many in all, "texts": whether
    prompts can be decoded yet}``."""
    run.refresh()
    key, descending = SORTS[query.sort]
    kept = [s for s in run.summaries if query.keeps(s)]
    if query.q:
        words = query.q.lower()
        kept = [s for s in kept
                if words in s["question"].lower() or words in run.prompt(s["index"]).lower()]
    kept.sort(key=lambda s: (s[key] is None, s[key] or 0, s["index"]), reverse=descending)
    page = [{**s, "prompt": shown_prompt(run, s)}
            for s in kept[query.offset:query.offset + query.limit]]
    every = run.summaries
    return {"total": len(kept), "episodes": page,
            "tasks": sorted({s["task"] for s in every} - {""}),
            "finishes": sorted({s["finish_reason"] for s in every}),
            "traced": sum(s["traced"] for s in every), "count": len(every),
            "warnings": run.warnings[-20:], "skipped": run.skipped,
            "texts": run.tokenizer() is not None}


def token_texts(tokenizer, ids: list[int]) -> list[str]:
    """Each token's text as it reads in the decoded sequence: decoded after a few tokens of
    context, so spacing comes out right; the bytes of a character split over tokens show on
    the token that completes it (the others are empty), not as U+FFFD each."""
    out, pending = [], 0  # pending: the first token whose text is not out yet
    for i in range(len(ids)):
        start = max(0, pending - CONTEXT_TOKENS)
        before = tokenizer.decode(ids[start:pending], skip_special_tokens=False)
        whole = tokenizer.decode(ids[start:i + 1], skip_special_tokens=False)
        if whole.endswith("\ufffd") and i + 1 < len(ids) and i + 1 - pending < 4:
            out.append("")  # a character's leading bytes: its last byte shows it
            continue
        out.append(whole[len(before):] if whole.startswith(before) else
                   tokenizer.decode(ids[pending:i + 1], skip_special_tokens=False))
        pending = i + 1
    return out


def episode_detail(run: RunFiles, index: int) -> dict:
    """Episode ``index`` token by token: each token's text (``token_texts``), whether it was
    sampled (trained), its behaviour log-prob and weight version, and where the run recorded
    them (``rl.token_stats``) its advantage, trainer log-prob, entropy and ``mismatch``
    (behaviour - trainer log-prob); None where not sampled or not recorded."""
    episode, tokenizer = run.episode(index), run.tokenizer()
    if tokenizer is None:
        raise NoTokenizer(f"{run.name} has no tokenizer yet (no model directory in it and no "
                          "model.path in its config.yaml): its episodes show once it has one")
    stats = episode.meta.get("token_stats", {})
    segments = []
    for k, seg in enumerate(episode.segments):
        advantage, trainer, entropy = (
            stats[key][k] if stats else [None] * len(seg.token_ids)
            for key in ("advantage", "trainer_logprob", "entropy"))
        segments.append({"tokens": [
            {"text": text, "trained": bool(m), "logprob": lp if m else None,
             "version": v if m else None, "advantage": a if m else None,
             "trainer_logprob": q if m else None, "entropy": h if m else None,
             "mismatch": lp - q if m and q is not None else None}
            for text, m, lp, v, a, q, h in zip(token_texts(tokenizer, seg.token_ids),
                                                seg.loss_mask, seg.logprobs, seg.versions,
                                                advantage, trainer, entropy)]})
    meta = {k: v for k, v in episode.meta.items() if k not in ("segment_messages", "token_stats")}
    return {**run.entries[index].summary, "rewards": episode.rewards, "meta": meta,
            "segments": segments, "token_stats": bool(stats)}


def group_view(run: RunFiles, step: int | None, group: str) -> dict:
    """The samples of group ``group`` at step ``step``: the prompt and reference, each
    sample's summary and response (every segment's text after its prompt, tool results
    included), and its advantage: the mean over its trained tokens of what the run used where
    it traced them (``rl.token_stats``), else GRPO's group-normalised reward, recomputed and
    said to be (``advantage_source``)."""
    run.refresh()
    members = [s for s in run.summaries if s["group"] == group and s["step"] == step]
    tokenizer = run.tokenizer()
    if not members:
        return {"episodes": []}
    if tokenizer is None:
        raise NoTokenizer(f"{run.name} has no tokenizer yet")
    episodes = [run.episode(s["index"]) for s in members]
    traced = all(e.meta.get("token_stats") for e in episodes)
    if traced:
        advantages = [statistics.fmean(
            a for seg, adv in zip(e.segments, e.meta["token_stats"]["advantage"])
            for a, m in zip(adv, seg.loss_mask) if m) for e in episodes]
    else:
        advantages = grpo_advantages([s["reward"] for s in members])
    out = [{**s, "advantage": advantage, "response": " / ".join(
               tokenizer.decode(seg.token_ids[seg.first_sampled:], skip_special_tokens=True)
               for seg in episode.segments)}
           for s, episode, advantage in zip(members, episodes, advantages)]
    estimator = ((run.config() or {}).get("algo") or {}).get("adv_estimator", "grpo")
    return {"episodes": out, "prompt": shown_prompt(run, members[0]),
            "reference": episodes[0].meta.get("reference"),
            "advantage_source": "recorded" if traced else f"grpo, recomputed (the run's "
                                                          f"estimator: {estimator})"}


def grpo_advantages(rewards: list[float]) -> list[float]:
    """GRPO's group-normalised rewards (``algos.advantages.grpo``; torch only when asked)."""
    import torch

    from posttrain.algos.advantages import grpo

    return grpo(rewards=torch.tensor(rewards, dtype=torch.float64),
                group_ids=torch.zeros(len(rewards), dtype=torch.long),
                mask=torch.ones(len(rewards), 1, dtype=torch.float64))[:, 0].tolist()
