"""Procedural arithmetic: ``a op b`` with ``op`` in ``+ - *``, seeded disjoint train/eval splits.

Answers use the format ``<answer>42</answer>``. ``flawed_answer`` is a systematic student error
(addition without carrying, subtraction without borrowing, multiplication with one extra group)
used to make deliberately imperfect SFT data."""

from __future__ import annotations

import hashlib
import random
from dataclasses import dataclass
from itertools import zip_longest
from typing import ClassVar, Literal

from pydantic import Field

from posttrain.config.family import member
from posttrain.config.sections.task import Models, TaskFamily, TaskParts
from posttrain.envs.base import StepResult
from posttrain.rewards import RewardFunction

Op = Literal["+", "-", "*"]
OPS: tuple[str, ...] = ("+", "-", "*")
DOMAINS = {"+": "addition", "-": "subtraction", "*": "multiplication"}


@dataclass(frozen=True)
class Problem:
    """``a op b``; operands are written zero-padded to ``width`` digits (0: no padding)."""

    a: int
    op: str
    b: int
    width: int = 0

    @property
    def answer(self) -> int:
        return {"+": self.a + self.b, "-": self.a - self.b, "*": self.a * self.b}[self.op]

    @property
    def domain(self) -> str:
        """The task domain (``addition``, ``subtraction``, ``multiplication``): what routes a
        problem to its teacher in multi-teacher distillation."""
        return DOMAINS[self.op]

    @property
    def question(self) -> str:
        w = self.width
        return f"What is {self.a:0{w}d}{self.op}{self.b:0{w}d}?"

    @property
    def flawed_answer(self) -> int:
        """The answer of a student who never carries/borrows (``*``: adds one extra ``a``)."""
        if self.op == "*":
            return self.a * self.b + self.a
        digits = [(x + y) % 10 if self.op == "+" else abs(x - y)
                  for x, y in _columns(self.a, self.b)]
        value = int("".join(map(str, reversed(digits))))
        return -value if self.op == "-" and self.a < self.b else value

    @property
    def reference(self) -> str:
        return str(self.answer)

    def messages(self) -> list[dict]:
        return [{"role": "user", "content": self.question}]

    def completion(self, flawed: bool = False) -> str:
        """The worked solution; ``flawed`` gives the no-carry student's (scratchpad and answer)."""
        answer = self.flawed_answer if flawed else self.answer
        return f"{self.scratchpad(carry=not flawed)}<answer>{answer}</answer>"

    def scratchpad(self, carry: bool = True) -> str:
        """Column work, units first. ``+``: ``<think>7+8=15 4+3+1=8</think>`` for 47+38;
        ``-``: ``<think>12-8=4 5-3-1=1</think>`` for 52-38 (a borrow writes the minuend digit
        plus 10), ``<think>- 17-8=9 4-3-1=0</think>`` for 38-47 (the larger minus the smaller,
        negated). ``carry=False`` is the flawed student's: no carry, or the smaller digit taken
        from the larger. ``*`` has none."""
        if self.op == "+":
            return "<think>" + " ".join(self._addition_columns(carry)) + "</think>"
        if self.op == "-":
            sign = "- " if self.a < self.b else ""
            return f"<think>{sign}" + " ".join(self._subtraction_columns(carry)) + "</think>"
        return ""

    def _addition_columns(self, carry: bool) -> list[str]:
        steps, c = [], 0
        for x, y in _columns(self.a, self.b):
            s = x + y + c
            steps.append(f"{x}+{y}+{c}={s}" if c else f"{x}+{y}={s}")
            c = s // 10 if carry else 0
        return steps

    def _subtraction_columns(self, borrow: bool) -> list[str]:
        steps, b = [], 0
        for x, y in _columns(max(self.a, self.b), min(self.a, self.b)):
            if not borrow:
                steps.append(f"{max(x, y)}-{min(x, y)}={abs(x - y)}")
                continue
            top = x + 10 if x - y - b < 0 else x
            steps.append(f"{top}-{y}-{b}={top - y - b}" if b else f"{top}-{y}={top - y}")
            b = 1 if top != x else 0
        return steps


