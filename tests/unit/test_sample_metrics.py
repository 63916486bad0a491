"""pass@k, maj@k and mean@n of an evaluation with several samples a problem, against
hand-computed values (the catalogue's estimators underneath), and the per-column split."""

import math

import pytest

from posttrain.config import EvalConfig
from posttrain.rewards import RewardFunction
from posttrain.rollout.evaluation import eval_metrics
from posttrain.rollout.sample_metrics import sample_metrics
from posttrain.types import Episode, Segment


def sample(right: bool, answer: str | None, group: str = "g") -> Episode:
    text = "<answer>" + answer + "</answer>" if answer is not None else "no answer"
    return Episode([Segment([1, 2], [0, 1], [0.0, 0.0], [-1, 0])],
                   {"correct": float(right)}, reward=float(right), group_id=group,
                   meta={"completion": text})


# problem A: 2 of 4 right (votes: right, 5, 5, right); problem B: none right (3, 3, 4, none)
A = [sample(True, "7"), sample(False, "5"), sample(False, "5"), sample(True, "7.0")]
B = [sample(False, "3"), sample(False, "3"), sample(False, "4"), sample(False, None)]


def test_pass_maj_and_mean_at_k_by_hand():
    got = sample_metrics([A, B], "correct", [1, 2, 4])
    assert got["pass@1"] == pytest.approx((2 / 4 + 0) / 2)
    assert got["pass@2"] == pytest.approx((1 - math.comb(2, 2) / math.comb(4, 2)) / 2)
    assert got["pass@4"] == pytest.approx(0.5)
    # maj@k over the runs of k (ties go to the first vote): A's runs of 1 are right, 5, 5,
    # right (1/2); of 2, (right, 5) -> right and (5, right) -> 5 (1/2); of 4, right first
    # in a 2-2 tie (1). B's majority is never right.
    assert (got["maj@1"], got["maj@2"], got["maj@4"]) == (0.25, 0.25, 0.5)
    assert got["maj@1"] == got["pass@1"]  # a run of one sample is its own majority
    assert got["mean@4"] == pytest.approx(0.25)
    assert got["pass@1_se"] == pytest.approx(math.sqrt(0.25 * 0.75 / 2))


def test_right_answers_written_differently_vote_together():
    """7 and 7.0 are both right: together they outvote the two 5s."""
    c = [sample(True, "7"), sample(False, "5"), sample(False, "5"), sample(True, "7.0"),
         sample(False, "6")]
    c = [c[1], c[0], c[2], c[3], c[4]]  # 5, 7, 5, 7.0, 6: a tie 2-2 would go to 5
    assert sample_metrics([c], "correct", [5])["maj@5"] == 0.0
    c.append(sample(True, "7"))
    assert sample_metrics([c], "correct", [6])["maj@6"] == 1.0


def test_wrong_answers_vote_however_they_are_written():
    """GSM8K's ``#### N`` (read by ``math``) and a bare last number vote like tagged answers:
    three wrong 5s outvote one right 7 (they were dropped, handing maj@4 to the 7)."""
    def written(right, text):
        return Episode([Segment([1, 2], [0, 1], [0.0, 0.0], [-1, 0])], {"correct": float(right)},
                       reward=float(right), group_id="g", meta={"completion": text})

    gsm8k = [written(False, "so #### 5"), written(False, "#### 5.0"), written(False, "#### 5"),
             written(True, "#### 7")]
    assert sample_metrics([gsm8k], "correct", [4])["maj@4"] == 0.0
    bare = [written(False, "it is 5"), written(False, "5 apples... 5"),
            written(False, "I cannot say"), written(True, "7")]
    assert sample_metrics([bare], "correct", [4])["maj@4"] == 0.0
    unreadable = [written(False, "no idea"), written(False, "no idea"), written(True, "7"),
                  written(False, "")]
    assert sample_metrics([unreadable], "correct", [4])["maj@4"] == 0.0


class Row:
    def __init__(self, level):
        self.row, self.reference = {"level": level}, ""

    def messages(self):
        return []


def test_evaluation_splits_by_a_column():
    cfg = EvalConfig(samples=4, temperature=1.0, group_by=["level"])
    got = eval_metrics(A + B, [Row("easy"), Row("hard")],
                             RewardFunction({"correct": ("exact", 1.0)}), cfg, "correct")
    assert got["accuracy"] == 0.25 and got["pass@4"] == 0.5
    assert got["accuracy_se"] == pytest.approx((0.25 * 0.75 / 2) ** 0.5, rel=1e-15)  # 2 problems
    assert got["accuracy/level=easy"] == 0.5 and got["accuracy/level=hard"] == 0.0
    assert got["pass@4/level=easy"] == 1.0


def test_several_samples_need_sampling_and_enough_of_them():
    with pytest.raises(ValueError, match="needs eval.temperature > 0"):
        EvalConfig(samples=4)
    with pytest.raises(ValueError, match="k=8 needs at least that many"):
        EvalConfig(samples=4, temperature=1.0, ks=[8])
    assert EvalConfig(samples=4, temperature=1.0).pass_ks() == [1, 4]


def test_tool_use_is_reported_only_where_a_tool_was_offered():
    """An agent episode of a task without tools (its loop records no call) has no tool-use
    rate: it showed 0.000 as if the policy refused its tools."""
    def looped(tools, calls):
        e = sample(True, "7")
        e.meta |= {"tools": tools, "tool_records": [{"errors": [""]}] * calls}
        return e

    rf, cfg = RewardFunction({"correct": ("exact", 1.0)}), EvalConfig()
    assert "tool_use" not in eval_metrics([looped([], 0)] * 2, [Row("a")] * 2, rf, cfg,
                                          "correct")
    tools = [{"type": "function", "function": {"name": "add"}}]
    got = eval_metrics([looped(tools, 1), looped(tools, 0)], [Row("a")] * 2, rf, cfg, "correct")
    assert got["tool_use"] == 0.5
    assert got["accuracy"] == 1.0 and got["accuracy_se"] == 0.0  # both right: no spread
