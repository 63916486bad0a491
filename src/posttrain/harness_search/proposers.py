"""Who proposes the next harnesses: ``proposer(store, k, iteration) -> candidates`` reads the
store (every candidate's source, result and raw traces) and returns up to ``k`` new ones (ids
are the loop's to give). ``MutationProposer`` changes one key of a frontier candidate within
a declared space (a baseline that needs no model); ``ChatProposer`` shows a chat model (an
endpoint, or an agent behind ``posttrain serve``) the store's digest and reads its YAML."""

from __future__ import annotations

import json
import random
from collections.abc import Callable, Sequence
from typing import Any, Protocol

import yaml

from posttrain.harness_search.frontier import pareto
from posttrain.harness_search.store import Candidate, HarnessStore


class Proposer(Protocol):
    def __call__(self, store: HarnessStore, k: int, iteration: int) -> list[Candidate]: ...


class MutationProposer:
    """Candidate ``j`` copies frontier candidate ``j mod |frontier|`` and sets one key of
    ``space`` (key -> the values to try) to a value it does not have, never repeating a
    harness already in the store; the draws are seeded by ``(seed, iteration)``. Harnesses are
    compared by what they change of ``base`` (the run's config: each key's value there), so a
    key set to the value the config already has is no new harness (such repeats were 5 of 11
    candidates); a candidate is labelled by every key it changes."""

    def __init__(self, space: dict[str, Sequence[Any]], seed: int = 0,
                 base: dict[str, Any] | None = None) -> None:
        """``base``: the run's config as a tree (``model_dump``), read by dotted keys."""
        if not isinstance(space, dict) or not space or not all(
                isinstance(v, list) and v for v in space.values()):
            raise ValueError("the search space maps dotted config keys to lists of values to "
                             f"try, e.g. {{eval.temperature: [0.0, 0.7]}}; got {space!r}")
        self.space, self.seed, self.base = {k: list(v) for k, v in space.items()}, seed, base or {}

    def changes(self, overrides: dict[str, Any]) -> dict[str, Any]:
        """What ``overrides`` change of the base config."""
        return {k: v for k, v in overrides.items() if _at(self.base, k) != v}

    def __call__(self, store: HarnessStore, k: int, iteration: int) -> list[Candidate]:
        rng = random.Random(f"{self.seed}:{iteration}")
        by_id = {c.id: c for c in store.candidates()}
        front = [by_id[c] for c in pareto(store.results())] or list(by_id.values())
        seen = [self.changes(c.overrides) for c in by_id.values()]
        out: list[Candidate] = []
        for j in range(k * 20):  # bounded: a small space runs out of new harnesses
            if len(out) == k:
                break
            parent = front[j % len(front)]
            key = rng.choice(sorted(self.space))
            overrides = {**parent.overrides, key: rng.choice(self.space[key])}
            changed = self.changes(overrides)
            if changed not in seen:
                seen.append(changed)
                label = ", ".join(f"{key_}={json.dumps(v)}" for key_, v in changed.items())
                out.append(Candidate("", overrides, parent.files, parent.id,
                                     label or "the config as it is"))
        return out


_ABSENT = object()


def _at(tree: dict[str, Any], key: str) -> Any:
    """The value at dotted ``key`` of ``tree`` (``_ABSENT`` where there is none)."""
    for part in key.split("."):
        tree = tree.get(part, _ABSENT) if isinstance(tree, dict) else _ABSENT
    return tree


PROPOSE = """You improve the harness of an agent: the configuration around a fixed model
(system prompt, context, tools, budgets, skills). Below is every harness tried so far with
its source, its score on the search set (higher is better) and the tokens an episode held
(fewer is better), and failed episodes of the best one.

{digest}

Propose {k} new harnesses likely to score higher. Reply with {k} YAML documents separated by
lines '---', each a mapping with keys: parent (an id above), overrides (dotted config keys to
values), files (optional: relative path to file text; '{{candidate}}' in an override names
the harness's directory) and note (one line: the idea)."""


def digest(store: HarnessStore, failures: int = 3) -> str:
    """The store as a proposer reads it: each candidate's source and result, then up to
    ``failures`` failed traces of the best candidate."""
    results, lines = store.results(), []
    for c in store.candidates():
        r = results.get(c.id)
        outcome = "not evaluated" if r is None else (
            f"error: {r.error}" if r.error else f"score {r.score:.3f}, tokens {r.tokens:.0f}")
        lines += [f"## {c.id} (parent {c.parent}; {c.note or 'the start'}): {outcome}",
                  yaml.safe_dump({"overrides": c.overrides, "files": c.files},
                                 sort_keys=True).strip()]
    if front := pareto(results):
        failed = [t for t in store.traces(front[0]) if not t.get("passed")][:failures]
        lines += [f"## failed episodes of {front[0]}"] + [t["text"] for t in failed]
    return "\n\n".join(lines)


class ChatProposer:
    """``chat`` (conversations -> replies) is asked ``prompt`` with the store's ``digest``;
    each YAML document of the reply that is a mapping with ``overrides`` is a candidate (the
    rest are skipped)."""

    def __init__(self, chat: Callable[[Sequence[list[dict]]], list[str]],
                 prompt: str = PROPOSE) -> None:
        self.chat, self.prompt = chat, prompt

    def __call__(self, store: HarnessStore, k: int, iteration: int) -> list[Candidate]:
        ask = self.prompt.format(digest=digest(store), k=k)
        (reply,) = self.chat([[{"role": "user", "content": ask}]])
        return parse_candidates(reply)[:k]


def parse_candidates(reply: str) -> list[Candidate]:
    """The candidates of a proposer's YAML reply (fences stripped); malformed ones skipped."""
    text = "\n".join(line for line in reply.splitlines() if not line.startswith("```"))
    try:
        docs = list(yaml.safe_load_all(text))
    except yaml.YAMLError:
        return []
    out = []
    for d in docs:
        if isinstance(d, dict) and isinstance(d.get("overrides"), dict):
            files = d.get("files") or {}
            if isinstance(files, dict) and all(isinstance(v, str) for v in files.values()):
                out.append(Candidate("", d["overrides"], dict(files),
                                     str(d["parent"]) if d.get("parent") else None,
                                     str(d.get("note", ""))))
    return out
