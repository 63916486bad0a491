import math

import pytest

from posttrain.rewards import VERIFIERS, RewardFunction, exact, extract_answer, format_ok, numeric


def test_extract_answer_takes_last():
    assert extract_answer("<answer>1</answer> then <answer> 42 </answer>") == "42"
    assert extract_answer("no tags") is None
    assert extract_answer("") is None


@pytest.mark.parametrize(
    "text,ref,ex,num",
    [("<answer>42</answer>", "42", 1, 1), ("<answer>42.0</answer>", "42", 0, 1),
     ("<answer>-7</answer>", "-7", 1, 1), ("<answer>41</answer>", "42", 0, 0),
     ("<answer>abc</answer>", "42", 0, 0), ("<answer>nan</answer>", "42", 0, 0),
     ("", "42", 0, 0), ("42", "42", 0, 0)],
)
def test_exact_and_numeric(text, ref, ex, num):
    assert exact(text, ref) == ex
    assert numeric(text, ref) == num


@pytest.mark.parametrize(
    "text,ok",
    [("<answer>3</answer>", 1), ("  <answer>3</answer>\n", 1),
     ("<think>carry</think><answer>3</answer>", 1), ("x<answer>3</answer>", 0),
     ("<answer>3</answer><answer>4</answer>", 0), ("<answer>3", 0), ("", 0)],
)
def test_format(text, ok):
    assert format_ok(text) == ok


@pytest.mark.parametrize("text,ref,num", [
    ("<answer>32</answer>", "Femi ends with 32.\n#### 32", 1.0),
    ("<answer>1200</answer>", "so\n#### 1,200", 1.0),
    ("<answer>31</answer>", "Femi ends with 32.\n#### 32", 0.0),
    ("<answer>32</answer>", "Femi ends with 32.", None),
    ("<answer>32</answer>", "", None),
])
def test_numeric_reads_gsm8k_references_and_cannot_read_others(text, ref, num):
    assert numeric(text, ref) == num


def test_an_unreadable_reference_leaves_a_numeric_part_missing_saying_why():
    rf = RewardFunction({"correct": ("numeric", 1.0)})
    assert rf.fallible_parts == ["correct"]
    parts, _, missing = rf("<answer>32</answer>", "Femi ends with 32.")
    assert parts == {"correct": 0.0}
    assert missing == {"correct": "numeric cannot read the reference 'Femi ends with 32.'"}


def test_reward_function_weights_parts():
    rf = RewardFunction({"correct": ("numeric", 1.0), "format": ("format", 0.1)})
    parts, total, _ = rf("<answer>5</answer>", "5")
    assert parts == {"correct": 1.0, "format": 1.0} and total == pytest.approx(1.1)
    parts, total, _ = rf("", "5")
    assert parts == {"correct": 0.0, "format": 0.0} and total == 0.0


def test_crashing_or_nonfinite_verifier_scores_zero(monkeypatch):
    def boom(c, r):
        raise RuntimeError("bug")

    monkeypatch.setitem(VERIFIERS, "boom", boom)
    monkeypatch.setitem(VERIFIERS, "inf", lambda c, r: math.inf)
    rf = RewardFunction({"a": ("boom", 1.0), "b": ("inf", 1.0), "c": ("exact", 1.0)})
    parts, total, _ = rf("<answer>1</answer>", "1")
    assert parts == {"a": 0.0, "b": 0.0, "c": 1.0} and total == 1.0


def test_unknown_verifier_is_an_error():
    with pytest.raises(ValueError, match="unknown verifier"):
        RewardFunction({"x": ("nope", 1.0)})
