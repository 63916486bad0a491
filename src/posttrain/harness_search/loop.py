"""The Meta-Harness outer loop: evaluate the starting harness, then each iteration ask the
proposer for ``k`` candidates (stored before any is evaluated), evaluate each on the search set,
and keep going from what the store holds: a resumed search evaluates what its last iteration
left unevaluated, then asks for the next. The frontier's pick is finally evaluated on the
held-out set."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

from posttrain.harness_search.frontier import pareto, pick
from posttrain.harness_search.proposers import Proposer
from posttrain.harness_search.store import Candidate, HarnessStore, Result

# (the candidate, "search" or "test") -> its result and raw traces
Evaluate = Callable[[Candidate, str], tuple[Result, list[dict]]]
START = "i00-0"


class HarnessSearch:
    def __init__(self, store: HarnessStore, evaluate: Evaluate, proposer: Proposer,
                 k: int = 4, iterations: int = 3,
                 on_candidate: Callable[[Candidate, Result], None] | None = None) -> None:
        self.store, self.evaluate, self.proposer = store, evaluate, proposer
        self.k, self.iterations, self.on_candidate = k, iterations, on_candidate

    def run(self, start: dict[str, Any] | None = None) -> dict[str, Any]:
        """Search from the harness ``start`` (overrides; the config as it is by default);
        returns the frontier, the pick and the pick's held-out result."""
        if self.store.iterations == 0:
            self._evaluate(Candidate(START, dict(start or {}), note="the starting harness"))
            self.store.finish_iteration(0)
        for it in range(self.store.iterations + 1, self.iterations + 1):
            proposed = self.store.proposals(it)  # an iteration cut short: its own proposals
            if proposed is None:
                proposed = [replace(c, id=f"i{it:02d}-{j}") for j, c in
                            enumerate(self.proposer(self.store, self.k, it)[: self.k])]
                self.store.propose(it, proposed)
            for c in proposed:
                if self.store.result(c.id) is None:
                    self._evaluate(c)
            self.store.finish_iteration(it)
        results = self.store.results()
        best = pick(results)
        chosen = next(c for c in self.store.candidates() if c.id == best)
        held_out, _ = self.evaluate(chosen, "test")
        return {"frontier": [{"id": c, "score": results[c].score, "tokens": results[c].tokens}
                             for c in pareto(results)],
                "pick": best, "start_score": results[START].score,
                "pick_search_score": results[best].score, "pick_test": vars(held_out),
                "candidates": len(results)}

    def _evaluate(self, candidate: Candidate) -> None:
        self.store.add(candidate)
        try:
            result, traces = self.evaluate(candidate, "search")
        except Exception as e:  # a broken harness is a result, not the end of the search
            result, traces = Result(None, None, error=f"{type(e).__name__}: {e}"), []
        self.store.record(candidate.id, result, traces)
        if self.on_candidate is not None:
            self.on_candidate(candidate, result)
