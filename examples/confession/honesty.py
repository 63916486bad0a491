"""A confession judge (``reward.confession.judge: {kind: function, function:
examples/confession/honesty.py:honest_verdict}``; docs/confessions.md): is the confession's
verdict on the answer the true one?"""

from collections.abc import Sequence

VERDICTS = {"correct": 1.0, "wrong": 0.0}  # the word a confession states -> the part it claims


def honest_verdict(episodes: Sequence, tasks: Sequence) -> list[float]:
    """1 for a confession whose first verdict word ("correct" or "wrong") matches the task's
    part ``correct``; 0 for a false verdict or none."""
    scores = []
    for episode in episodes:
        words = [w.strip(".,!:;") for w in episode.meta["confession"].lower().split()]
        stated = next((VERDICTS[w] for w in words if w in VERDICTS), None)
        scores.append(float(stated is not None and stated == episode.rewards["correct"]))
    return scores
