"""A scripted harness proposer that reads raw traces, as an LLM proposer would (point
``--proposer-endpoint`` at a strong model for the real thing). For the frontier's best
harness it looks at the failed episodes: answers cut off before ``</answer>`` call for a
larger turn budget; answers written but wrong, for a lower sampling temperature; and it
always tries the cheapest variant of the best harness (half the budget), so the frontier has
a short end.

    posttrain harness-search configs/quickstart.yaml eval.max_new_tokens=24 \\
        --model runs/quickstart/rl_model --proposer examples/harness_search/proposer.py:propose
"""

from posttrain.harness_search import Candidate, pareto


def propose(store, k, iteration):
    results = store.results()
    best_id = pareto(results)[0]
    best = next(c for c in store.candidates() if c.id == best_id)
    budget = best.overrides.get("eval.max_new_tokens", 32)  # else the config's: quickstart's
    temperature = best.overrides.get("eval.temperature", 0.0)
    failed = [t["text"] for t in store.traces(best_id) if not t["passed"]]
    cut = sum("</answer>" not in text for text in failed)
    out = []
    if cut:
        out.append(Candidate("", {**best.overrides, "eval.max_new_tokens": budget * 2}, {},
                             best_id, f"{cut} answers cut off: double the budget"))
    if len(failed) > cut and temperature > 0:
        out.append(Candidate("", {**best.overrides, "eval.temperature": 0.0}, {}, best_id,
                             f"{len(failed) - cut} wrong answers: sample greedily"))
    out.append(Candidate("", {**best.overrides, "eval.max_new_tokens": max(budget // 2, 1)},
                         {}, best_id, "half the budget"))
    tried = [c.overrides for c in store.candidates()]
    return [c for c in out if c.overrides not in tried][:k]
