import random

import pytest

from posttrain.envs import ArithmeticEnv, ArithmeticTasks, Problem
from posttrain.rewards import RewardFunction


@pytest.mark.parametrize(
    "a,op,b,answer,flawed",
    [(47, "+", 38, 85, 75), (52, "-", 38, 14, 26), (12, "*", 3, 36, 48), (21, "+", 34, 55, 55),
     (9, "+", 9, 18, 8)],
)
def test_answers_and_flawed_answers(a, op, b, answer, flawed):
    p = Problem(a, op, b)
    assert p.answer == answer and p.flawed_answer == flawed


def test_question_is_zero_padded_to_width():
    assert Problem(7, "+", 45, width=2).question == "What is 07+45?"
    p = Problem(7, "+", 45)
    assert p.completion() == "<think>7+5=12 0+4+1=5</think><answer>52</answer>"
    assert p.completion(flawed=True) == "<think>7+5=12 0+4=4</think><answer>42</answer>"
    assert Problem(9, "-", 4).completion() == "<think>9-4=5</think><answer>5</answer>"
    assert Problem(3, "*", 4).completion() == "<answer>12</answer>"


def test_subtraction_scratchpad_borrows_and_negates():
    assert Problem(52, "-", 38).completion() == "<think>12-8=4 5-3-1=1</think><answer>14</answer>"
    assert Problem(38, "-", 47).completion() == "<think>- 17-8=9 4-3-1=0</think><answer>-9</answer>"
    assert Problem(52, "-", 38).completion(flawed=True) == (
        "<think>8-2=6 5-3=2</think><answer>26</answer>")


def test_every_subtraction_scratchpad_spells_its_answer():
    """The column results, read tens first (negated after ``- ``), are the answer: the correct
    work gives the true difference, the flawed work the no-borrow student's."""
    for a in range(100):
        for b in range(100):
            p = Problem(a, "-", b)
            for correct, want in ((True, p.answer), (False, p.flawed_answer)):
                pad = p.scratchpad(correct)
                digits = [c.split("=")[1] for c in pad.removeprefix("<think>").removeprefix(
                    "- ").removesuffix("</think>").split()]
                value = int("".join(reversed(digits)))
                assert (-value if pad.startswith("<think>- ") else value) == want, (a, b)


def test_splits_are_disjoint_and_seeded():
    t = ArithmeticTasks(("+", "-", "*"), 2, seed=3)
    train = set(t.sample(3000, random.Random(0)))
    ev = set(t.eval_set(150))
    assert not train & ev
    assert t.eval_set(150) == t.eval_set(150)
    assert ArithmeticTasks(("+",), 2, seed=4).eval_set(20) != ArithmeticTasks(
        ("+",), 2, seed=5).eval_set(20)


def test_sft_conversation_error_rate():
    t = ArithmeticTasks(("+",), 2)
    rng = random.Random(0)
    carries = [p for p in t.sample(4000, rng) if p.flawed_answer != p.answer][:1000]
    wrong = sum(t.sft_conversation(p, 0.6, rng)[1]["content"] == p.completion(flawed=True)
                for p in carries)
    assert 0.55 < wrong / len(carries) < 0.65


@pytest.mark.parametrize("kwargs", [dict(ops=("/",)), dict(ops=()), dict(digits=0),
                                    dict(eval_fraction=1.0)])
def test_invalid_task_settings(kwargs):
    with pytest.raises(ValueError):
        ArithmeticTasks(**kwargs)


def test_env_scores_action():
    env = ArithmeticEnv(RewardFunction({"correct": ("numeric", 1.0)}))
    with pytest.raises(RuntimeError):
        env.step("x")
    assert env.reset(Problem(2, "+", 2)) == [{"role": "user", "content": "What is 2+2?"}]
    assert env.step("<answer>4</answer>").reward == 1.0
    assert env.step("garbage").reward == 0.0