def _columns(a: int, b: int) -> list[tuple[int, int]]:
    """The digit pairs of ``a`` and ``b``, units first, the shorter padded with zeros."""
    return [(int(x), int(y)) for x, y in zip_longest(str(a)[::-1], str(b)[::-1], fillvalue="0")]


def _is_eval(p: Problem, seed: int, eval_fraction: float) -> bool:
    h = hashlib.sha256(f"{seed}:{p.a}{p.op}{p.b}".encode()).digest()
    return int.from_bytes(h[:8], "big") / 2**64 < eval_fraction


class ArithmeticTasks:
    """A seeded family of arithmetic problems with disjoint train and eval splits.

    Operands are uniform in ``[0, 10**digits)`` and written with ``digits`` digits (fixed width
    makes digit positions learnable by a tiny model). A problem belongs to the eval split when a
    seeded hash of it falls below ``eval_fraction``; the train sampler rejects eval problems."""

    def __init__(self, ops: tuple[str, ...] = ("+", "-"), digits: int = 2, seed: int = 0,
                 eval_fraction: float = 0.1) -> None:
        if not ops or any(o not in OPS for o in ops):
            raise ValueError(f"ops must be a non-empty subset of {OPS}, got {ops}")
        if digits < 1:
            raise ValueError(f"digits must be >= 1, got {digits}")
        if not 0 < eval_fraction < 1:
            raise ValueError(f"eval_fraction must be in (0, 1), got {eval_fraction}")
        self.ops, self.digits = tuple(ops), digits
        self.seed, self.eval_fraction = seed, eval_fraction

    def _random(self, rng: random.Random) -> Problem:
        hi = 10**self.digits - 1
        return Problem(rng.randint(0, hi), rng.choice(self.ops), rng.randint(0, hi), self.digits)

    def sample(self, n: int, rng: random.Random, split: str = "train") -> list[Problem]:
        """``n`` problems of ``split`` ('train' or 'eval') drawn with ``rng``."""
        want_eval = {"train": False, "eval": True}[split]
        out: list[Problem] = []
        while len(out) < n:
            p = self._random(rng)
            if _is_eval(p, self.seed, self.eval_fraction) == want_eval:
                out.append(p)
        return out

    def eval_set(self, n: int) -> list[Problem]:
        """A fixed, reproducible list of ``n`` held-out problems."""
        return self.sample(n, random.Random(f"eval:{self.seed}"), split="eval")

    def sft_conversation(self, p: Problem, error_rate: float, rng: random.Random) -> list[dict]:
        """A chat example whose answer is the flawed one with probability ``error_rate``."""
        flawed = rng.random() < error_rate
        return p.messages() + [{"role": "assistant", "content": p.completion(flawed=flawed)}]


class ArithmeticEnv:
    """Single-turn environment: the action is the completion text, scored by ``reward_fn``."""

    def __init__(self, reward_fn: RewardFunction) -> None:
        self.reward_fn = reward_fn
        self._problem: Problem | None = None

    def reset(self, task: Problem) -> list[dict]:
        self._problem = task
        return task.messages()

    def step(self, action: str) -> StepResult:
        if self._problem is None:
            raise RuntimeError("call reset() before step()")
        parts, total, _ = self.reward_fn(action, self._problem.reference)
        return StepResult(observation=None, reward_parts=parts, reward=total, done=True)


@member("task", "arithmetic")
class ArithmeticConfig(TaskFamily):
    """``arithmetic``: single-turn ``a op b`` problems, ``op`` in ``ops``, operands of
    ``digits`` digits; generated SFT data, preference pairs and worked solutions."""

    SINGLE_TURN: ClassVar[bool] = True
    PAIRS: ClassVar[bool] = True
    ops: list[Op] = Field(default_factory=lambda: ["+"], min_length=1,
                          description="the operators of the problems: +, -, *")
    digits: int = Field(2, ge=1, le=9, description="digits of each operand, 1..9")

    def build(self, seed: int, models: Models) -> TaskParts:
        return TaskParts(ArithmeticTasks(tuple(self.ops), self.digits, seed, self.eval_fraction))
