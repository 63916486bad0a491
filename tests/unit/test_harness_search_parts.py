"""Harness search's parts: the Pareto frontier against its definition, the pick, the mutation
proposer (one key changed, no harness twice, seeded), a proposer's YAML read leniently, and
the chat proposer's view of the store."""

from posttrain.harness_search import (
    Candidate,
    ChatProposer,
    HarnessStore,
    MutationProposer,
    Result,
    pareto,
    parse_candidates,
    pick,
)


def test_the_frontier_keeps_what_nothing_dominates():
    results = {"a": Result(0.5, 100), "b": Result(0.7, 200), "c": Result(0.5, 150),
               "d": Result(0.7, 200), "e": Result(0.2, 50), "f": Result(None, None, error="x"),
               "g": Result(0.9, 400)}
    # c: a is as good with fewer tokens; b and d tie (neither dominates the other)
    assert pareto(results) == ["g", "b", "d", "a", "e"]
    assert pick(results) == "g"
    assert pick({"x": Result(0.5, 10), "y": Result(0.5, 5)}) == "y"


def store_with(tmp_path, *candidates):
    store = HarnessStore(tmp_path)
    for c, r in candidates:
        store.add(c)
        store.record(c.id, r, [{"text": "t", "passed": False}])
    return store


def test_mutation_changes_one_key_of_a_frontier_harness_and_never_repeats(tmp_path):
    store = store_with(tmp_path, (Candidate("i00-0", {"eval.temperature": 0.7}),
                                  Result(0.4, 10)))
    propose = MutationProposer({"eval.temperature": [0.0, 0.7], "eval.max_new_tokens": [8, 16]})
    first = propose(store, 3, 1)
    assert first == propose(store, 3, 1)  # seeded by the round
    assert len(first) == 3 and all(c.parent == "i00-0" for c in first)
    tried = [c.overrides for c in first] + [{"eval.temperature": 0.7}]
    assert len({tuple(sorted(o.items())) for o in tried}) == 4
    parent = {"eval.temperature": 0.7}
    for c in first:
        keys = set(c.overrides) | set(parent)
        assert sum(c.overrides.get(k) != parent.get(k) for k in keys) == 1


def test_a_proposer_reply_is_read_leniently():
    reply = """```yaml
parent: i00-0
overrides: {eval.temperature: 0.0}
note: greedy
---
just words
---
overrides: not a mapping
---
overrides: {skills.dir: "{candidate}/skills"}
files: {skills/a/SKILL.md: "text"}
```"""
    got = parse_candidates(reply)
    assert [(c.parent, c.overrides, c.note) for c in got] == [
        ("i00-0", {"eval.temperature": 0.0}, "greedy"),
        (None, {"skills.dir": "{candidate}/skills"}, "")]
    assert got[1].files == {"skills/a/SKILL.md": "text"}
    assert parse_candidates("key: [unclosed") == []


def test_the_chat_proposer_shows_the_store_and_its_failures(tmp_path):
    store = store_with(tmp_path, (Candidate("i00-0", {"eval.temperature": 0.7}),
                                  Result(0.4, 10)))
    asked = []

    def chat(conversations):
        asked.extend(conversations)
        return ["overrides: {eval.temperature: 0.0}\nparent: i00-0"]

    (got,) = ChatProposer(chat)(store, 2, 1)
    prompt = asked[0][0]["content"]
    assert "## i00-0 (parent None; the start): score 0.400, tokens 10" in prompt
    assert "eval.temperature: 0.7" in prompt and "failed episodes of i00-0" in prompt
    assert got.overrides == {"eval.temperature": 0.0}


def test_mutation_knows_a_value_the_config_already_has_is_no_new_harness(tmp_path):
    """Setting a key to the config's own value repeats the start harness (it did 5 of 11
    times); every candidate is labelled by all it changes of the config."""
    store = store_with(tmp_path, (Candidate("i00-0", {}), Result(0.4, 10)))
    propose = MutationProposer({"eval.temperature": [0.0, 0.7], "eval.max_new_tokens": [8, 16]},
                               base={"eval": {"temperature": 0.0, "max_new_tokens": 16}})
    made = propose(store, 10, 1)  # only two harnesses are new
    assert sorted(c.note for c in made) == ["eval.max_new_tokens=8", "eval.temperature=0.7"]
    store = store_with(tmp_path / "b", (Candidate("i00-0", {"eval.temperature": 0.7}),
                                        Result(0.4, 10)))
    (child,) = [c for c in propose(store, 10, 2) if "max_new_tokens" in c.note]
    assert child.note == "eval.temperature=0.7, eval.max_new_tokens=8"
