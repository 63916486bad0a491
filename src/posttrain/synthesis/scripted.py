"""The scripted tool-environment builder: a seeded small database of one of five domains
(people and their records), tools over it, and a question at the asked level, with a verifier
that recomputes the answer from the database and a reference solution that only calls tools.

Levels: 1, where one person lives (one call); 2, one person's total (two calls and a sum); 3,
how many of one person's records exceed a threshold (two calls and a filter); 4, who, among
the people of one city, has the largest total (one call a person more). With ``flaw_rate``,
a first draft's verifier expects the answer plus one (a name reversed): a bug the validation
catches; a draft sent back with feedback is fixed."""

from __future__ import annotations

import json
import random
from dataclasses import dataclass

MAX_LEVEL = 4
SYLLABLES = ("ka", "lo", "mi", "ra", "ven", "tor", "sa", "bel", "dun", "is", "or", "fen")
CITIES = ("Arden", "Brill", "Corvo", "Dunmere", "Eskil")


@dataclass(frozen=True)
class Domain:
    people: str  # table and tool nouns
    person: str
    records: str
    item: str  # a record's label column
    amount: str  # a record's number column
    items: tuple[str, ...]


DOMAINS = (
    Domain("customers", "customer", "orders", "item", "amount",
           ("lamp", "chair", "desk", "kettle", "rug")),
    Domain("members", "member", "loans", "book", "days", ("atlas", "novel", "primer", "saga")),
    Domain("patients", "patient", "visits", "doctor", "cost", ("Ames", "Bo", "Cruz", "Dahl")),
    Domain("students", "student", "grades", "course", "score",
           ("math", "art", "history", "music")),
    Domain("drivers", "driver", "trips", "route", "km", ("north", "coast", "ring", "valley")),
)


@dataclass(frozen=True)
class BuildRequest:
    """What a builder is asked: environment ``index`` (its seed) at ``level``; with
    ``feedback``, the previous draft (``previous``, its files) failed validation for that
    reason and is to be fixed; without, ``previous`` validated and a harder one is wanted."""

    index: int
    level: int
    previous: dict[str, str] | None = None
    feedback: str | None = None


def _name(rng: random.Random) -> str:
    return " ".join("".join(rng.choice(SYLLABLES) for _ in range(2)).capitalize()
                    for _ in range(2))


def _database(d: Domain, rng: random.Random) -> dict:
    names = set()
    while len(names) < rng.randint(6, 10):
        names.add(_name(rng))
    people = [{"id": i + 1, "name": n, "city": rng.choice(CITIES)}
              for i, n in enumerate(sorted(names))]
    records = [{"id": j + 1, f"{d.person}_id": p["id"], d.item: rng.choice(d.items),
                d.amount: rng.randint(1, 90)}
               for j, p in enumerate(p for p in people for _ in range(rng.randint(1, 4)))]
    return {d.people: people, d.records: records}


def _tools(d: Domain) -> tuple[list[dict], str]:
    def schema(name: str, description: str, arg: str, kind: str) -> dict:
        return {"type": "function", "function": {
            "name": name, "description": description,
            "parameters": {"type": "object", "properties": {arg: {"type": kind}},
                           "required": [arg]}}}

    key = f"{d.person}_id"
    schemas = [schema(f"find_{d.person}", f"The {d.person} with this name.", "name", "string"),
               schema(f"list_{d.records}", f"Every one of a {d.person}'s {d.records}.", key,
                      "integer"),
               schema(f"{d.people}_in", f"The {d.people} who live in a city.", "city", "string")]
    source = f'''def find_{d.person}(db, name):
    for row in db["{d.people}"]:
        if row["name"].lower() == str(name).lower():
            return row
    return {{"error": "no {d.person} named " + str(name)}}


def list_{d.records}(db, {key}):
    return [r for r in db["{d.records}"] if r["{key}"] == int({key})]


def {d.people}_in(db, city):
    return [r for r in db["{d.people}"] if r["city"].lower() == str(city).lower()]
'''
    return schemas, source


