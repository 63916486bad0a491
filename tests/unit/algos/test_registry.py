"""The catalogue's contract: lookup, aliases, errors, the spec's entry list, generated docs."""

from pathlib import Path

import pytest

from posttrain.algos import KINDS, entries, entry, get, names, register
from posttrain.algos.docs import render_markdown

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
    assert doc == render_markdown(), "run: posttrain algorithms --markdown > docs/algorithms.md"
