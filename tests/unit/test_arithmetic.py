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
    assert Problem(9, "-", 4).completion() == "<answer>5</answer>"


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
