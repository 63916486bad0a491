"""The config's allow-lists and rules about advantage estimators are derived from what each
catalogue entry declares (its inputs, output and options), not kept by hand: derived, they
are the lists that were kept by hand before, and they name every input the update supplies."""

import pytest

from posttrain.algos import facts, register
from posttrain.algos.registry import OUTPUTS
from posttrain.config import AlgoConfig
from posttrain.config.sections.rl import (
    ADV_ESTIMATORS,
    ADVANTAGE_INPUTS,
    AGENT_INPUTS,
    FLAT_OPTIONS,
    _taking,
)
from posttrain.train.rl_update import TO_TOKENS, advantage_inputs
from posttrain.types import Batch, Episode, Segment


def taking(input_name: str) -> set[str]:
    return {n for n in ADV_ESTIMATORS if facts("advantage", n).takes(input_name)}


def test_the_derived_lists_are_the_former_hand_kept_ones():
    assert set(ADV_ESTIMATORS) == {
        "grpo", "dr_grpo", "mean_baseline", "rloo", "reinforce_plus_plus_baseline", "gar",
        "maxrl", "gdpo", "gd2po", "dvao", "gigpo", "tree_grpo", "reinforce_plus_plus", "remax",
        "gae"}
    assert set(ADV_ESTIMATORS) - taking("group_ids") == {"gae", "reinforce_plus_plus", "remax"}
    assert taking("reward_parts") == {"gdpo", "gd2po", "dvao"}  # multi-reward
    assert set().union(*map(taking, AGENT_INPUTS)) == {"gigpo", "tree_grpo"}
    assert taking("outcome_rewards") == {"reinforce_plus_plus"}  # per-token returns of a row
    assert taking("baseline_rewards") == {"remax"}  # a greedy decode a prompt
    assert (taking("values"), taking("grader_quality"), taking("tree_ids")) == (
        {"gae"}, {"gar"}, {"tree_grpo"})
    assert {key: _taking(option) for key, option in FLAT_OPTIONS.items()} == {
        "gamma": ("gae", "gigpo", "reinforce_plus_plus"), "lam": ("gae",), "omega": ("gigpo",),
        "conflict_filter": ("gd2po",), "tau": ("gd2po",), "query_weight": ("gd2po",)}


def test_the_inputs_the_config_knows_are_those_the_update_supplies():
    seg = Segment.from_prompt_completion([1, 2], [3], [-0.5])
    eps = [Episode([seg], rewards={"a": 1.0}, reward=1.0, group_id="0")]
    supplied = advantage_inputs(Batch.from_episodes(eps, 0), eps, AlgoConfig(), {"a": 1.0})
    assert set(supplied) == set(ADVANTAGE_INPUTS)


def test_an_estimators_options_are_its_parameters_that_are_not_inputs():
    """``kl_coef`` is an input (the KL coefficient), ``gamma`` and ``lam`` options."""
    gae = facts("advantage", "gae")
    assert gae.hyperparameters(ADVANTAGE_INPUTS) == {"gamma": False, "lam": False,
                                                     "reward_clip": False}
    assert AlgoConfig(adv_estimator="gae").advantage.hyperparameters() == {"gamma": 1.0,
                                                                          "lam": 0.95}


def test_an_estimators_declared_output_is_one_the_update_places():
    assert set(OUTPUTS["advantage"]) == set(TO_TOKENS)
    with pytest.raises(ValueError, match="advantage output 'episodes': one of episode, step"):
        register("advantage", output="episodes")
