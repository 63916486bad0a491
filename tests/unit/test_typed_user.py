"""The typed-user environment: a user answers as its fixed profile says, within its question
budget; the answer is scored against its taste; its likelihood is the generative model, so
Bayes over its replies is the exact posterior; SFT answers that posterior's most probable
taste."""

import random

import pytest

from posttrain.envs.typed_user import (
    ASK_AGAIN,
    FOODS,
    NO_MORE,
    TASTES,
    TypedUser,
    TypedUserEpisode,
    TypedUserTasks,
    posterior,
)

USER = TypedUser("sour", (True, False, True, False, True), max_questions=2)  # fruit..water


def test_the_user_answers_from_its_profile_within_its_budget():
    env = TypedUserEpisode(USER)
    assert env.reply("Do you like fruit?") == ("yes", None)
    assert env.reply("Do you like chips?") == ("no", None)
    assert env.reply("Do you like lemon?") == (NO_MORE, None)
    assert env.reply("hello") == (ASK_AGAIN, None)
    assert env.reply("Do you like pizza?") == (ASK_AGAIN, None)  # not a food it knows


@pytest.mark.parametrize("answer,correct", [("sour", 1.0), ("sweet", 0.0), ("tart", 0.0)])
def test_the_answer_is_scored_against_the_taste(answer, correct):
    env = TypedUserEpisode(USER)
    assert env.reply(f"<answer>{answer}</answer>") == (None, "answer")
    assert env.verdict("") == {"correct": correct}
    assert env.true_type == "sour" and env.user_types == TASTES


def test_no_answer_scores_zero():
    assert TypedUserEpisode(USER).verdict("") == {"correct": 0.0}


def test_the_likelihood_is_the_tastes_probability_and_a_repeat_tells_nothing():
    asked = [{"role": "user", "content": "hi"},
             {"role": "assistant", "content": "Do you like lemon?"}]
    like = TypedUserEpisode.likelihood
    assert [like(asked, "yes", t) for t in TASTES] == list(FOODS["lemon"])
    assert [like(asked, "no", t) for t in TASTES] == pytest.approx([1 - p for p in FOODS["lemon"]])
    again = [*asked, {"role": "user", "content": "yes"},
             {"role": "assistant", "content": "Do you like lemon?"}]
    assert [like(again, "yes", t) for t in TASTES] == [1.0] * 3
    assert [like(asked, ASK_AGAIN, t) for t in TASTES] == [1.0] * 3


def test_the_posterior_is_bayes_by_hand():
    # sweet: .9 * .9, salty: .1 * .1, sour: .5 * .5 (fruit yes, chips no)
    total = 0.81 + 0.01 + 0.25
    assert posterior([("fruit", True), ("chips", False)]) == pytest.approx(
        [0.81 / total, 0.01 / total, 0.25 / total])


def test_users_draw_their_answers_with_the_tastes_probabilities():
    tasks = TypedUserTasks(seed=0, n_problems=2000)
    users = tasks.splits["train"] + tasks.splits["eval"]
    for k, food in enumerate(FOODS):
        for t, taste in enumerate(TASTES):
            mine = [u.answers[k] for u in users if u.taste == taste]
            rate, p = sum(mine) / len(mine), FOODS[food][t]
            assert abs(rate - p) < 4 * (p * (1 - p) / len(mine)) ** 0.5 + 1e-9, (food, taste)
    assert tasks.make_env(users[5].reference).user == users[5]


def test_sft_asks_distinct_foods_and_answers_the_most_probable_taste():
    tasks = TypedUserTasks(seed=0, n_problems=50)
    rng = random.Random(0)
    for user in tasks.splits["train"][:20]:
        conv = tasks.sft_conversation(user, 0.0, rng)
        asked = [m["content"].split()[-1][:-1] for m in conv if m["role"] == "assistant"][:-1]
        assert len(set(asked)) == len(asked) == 2
        replies = [(f, user.likes(f)) for f in asked]
        belief = posterior(replies)
        assert conv[-1]["content"] == f"<answer>{TASTES[belief.index(max(belief))]}</answer>"