def _question(d: Domain, db: dict, level: int, rng: random.Random) -> tuple[str, str, str]:
    """``(task, verifier body, solution body)``: the verifier body computes ``expected`` from
    ``db``; the solution body computes the answer with ``call``."""
    person = rng.choice(db[d.people])
    key, name = f"{d.person}_id", person["name"]
    mine = f'[r for r in db["{d.records}"] if r["{key}"] == who["id"]]'
    find = f'who = next(p for p in db["{d.people}"] if p["name"] == {name!r})'
    if level == 1:
        return (f"In which city does {d.person} {name} live?",
                f'{find}\n    expected = who["city"]',
                f'return call("find_{d.person}", name={name!r})["city"]')
    if level == 2:
        return (f"What is the total {d.amount} of the {d.records} of {d.person} {name}?",
                f'{find}\n    expected = sum(r["{d.amount}"] for r in {mine})',
                f'who = call("find_{d.person}", name={name!r})\n'
                f'    return sum(r["{d.amount}"] for r in call("list_{d.records}", '
                f'{key}=who["id"]))')
    if level == 3:
        limit = rng.randint(20, 70)
        return (f"How many {d.records} of {d.person} {name} have a {d.amount} above {limit}?",
                f'{find}\n    expected = sum(1 for r in {mine} if r["{d.amount}"] > {limit})',
                f'who = call("find_{d.person}", name={name!r})\n'
                f'    return sum(1 for r in call("list_{d.records}", {key}=who["id"]) '
                f'if r["{d.amount}"] > {limit})')
    city = person["city"]
    return (f"Which {d.person} living in {city} has the largest total {d.amount} over their "
            f"{d.records}? Answer with the name (the first in alphabetical order on a tie).",
            f'def total(p):\n        return sum(r["{d.amount}"] for r in db["{d.records}"] '
            f'if r["{key}"] == p["id"])\n'
            f'    here = sorted((p for p in db["{d.people}"] if p["city"] == {city!r}), '
            f'key=lambda p: p["name"])\n'
            f'    expected = max(here, key=total)["name"]',
            f'here = sorted(call("{d.people}_in", city={city!r}), key=lambda p: p["name"])\n'
            f'    totals = [sum(r["{d.amount}"] for r in call("list_{d.records}", '
            f'{key}=p["id"])) for p in here]\n'
            f'    return here[totals.index(max(totals))]["name"]')


VERIFIER = '''def verify(db, answer):
    {body}
    answer = str(answer).strip()
    if isinstance(expected, str):
        return answer.lower() == expected.lower(){text_flaw}
    try:
        return float(answer) == expected{number_flaw}
    except ValueError:
        return False
'''


class ScriptedToolBuilder:
    """A ``BuildRequest`` -> an environment's files (module docstring)."""

    def __init__(self, seed: int = 0, flaw_rate: float = 0.0) -> None:
        self.seed, self.flaw_rate = seed, flaw_rate

    def __call__(self, request: BuildRequest) -> dict[str, str]:
        rng = random.Random(f"scripted:{self.seed}:{request.index}")
        d = rng.choice(DOMAINS)
        db = _database(d, rng)
        schemas, tools = _tools(d)
        level = min(request.level, MAX_LEVEL)
        task, check, solve = _question(d, db, level, random.Random(rng.random() + level))
        flawed = request.feedback is None and random.Random(
            f"flaw:{self.seed}:{request.index}:{level}").random() < self.flaw_rate
        verifier = VERIFIER.format(body=check, text_flaw="[::-1]" if flawed else "",
                                   number_flaw=" + 1" if flawed else "")
        env = {"id": f"scripted-{self.seed}-{request.index:05d}", "task": task,
               "tools": schemas, "meta": {"builder": "scripted", "domain": d.people,
                                          "level": level}}
        return {"env.json": json.dumps(env, indent=1), "db.json": json.dumps(db),
                "tools.py": tools, "verifier.py": verifier,
                "solution.py": f"def solve(call):\n    {solve}\n"}
