"""The catalogue's contract: lookup, aliases, errors, the spec's entry list, generated docs."""

from pathlib import Path

import pytest
import torch

from posttrain.algos import KINDS, LazyInputs, entries, entry, get, names, register
from posttrain.algos.docs import render_index, render_markdown
from posttrain.algos.registry import INDEX, facts
from posttrain.config.reach import catalogue_reach

ROOT = Path(__file__).resolve().parents[3]


def spec_entries() -> set[tuple[str, str]]:
    lines = (Path(__file__).parent / "spec_entries.txt").read_text().splitlines()
    return {tuple(line.split()) for line in lines if line and not line.startswith("#")}


def test_the_registry_lists_exactly_the_spec_entries():
    registered = {(e.kind, e.name) for e in entries()}
    assert registered == spec_entries(), (registered ^ spec_entries())


def test_spec_list_kinds_are_the_catalogue_kinds():
    assert {kind for kind, _ in spec_entries()} == set(KINDS)


def test_entries_carry_formula_and_source():
    for e in entries():
        assert e.formula and e.source, e.name


def test_aliases_and_spellings_resolve_to_the_canonical_function():
    assert entry("aggregation", "Seq-Mean-Token-Mean").name == "seq_mean_token_mean"
    assert get("advantage", "group_norm") is get("advantage", "grpo")


def test_unknown_names_list_the_known_ones():
    with pytest.raises(KeyError, match="known: .*token_mean"):
        get("aggregation", "token_max")
    with pytest.raises(KeyError, match="kinds: advantage"):
        get("optimizer", "adam")


def test_duplicate_and_bad_kind_registration_fail():
    with pytest.raises(ValueError, match="already registered"):
        register("kl", "k9", aliases=("low_var_kl",), source="x")(lambda: 0)
    assert "k9" not in names("kl")
    with pytest.raises(KeyError):
        get("kl", "k9")
    with pytest.raises(ValueError, match="unknown kind"):
        register("optimizer", "adam", source="x")


def test_docs_are_generated_from_the_registry():
    doc = (ROOT / "docs" / "algorithms.md").read_text()
    assert doc == render_markdown(catalogue_reach()), \
        "run: posttrain algorithms --markdown > docs/algorithms.md"


def test_a_run_reaches_every_entry_or_says_why_not():
    """Each entry is named by a config key, applied by a switch or section, or listed as a
    function only with its reason; a switch or reason for an entry a key already names, or
    for no entry at all, is stale."""
    from posttrain.config.reach import FUNCTION_ONLY, SWITCHED, named_by_keys

    reached = catalogue_reach()
    assert [k for k, how in reached.items() if not how] == []
    by_key = {(kind, name) for _, kind, allowed in named_by_keys()
              for name in (allowed or [n for k, n in reached if k == kind])}
    assert set(SWITCHED) | set(FUNCTION_ONLY) <= set(reached)
    assert not (set(SWITCHED) | set(FUNCTION_ONLY)) & by_key


def test_the_index_is_generated_from_the_registry():
    assert INDEX.read_text() == render_index(), \
        "run: posttrain algorithms --index > src/posttrain/algos/index.json"


def test_facts_agree_with_the_function_they_describe():
    """``cispo``'s hyperparameters as the index gives them and as its signature reads."""
    cispo = facts("policy_loss", "cispo")
    assert cispo.module == "posttrain.algos.objectives.is_losses"
    assert cispo.hyperparameters() == {"r_min": False, "r_max": False}
    assert cispo.hyperparameters() == entry("policy_loss", "cispo").hyperparameters()
    assert "logp" in cispo.parameter_names() and "logp" not in cispo.hyperparameters()


def test_an_entry_takes_its_declared_inputs_and_computes_only_those():
    """``gdpo`` reads its rewards from the ``reward_parts`` input (its declared feed); an
    input it does not ask for is never computed."""
    def untouched():
        raise AssertionError("computed an input nobody asked for")

    parts = torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0], [0.0, 0.0]])
    inputs = LazyInputs(reward_parts=lambda: parts, part_weights=lambda: [1.0, 2.0],
                        group_ids=lambda: torch.tensor([0, 0, 1, 1]),
                        mask=lambda: torch.ones(4, 1), rewards=untouched)
    called = entry("advantage", "gdpo").call(inputs)
    direct = get("advantage", "gdpo")(rewards=parts, weights=[1.0, 2.0],
                                      group_ids=torch.tensor([0, 0, 1, 1]), mask=torch.ones(4, 1))
    assert torch.equal(called, direct)


def test_a_missing_input_names_what_is_needed():
    with pytest.raises(ValueError, match="gigpo' needs 'step_states'"):
        entry("advantage", "gigpo").call(LazyInputs(rewards=lambda: torch.zeros(2),
                                                    group_ids=lambda: torch.zeros(2)))


def test_every_estimator_and_shaping_rule_the_pipeline_feeds_declares_its_output():
    from posttrain.config.sections.rl import ADV_ESTIMATORS, SHAPING_RULES
    from posttrain.train.rl_update import TO_TOKENS

    for name in ADV_ESTIMATORS:
        assert entry("advantage", name).output in TO_TOKENS, name
    for name in SHAPING_RULES:
        assert entry("shaping", name).output in ("bonus", "cost", "reward"), name
