"""P-GenRM's chain: a well-formed chain gives its final score; a chain without one gives its
criteria's weighted mean; garbled or off-scale values are ignored, and nothing parseable is
missing (None), never 0."""

import pytest

from posttrain.rewards.evaluation_chain import chain_messages, extract

CHAIN = """Persona: a retired teacher who reads slowly
Core preference: short, plain answers
Criterion: brevity | weight 0.6 | score 8
Criterion: accuracy | weight 0.4 | score 6
Final score: 7.2"""


def test_a_well_formed_chain_gives_its_final_score():
    assert extract(CHAIN) == pytest.approx(0.72)


@pytest.mark.parametrize("text,expected", [
    (CHAIN.replace("Final score: 7.2", ""), (0.6 * 8 + 0.4 * 6) / 10),  # the criteria's mean
    (CHAIN.replace("Final score: 7.2", "Final score: 12"), (0.6 * 8 + 0.4 * 6) / 10),
    (CHAIN.replace("weight 0.4", "weight 2"), 0.72),  # the final score wins over criteria
    (CHAIN.replace("Final score: 7.2", "").replace("weight 0.4", "weight heavy"), 0.8),
    ("criterion: tone|weight=1|score=5\nFINAL SCORE = 9 ... final score: 3", 0.3),  # the last
    ("Persona: ?\nI refuse to grade.", None),
    ("", None),
    ("Final score: -1\nCriterion: x | weight 0 | score 5", None),
])
def test_garbled_chains_degrade_to_what_parses(text, expected):
    got = extract(text)
    assert got == (None if expected is None else pytest.approx(expected))


def test_the_prompt_names_the_user_and_the_chain():
    system, user = chain_messages("2+2?", "4", "likes terse answers", score_max=5)
    assert "Final score: N' (0 to 5)" in system["content"]
    assert "likes terse answers" in user["content"] and "Response:\n4" in user["content"]
