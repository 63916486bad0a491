"""The search environment's corpus: fictional fact cards generated from a seed.

Cards describe invented cities, people, elements and rivers with three numeric attributes each,
so no answer can be known without reading the card. The corpus is code, not a data file: the
same ``(n_docs, seed)`` always builds the same cards, and every name is unique in the corpus."""

from __future__ import annotations

import random
from dataclasses import dataclass

SYLLABLES = ("vel", "mor", "tar", "sun", "kel", "dra", "bri", "ost", "lum", "zir", "qua", "ven",
             "ori", "pel", "thal", "dun", "ris", "gan", "oph", "yes", "cor", "nib", "fal", "ush")


@dataclass(frozen=True)
class Attribute:
    """A numeric attribute drawn uniformly from ``[low, high]`` and the question asking it."""

    name: str
    low: int
    high: int
    question: str  # formatted with ``title``


@dataclass(frozen=True)
class Kind:
    """A kind of card: how its title is made from invented words and its text from values."""

    name: str
    title: str  # formatted with ``a`` and ``b``, two invented words
    text: str  # formatted with ``title`` and the attribute values
    attributes: tuple[Attribute, ...]


KINDS = (
    Kind("city", "{a}", "{title} is a city founded in {founded}. It has {population} inhabitants "
         "and lies {elevation} m above sea level.", (
             Attribute("founded", 1000, 1899, "In what year was {title} founded?"),
             Attribute("population", 1000, 99999, "How many inhabitants does {title} have?"),
             Attribute("elevation", 10, 2999, "How many metres above sea level is {title}?"))),
    Kind("person", "{a} {b}", "{title} was a poet born in {born}. She wrote {books} books and "
         "lived to {age}.", (
             Attribute("born", 1700, 1989, "In what year was {title} born?"),
             Attribute("books", 2, 60, "How many books did {title} write?"),
             Attribute("age", 40, 99, "How old did {title} live to be?"))),
    Kind("element", "{a}ium", "{title} is an element with atomic number {number}, discovered "
         "in {discovered}. It melts at {melting} K.", (
             Attribute("number", 120, 199, "What is the atomic number of {title}?"),
             Attribute("discovered", 1750, 1999, "In what year was {title} discovered?"),
             Attribute("melting", 200, 3999, "At how many kelvin does {title} melt?"))),
    Kind("river", "{a} River", "The {title} is {length} km long. It has {tributaries} "
         "tributaries and {bridges} bridges.", (
             Attribute("length", 50, 4999, "How many km long is the {title}?"),
             Attribute("tributaries", 1, 40, "How many tributaries does the {title} have?"),
             Attribute("bridges", 1, 90, "How many bridges cross the {title}?"))),
)
KIND_BY_NAME = {k.name: k for k in KINDS}


@dataclass(frozen=True)
class Doc:
    """One fact card: ``values`` holds its attributes as ``(name, value)`` pairs."""

    id: str
    kind: str
    title: str
    text: str
    values: tuple[tuple[str, int], ...]


def build_corpus(n_docs: int = 200, seed: int = 0) -> list[Doc]:
    """``n_docs`` cards, kinds in turn, ids ``d000``...; deterministic in ``(n_docs, seed)``."""
    rng, used = random.Random(f"search-corpus:{seed}"), set()

    def word() -> str:
        while True:
            w = "".join(rng.choice(SYLLABLES) for _ in range(rng.randint(2, 3))).capitalize()
            if w not in used:
                used.add(w)
                return w

    docs = []
    for i in range(n_docs):
        kind = KINDS[i % len(KINDS)]
        title = kind.title.format(a=word(), b=word())
        values = tuple((a.name, rng.randint(a.low, a.high)) for a in kind.attributes)
        text = kind.text.format(title=title, **dict(values))
        docs.append(Doc(f"d{i:03d}", kind.name, title, text, values))
    return docs
