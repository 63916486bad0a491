"""The search environment: questions about fictional fact cards, answered with a ``search`` tool
(BM25 over the cards). SFT traces search for the card's title and copy the value from the
result; a share of them guess instead."""

from __future__ import annotations

import random
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from posttrain.config.family import member
from posttrain.config.sections.task import Models, TaskFamily, TaskParts
from posttrain.envs.base import SplitTasks, answer_turn, tool_turns
from posttrain.envs.search_corpus import KIND_BY_NAME, Attribute, Doc, build_corpus
from posttrain.harness import ToolRegistry


def tokenize(text: str) -> list[str]:
    """Lower-case alphanumeric runs."""
    return re.findall(r"[a-z0-9]+", text.lower())


class SearchIndex:
    """BM25 (Okapi) over the title and text of ``docs``."""

    def __init__(self, docs: Sequence[Doc]) -> None:
        from rank_bm25 import BM25Okapi  # imports numpy: not at the task section's import

        self.docs = list(docs)
        self._bm25 = BM25Okapi([tokenize(f"{d.title} {d.text}") for d in self.docs])

    def search(self, query: str, k: int = 3) -> list[dict]:
        """The ``k`` best docs with a positive score as ``{id, title, text, score}``, best
        first; equal scores keep corpus order. A query with no known word finds nothing."""
        words = tokenize(query)
        scores = self._bm25.get_scores(words) if words else [0.0] * len(self.docs)
        ranked = sorted(range(len(self.docs)), key=lambda i: (-scores[i], i))[:k]
        return [{"id": self.docs[i].id, "title": self.docs[i].title, "text": self.docs[i].text,
                 "score": float(scores[i])} for i in ranked if scores[i] > 0]


def format_results(results: list[dict]) -> str:
    """What the model reads: one card's text a line (it names its subject), or ``no results``."""
    return "\n".join(r["text"] for r in results) or "no results"


def make_search_tool(index: SearchIndex, k: int = 3) -> Callable[[str], str]:
    """The ``search`` tool over ``index``, returning its ``k`` best cards."""

    def search(query: str) -> str:
        """Search the fact cards about cities, people, elements and rivers.

        Args:
            query: Keywords, e.g. the name of what the question is about.
        """
        return format_results(index.search(query, k))

    return search


@dataclass(frozen=True)
class SearchProblem:
    """A question about one numeric attribute of one card."""

    doc: Doc
    attribute: str

    @property
    def answer(self) -> int:
        return dict(self.doc.values)[self.attribute]

    @property
    def reference(self) -> str:
        return str(self.answer)

    @property
    def spec(self) -> Attribute:
        """The asked attribute's question and range."""
        return next(a for a in KIND_BY_NAME[self.doc.kind].attributes if a.name == self.attribute)

    @property
    def question(self) -> str:
        return self.spec.question.format(title=self.doc.title)

    def messages(self) -> list[dict]:
        return [{"role": "user", "content": self.question}]

    def guess(self, rng: random.Random) -> int:
        """A plausible value: uniform over the attribute's range."""
        return rng.randint(self.spec.low, self.spec.high)


class SearchTasks(SplitTasks):
    """Every (card, attribute) question of the ``build_corpus()`` cards, split by card: a
    seeded shuffle puts ``eval_fraction`` of the cards, with all their questions, in the eval
    split. ``tool`` is the ``search`` tool over the cards."""

    def __init__(self, seed: int = 0, eval_fraction: float = 0.1) -> None:
        docs = build_corpus()
        self.index = SearchIndex(docs)
        self.tool = make_search_tool(self.index)
        rng = random.Random(f"search-split:{seed}")
        order = rng.sample(docs, len(docs))
        n_eval = self.held_out(len(docs), eval_fraction)
        self.splits: dict[str, list[SearchProblem]] = {}
        for split, cards in (("eval", order[:n_eval]), ("train", order[n_eval:])):
            problems = [SearchProblem(d, name) for d in cards for name, _ in d.values]
            self.splits[split] = rng.sample(problems, len(problems))

    def sft_conversation(self, p: SearchProblem, error_rate: float,
                         rng: random.Random) -> list[dict]:
        """Search for the card's title and answer the value from the result; with probability
        ``error_rate`` answer a guess without searching."""
        if rng.random() < error_rate:
            return [*p.messages(), answer_turn(p.guess(rng))]
        title = p.doc.title
        return [*p.messages(), *tool_turns([("search", {"query": title})], [self.tool(title)]),
                answer_turn(p.answer)]


@member("task", "search")
class SearchConfig(TaskFamily):
    """``search``: fact-card questions answered in the agent loop with a BM25 ``search`` tool."""

    def build(self, seed: int, models: Models) -> TaskParts:
        tasks = SearchTasks(seed, self.eval_fraction)
        return TaskParts(tasks, ToolRegistry([tasks.tool]))
