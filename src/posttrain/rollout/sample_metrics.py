"""Metrics of ``n`` samples a problem (``eval.samples``), by the catalogue's estimators.

A sample succeeds when its accuracy part is at least 1. ``pass@k`` is the unbiased estimator
over the ``n`` samples; ``maj@k`` asks whether the most frequent answer of ``k`` samples is
right, averaged over the ``n // k`` disjoint runs of ``k`` (so ``maj@1`` is ``pass@1``, not
the first sample's luck), where every right sample votes for one answer (right answers are
equivalent, however written) and a wrong one for its answer as the verifiers read answers
(``answer_of``: a wrong sample always votes, so unreadable answers cannot hand the majority
to the right ones); ``mean@n`` is the mean accuracy part. Each comes with ``_se``, the
binomial standard error over the problems.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from posttrain.algos.metrics import maj_at_k, mean_at_k, pass_at_k, standard_error
from posttrain.rewards.rule_verifiers import BOXED_RE
from posttrain.rewards.verifiers import as_number, extract_answer
from posttrain.types import Episode

RIGHT = "<right>"  # the vote of every right sample
GSM8K_RE = re.compile(r"####\s*(\S+)")
LAST_NUMBER_RE = re.compile(r"-?\d[\d,]*(?:\.\d+)?")


def answer_of(episode: Episode) -> str:
    """The answer a sample gave: its ``<answer>`` text, else its last ``\\boxed{}``, else
    GSM8K's ``#### N``, else its last number, else its whole stripped text; a number in its
    canonical form (``5.0`` and ``5`` are one vote)."""
    text = episode.meta.get("completion") or episode.meta.get("final") or ""
    found = [extract_answer(text), *BOXED_RE.findall(text)[-1:], *GSM8K_RE.findall(text)[-1:],
             *LAST_NUMBER_RE.findall(text)[-1:], text]
    answer = next(a for a in found if a is not None).strip()
    number = as_number(answer)
    return answer if number is None else repr(number)


def sample_metrics(per_problem: Sequence[Sequence[Episode]], accuracy_part: str,
                   ks: Sequence[int]) -> dict[str, float]:
    """``pass@k`` and ``maj@k`` for each ``k`` of ``ks``, and ``mean@n``, with standard errors,
    over problems of ``n`` samples each."""
    n_tasks, n = len(per_problem), len(per_problem[0])
    scores = [[e.score(accuracy_part) for e in eps] for eps in per_problem]
    right = [[s >= 1.0 for s in row] for row in scores]
    out: dict[str, float] = {}
    for k in ks:
        value = pass_at_k(n=[n] * n_tasks, c=[sum(r) for r in right], k=k)
        out[f"pass@{k}"], out[f"pass@{k}_se"] = value, standard_error(value, n_tasks)
        votes = [[RIGHT if ok else answer_of(e) for ok, e in zip(r[i:i + k], eps[i:i + k])]
                 for r, eps in zip(right, per_problem) for i in range(0, n - k + 1, k)]
        value = maj_at_k(answers=votes, gold=[RIGHT] * len(votes))
        out[f"maj@{k}"], out[f"maj@{k}_se"] = value, standard_error(value, n_tasks)
    value = mean_at_k(scores=scores)
    out[f"mean@{n}"] = value
    out[f"mean@{n}_se"] = standard_error(min(max(value, 0.0), 1.0), n_tasks)
    return out
