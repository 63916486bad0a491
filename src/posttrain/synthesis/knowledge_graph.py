"""Knowledge-graph tasks (Kimi K3's DAG synthesis, docs/synthesis.md): a seeded graph of
invented facts whose relations only point down a fixed order of kinds (person -> company ->
city -> country -> region; a person's mentor is an earlier person, a company's parent an
earlier company), so it is a DAG; a task
follows ``level + 1`` relations from one entity and asks for the last one
("What is the region of the country of the headquarters city of the employer of Ann Lee?").

Each task is a tool environment (``envs.tool_env``) with one tool, ``facts(entity)``, over
the facts of the entities on the answer path and of distractors; the verifier walks the path
in the database, the reference solution with the tool. The path is in ``meta.path``."""

from __future__ import annotations

import json
import random
from dataclasses import dataclass

from posttrain.synthesis.scripted import SYLLABLES, BuildRequest

KINDS = ("person", "company", "city", "country", "region")
COUNTS = {"person": 60, "company": 20, "city": 15, "country": 6, "region": 3}
# relation -> (from kind, to kind, its noun in a question)
RELATIONS = {"employer": ("person", "company", "employer"),
             "birthplace": ("person", "city", "birthplace"),
             "mentor": ("person", "person", "mentor"),
             "parent": ("company", "company", "parent company"),
             "headquarters": ("company", "city", "headquarters city"),
             "country": ("city", "country", "country"),
             "region": ("country", "region", "region")}
DISTRACTORS = 8
SCHEMA = {"type": "function", "function": {
    "name": "facts", "description": "Every fact about an entity, as [relation, value] pairs.",
    "parameters": {"type": "object", "properties": {"entity": {"type": "string"}},
                   "required": ["entity"]}}}
TOOLS = '''def facts(db, entity):
    found = db.get(str(entity).strip().lower())
    return found if found is not None else {"error": "no entity named " + str(entity)}
'''
VERIFIER = '''def verify(db, answer):
    entity = {start!r}
    for relation in {relations!r}:
        entity = next(v for r, v in db[entity.lower()] if r == relation)
    return str(answer).strip().lower() == entity.lower()
'''
SOLUTION = '''def solve(call):
    entity = {start!r}
    for relation in {relations!r}:
        entity = next(v for r, v in call("facts", entity=entity) if r == relation)
    return entity
'''


@dataclass(frozen=True)
class Graph:
    """Entity name -> its facts (``[relation, value]`` pairs) and its kind."""

    facts: dict[str, list[list[str]]]
    kind: dict[str, str]


def build_graph(seed: int) -> Graph:
    """The seeded DAG of facts (module docstring)."""
    rng = random.Random(f"kg:{seed}")
    names: dict[str, list[str]] = {}
    used: set[str] = set()
    for kind in KINDS:
        names[kind] = []
        while len(names[kind]) < COUNTS[kind]:
            n = "".join(rng.choice(SYLLABLES) for _ in range(rng.randint(2, 3))).capitalize()
            name = f"{n} {rng.choice(SYLLABLES).capitalize()}" if kind == "person" else n
            if name.lower() not in used:
                used.add(name.lower())
                names[kind].append(name)
    facts = {n: [] for kind in KINDS for n in names[kind]}
    for relation, (source, target, _) in RELATIONS.items():
        for i, name in enumerate(names[source]):
            pool = names[target][:i] if source == target else names[target]
            if pool:
                facts[name].append([relation, rng.choice(pool)])
    return Graph(facts, {n: kind for kind in KINDS for n in names[kind]})


def walks(graph: Graph, start: str, hops: int) -> list[list[str]]:
    """Every relation path of ``hops`` relations from ``start``."""
    if hops == 0:
        return [[]]
    return [[relation, *rest] for relation, value in graph.facts[start]
            for rest in walks(graph, value, hops - 1)]


def question(start: str, relations: list[str]) -> str:
    phrase = start
    for relation in relations:
        phrase = f"the {RELATIONS[relation][2]} of {phrase}"
    return f"What is {phrase}?"


class KnowledgeGraphBuilder:
    """A ``BuildRequest`` -> a task's files: environment ``index`` picks a start entity and a
    path of ``level + 1`` relations from it (seeded), over ``build_graph(seed)``."""

    def __init__(self, seed: int = 0) -> None:
        self.seed, self.graph = seed, build_graph(seed)

    def __call__(self, request: BuildRequest) -> dict[str, str]:
        rng = random.Random(f"kg-task:{self.seed}:{request.index}")
        hops = request.level + 1
        starts = [n for n in self.graph.facts if walks(self.graph, n, hops)]
        start = rng.choice(starts)
        relations = rng.choice(walks(self.graph, start, hops))
        path, entity = [], start
        for relation in relations:
            value = next(v for r, v in self.graph.facts[entity] if r == relation)
            path.append([entity, relation, value])
            entity = value
        on_path = {e for e, _, v in path} | {entity}
        others = rng.sample(sorted(set(self.graph.facts) - on_path), DISTRACTORS)
        db = {e.lower(): self.graph.facts[e] for e in sorted(on_path | set(others))}
        env = {"id": f"kg-{self.seed}-{request.index:05d}-{hops}",
               "task": question(start, relations), "tools": [SCHEMA],
               "meta": {"builder": "knowledge_graph", "hops": hops, "path": path}}
        return {"env.json": json.dumps(env), "db.json": json.dumps(db), "tools.py": TOOLS,
                "verifier.py": VERIFIER.format(start=start, relations=relations),
                "solution.py": SOLUTION.format(start=start, relations=relations)}
