"""The Pareto frontier of harness candidates over (score, higher is better; context tokens,
fewer is better), and the pick: the frontier's best score, fewer tokens breaking a tie."""

from __future__ import annotations

from posttrain.harness_search.store import Result


def pareto(results: dict[str, Result]) -> list[str]:
    """The ids no other candidate dominates (at least as good on both, better on one), by
    score then tokens; candidates that failed are not on it."""
    scored = {c: r for c, r in results.items() if r.score is not None}

    def dominated(r: Result) -> bool:
        return any(o.score >= r.score and o.tokens <= r.tokens
                   and (o.score > r.score or o.tokens < r.tokens) for o in scored.values())

    return sorted((c for c, r in scored.items() if not dominated(r)),
                  key=lambda c: (-scored[c].score, scored[c].tokens, c))


def pick(results: dict[str, Result]) -> str:
    """The candidate to keep: the first of the frontier."""
    front = pareto(results)
    if not front:
        raise ValueError("no candidate was evaluated without an error")
    return front[0]
