"""P-GenRM's GRPO stage (ALGORITHMS.md §14 ``pgenrm``; docs/reward_models.md): the chain judge
rewarded by ``R = alpha PR + beta OR`` on preference pairs, as a rollout function
(``task.rollout: examples/pgenrm/pairs.py:pair_rollout``) over a dataset of pairs, scored by
two function judges (``order`` for the part ``or``, ``cover`` for ``pr``).

A row holds ``prompt`` (the judge's chain prompt for the chosen answer), ``rejected_prompt``
(the same for the rejected one) and ``preference`` (the user's stated preference). Of a
group's ``G`` samples, ``G / 2`` are chains for the chosen answer and ``G / 2`` for the
rejected one, all in the pair's group. Each chain's parts:

- ``or``: over the other side's chains, the share ordered right, ``1{s^c > s^r}`` (a chain
  that does not parse orders nothing and earns 0);
- ``pr``: the judged coverage of the stated preference, here the share of its words that the
  chain's ``Core preference`` line repeats.

The curriculum stage is the same rollout with ``pr``'s weight 0 on data with more hard
negatives (``personas.py --pairs``)."""

from __future__ import annotations

import re
from collections.abc import Sequence

from posttrain.envs import Task
from posttrain.models import encode_prompt
from posttrain.rewards import RewardFunction
from posttrain.rewards.evaluation_chain import extract
from posttrain.rewards.user_reward import Sample
from posttrain.rollout.single_turn import scored_episode
from posttrain.types import Episode

CORE = re.compile(r"core\s*preference\s*:(.*)", re.IGNORECASE)


def coverage(chain: str, preference: str) -> float:
    """The share of ``preference``'s words in the chain's last ``Core preference`` line."""
    lines = CORE.findall(chain)
    words = set(re.findall(r"\w+", preference.lower()))
    said = set(re.findall(r"\w+", lines[-1].lower())) if lines else set()
    return len(words & said) / len(words) if words else 0.0


def ordered(mine: float | None, others: Sequence[float | None], chosen: bool) -> float:
    """The share of ``others`` (the other side's scores) this chain orders right."""
    if mine is None or not others:
        return 0.0
    right = [o is not None and (mine > o if chosen else o > mine) for o in others]
    return sum(right) / len(others)


def pair_rollout(engine, tokenizer, tasks: Sequence[Task], reward_fn: RewardFunction, sampling,
                 group_size: int, group_prefix: str = "") -> list[Episode]:
    """``group_size`` chains a pair, the first half for the chosen answer and the second for
    the rejected (``meta["side"]``), all in the pair's group; the judges ``order`` and
    ``cover`` then score them."""
    if group_size % 2:
        raise ValueError(f"pair_rollout: group_size must be even (half the chains judge the "
                         f"chosen answer, half the rejected), not {group_size}")
    half = group_size // 2
    sides = [(t, m) for t in tasks for m in (t.messages(), t.row["rejected_prompt"])]
    outs = engine.generate([encode_prompt(tokenizer, m) for _, m in sides for _ in range(half)],
                           sampling)
    samples = [Sample(tokenizer.decode(o.token_ids, skip_special_tokens=True), "",
                      tuple(o.token_ids), tuple(sides[j // half][1]), sides[j // half][0].row)
               for j, o in enumerate(outs)]
    episodes = []
    for j, (out, sample, scored) in enumerate(zip(outs, samples, reward_fn.score(samples))):
        task = sides[j // half][0]
        episode = scored_episode(reward_fn, sample, scored, out.prompt_ids, out.token_ids,
                                 out.logprobs, out.version, out.finish_reason,
                                 f"{group_prefix}{j // group_size}", task)
        episode.meta["side"] = "chosen" if j % group_size < half else "rejected"
        episodes.append(episode)
    return episodes


def order(episodes: Sequence[Episode], tasks: Sequence[Task]) -> list[float]:
    """The judge of ``or``: each chain's share of the other side's chains it orders right."""
    scores = [extract(e.meta["completion"]) for e in episodes]
    out = []
    for k, e in enumerate(episodes):
        others = [s for f, s in zip(episodes, scores)
                  if f.group_id == e.group_id and f.meta["side"] != e.meta["side"]]
        out.append(ordered(scores[k], others, e.meta["side"] == "chosen"))
    return out


def cover(episodes: Sequence[Episode], tasks: Sequence[Task]) -> list[float]:
    """The judge of ``pr``: each chain's coverage of its user's stated preference."""
    return [coverage(e.meta["completion"], t.row["preference"])
            for e, t in zip(episodes, tasks)]
