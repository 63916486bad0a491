"""Look-ups that pay to parallelise (the agent-swarm task family): "What are the codes of kelo,
varu and mita, in that order?" (answered ``<answer>17 25 8</answer>``). Each name's code is
in a record only the ``lookup`` tool returns, and a record is long (``record_lines`` lines),
so an agent that reads every record in its own context fills it; an orchestrator
(``agent.swarm``) can give each name to a sub-agent and keep its own context to the answers,
and its critical path is one sub-agent's.

SFT conversations come in three kinds, a third each: the orchestrator looking every name up
itself (its calls in one turn), the orchestrator spawning a sub-agent a name and waiting for
them, and one sub-agent's look-up. Each is shown the tools it has in a swarm episode (the
orchestrator: ``lookup``, ``spawn``, ``wait``; a sub-agent: ``lookup``)."""

from __future__ import annotations

import random
from dataclasses import dataclass

from posttrain.config.family import member
from posttrain.config.sections.agent import SUBAGENT_PROMPT
from posttrain.config.sections.task import Models, TaskFamily, TaskParts
from posttrain.envs.base import SplitTasks, answer_turn, tool_turns
from posttrain.harness import Tool, ToolRegistry
from posttrain.harness.swarm import swarm_tools

SYLLABLES = ("ka", "lo", "vi", "ru", "me", "ta", "so", "ne", "bi", "do", "fa", "gu")
FILLER = ("filed under {n}", "seen at the north gate", "owes nothing", "keeps two goats",
          "speaks slowly", "moved here last spring", "visits on market days")


@dataclass(frozen=True)
class LookupProblem:
    names: tuple[str, ...]
    codes: tuple[int, ...]

    @property
    def reference(self) -> str:
        return " ".join(map(str, self.codes))

    @property
    def domain(self) -> str:
        return "lookup"

    def messages(self) -> list[dict]:
        listed = ", ".join(self.names[:-1]) + f" and {self.names[-1]}"
        return [{"role": "user", "content": f"What are the codes of {listed}, in that order?"}]


def subagent_task(name: str) -> str:
    return f"Find the code of {name}."


class LookupTasks(SplitTasks):
    """``n_problems`` questions of ``names`` names each (drawn in that range) of a register of
    ``register`` names with codes 1-99; the last ``eval_fraction`` held out."""

    def __init__(self, seed: int = 0, eval_fraction: float = 0.1, names: tuple[int, int] = (2, 4),
                 register: int = 16, n_problems: int = 2000, record_lines: int = 6) -> None:
        rng = random.Random(f"lookup:{seed}")
        people: set[str] = set()
        while len(people) < register:
            people.add("".join(rng.choice(SYLLABLES) for _ in range(rng.randint(2, 3))))
        self.codes = {n: rng.randint(1, 99) for n in sorted(people)}
        self.record_lines = record_lines
        pool = sorted(self.codes)
        draws = (tuple(rng.sample(pool, rng.randint(*names))) for _ in range(n_problems))
        problems = [LookupProblem(c, tuple(self.codes[n] for n in c)) for c in draws]
        n_eval = self.held_out(n_problems, eval_fraction)
        self.splits = {"train": problems[:-n_eval], "eval": problems[-n_eval:]}
        self.tool = Tool(self.lookup_tool())
        self.orchestrator_tools = [self.tool.schema, *(  # what conversation_tools shows
            t.schema for t in swarm_tools(lambda task: "", lambda handles: ""))]

    def record(self, name: str) -> str:
        """``name``'s record: ``record_lines`` lines, its code on the last."""
        if name not in self.codes:
            return f"no record for {name!r}"
        rng = random.Random(name)
        lines = [rng.choice(FILLER).format(n=name) for _ in range(self.record_lines - 1)]
        return "\n".join([f"record of {name}:", *lines, f"code: {self.codes[name]}"])

    def lookup_tool(self):
        def lookup(name: str) -> str:
            """Read the record of a name.

            Args:
                name: The name, as the question writes it.
            """
            return self.record(name)

        return lookup

    @property
    def tools(self) -> ToolRegistry:
        return ToolRegistry([self.tool])

    def conversation_tools(self, conversation: list[dict]) -> list[dict]:
        """The tools a conversation's agent has in a swarm episode."""
        sub = conversation[0]["role"] == "system" and conversation[0]["content"] == SUBAGENT_PROMPT
        return [self.tool.schema] if sub else self.orchestrator_tools

    def sft_conversation(self, p: LookupProblem, error_rate: float,
                         rng: random.Random) -> list[dict]:
        """One of the three kinds (module docstring), a third each; with probability
        ``error_rate`` the orchestrator's first code is off by one."""
        kind = rng.randrange(3)
        if kind == 2:  # one sub-agent's look-up
            name = rng.choice(p.names)
            return [{"role": "system", "content": SUBAGENT_PROMPT},
                    {"role": "user", "content": subagent_task(name)},
                    *tool_turns([("lookup", {"name": name})], [self.record(name)]),
                    {"role": "assistant", "content": str(self.codes[name])}]
        codes = list(p.codes)
        codes[0] += 1 if rng.random() < error_rate else 0
        answer = " ".join(map(str, codes))
        if kind == 0:  # the orchestrator looks every name up itself
            turns = tool_turns([("lookup", {"name": n}) for n in p.names],
                               [self.record(n) for n in p.names])
        else:  # a sub-agent a name
            handles = [f"agent-{i + 1}" for i in range(len(p.names))]
            turns = tool_turns([("spawn", {"task": subagent_task(n)}) for n in p.names],
                               [f"spawned {h}" for h in handles])
            turns += tool_turns([("wait", {"handles": handles})],
                                ["\n".join(f"{h}: {c}" for h, c in zip(handles, p.codes))])
        return p.messages() + turns + [answer_turn(answer)]


@member("task", "lookup")
class LookupConfig(TaskFamily):
    """``lookup``: the codes a ``lookup`` tool reads from long records, the agent-swarm
    task family (it needs ``agent.swarm``)."""

    def check(self, cfg) -> None:
        super().check(cfg)
        if cfg.agent.swarm is None:
            raise ValueError("task.name=lookup is the agent-swarm task family: set agent.swarm")

    def build(self, seed: int, models: Models) -> TaskParts:
        tasks = LookupTasks(seed, self.eval_fraction)
        return TaskParts(tasks, tasks.tools)
