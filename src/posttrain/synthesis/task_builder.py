"""The task builder as a policy (``task.name: task_builder``; DeepSeek V4.1 rewards its builder
with the correctness and the difficulty of what it builds; Absolute Zero's proposer reward).

A builder episode answers a prompt showing a few arithmetic problems with a new one:
``<problem>What is 47+38?</problem>`` then its worked answer ``<answer>85</answer>``. Two
reward parts (verifier ``env``) score it:

- ``valid``: 1 when the problem parses, is not one of the examples shown, and its answer is
  right: by ``checker`` (``arithmetic``: the problem computed; or ``fn(problem, answer) ->
  bool`` by dotted path), or, with ``checker: null``, when some solver sample reproduces the
  answer (pass@k > 0, the rule DeepSeek V3.2 keeps synthesised tasks by);
- ``difficulty``: ``1 - p`` for a valid problem whose solver pass rate ``p`` over
  ``solver_samples`` samples lies strictly between 0 and 1, else 0 (the learnability
  reward: a problem every solver solves teaches nothing, one no solver solves may be broken).

The solver is the policy itself, sampled on the rollout engine with the step's weights
(self-play; only the builder's turns are trained), or a fixed model (``solver``: its
directory). ``meta["built"]`` records the problem, answer, verdict and pass rate of every
episode.
"""

from __future__ import annotations

import hashlib
import random
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from pydantic import Field, field_validator

from posttrain.config.extension import is_path, load_extension
from posttrain.config.family import member
from posttrain.config.sections.task import Models, TaskFamily, TaskParts
from posttrain.envs.arithmetic import ArithmeticTasks, Op, Problem
from posttrain.models import encode_prompt, stop_tokens
from posttrain.rewards.registry import VERIFIERS
from posttrain.types import Episode, SamplingParams

PARTS = ("valid", "difficulty")
PROMPT = ("Write a new arithmetic problem for a student, not one of these:\n{examples}\n"
          "Reply with <problem>the question</problem>, then its worked answer.")
BUILT = re.compile(r"<problem>(.*?)</problem>(.*)", re.S)
QUESTION = re.compile(r"What is (\d+) *([+*-]) *(\d+)\?")


@dataclass(frozen=True)
class BuildPrompt:
    """A builder task: ``examples`` shown (the problems it must not copy)."""

    examples: tuple[Problem, ...]
    reference: str = ""

    def messages(self) -> list[dict]:
        shown = "\n".join(p.question for p in self.examples)
        return [{"role": "user", "content": PROMPT.format(examples=shown)}]


def parse_built(completion: str) -> tuple[str, str] | None:
    """``(problem, the rest)`` of a builder's completion; None when it wrote no problem."""
    m = BUILT.search(completion)
    return None if m is None or not m.group(1).strip() else (m.group(1).strip(), m.group(2))


def arithmetic_answer(problem: str) -> int | None:
    """The value of ``What is A op B?`` (None: not such a question)."""
    m = QUESTION.fullmatch(problem)
    if m is None:
        return None
    a, op, b = int(m.group(1)), m.group(2), int(m.group(3))
    return Problem(a, op, b).answer


def same_problem(problem: str, examples: Sequence[Problem]) -> bool:
    """Whether ``problem`` restates one of ``examples`` (its numbers and operator, however
    written: ``What is 7 + 38?`` is ``What is 07+38?``)."""
    m = QUESTION.fullmatch(problem)
    if m is None:
        return " ".join(problem.split()) in {p.question for p in examples}
    return (int(m.group(1)), m.group(2), int(m.group(3))) in {(p.a, p.op, p.b) for p in examples}


def check_arithmetic(problem: str, answer: str) -> bool:
    """``answer`` (its ``<answer>``) is the value of the arithmetic question ``problem``."""
    value = arithmetic_answer(problem)
    return value is not None and VERIFIERS["numeric"](answer, str(value)) == 1.0


def learnability(valid: bool, pass_rate: float) -> float:
    """``1 - p`` for a valid problem with ``0 < p < 1``, else 0 (the module's docstring)."""
    return 1.0 - pass_rate if valid and 0.0 < pass_rate < 1.0 else 0.0


@dataclass(frozen=True)
class SolverTask:
    """A built problem, put to the solver as a user turn."""

    problem: str
    reference: str

    def messages(self) -> list[dict]:
        return [{"role": "user", "content": self.problem}]


class BuiltScorer:
    """``TaskParts.env_score`` of builder episodes (the module's docstring): ``check`` (None:
    the solvers decide), ``solver_samples`` a problem at ``solver_temperature``, each of at
    most ``solver_tokens`` tokens, by ``solver`` (an ``(engine, tokenizer)``; None: the
    rollout's engine)."""

    def __init__(self, check: Callable[[str, str], bool] | None, solver_samples: int,
                 solver_temperature: float, solver_tokens: int,
                 solver: tuple | None = None) -> None:
        self.check, self.k, self.solver = check, solver_samples, solver
        self.temperature, self.tokens = solver_temperature, solver_tokens

    def verdict(self, task: BuildPrompt, completion: str) -> tuple[SolverTask | None, str]:
        """The problem to solve (None: invalid already) and why it is not valid, if it is not."""
        built = parse_built(completion)
        if built is None:
            return None, "no <problem>"
        problem, worked = built
        if same_problem(problem, task.examples):
            return None, "copied an example"
        answer = re.search(r"<answer>(.*?)</answer>", worked, re.S)
        if answer is None:
            return None, "no <answer>"
        if self.check is not None and not self.check(problem, worked):
            return None, "wrong answer"
        return SolverTask(problem, answer.group(1).strip()), ""

    def __call__(self, engine, tokenizer, tasks: Sequence[BuildPrompt],
                 completions: Sequence[str], sampling: SamplingParams
                 ) -> list[tuple[dict, dict]]:
        verdicts = [self.verdict(t, c) for t, c in zip(tasks, completions)]
        solvable = [s for s, _ in verdicts if s is not None]
        rates = dict(zip(solvable, self.pass_rates(*(self.solver or (engine, tokenizer)),
                                                   solvable, sampling)))
        out = []
        for solver_task, reason in verdicts:
            rate = rates.get(solver_task, 0.0) if solver_task else 0.0
            if solver_task is not None and self.check is None and rate == 0.0:
                reason = "no solver reproduced the answer"
            valid = not reason
            built = {"problem": solver_task.problem if solver_task else None,
                     "answer": solver_task.reference if solver_task else None,
                     "valid": valid, "reason": reason or None,
                     "pass_rate": rate if solver_task else None}
            out.append(({"valid": float(valid), "difficulty": learnability(valid, rate)},
                        {"built": built}))
        return out

    def pass_rates(self, engine, tokenizer, tasks: list[SolverTask],
                   sampling: SamplingParams) -> list[float]:
        """Each task's share of ``k`` solver samples whose answer is its reference."""
        if not tasks:
            return []
        seed = int.from_bytes(hashlib.sha256(f"solve:{sampling.seed}".encode()).digest()[:4],
                              "big")
        solving = SamplingParams(max_new_tokens=self.tokens, temperature=self.temperature,
                                 stop_token_ids=stop_tokens(tokenizer), seed=seed)
        prompts = [encode_prompt(tokenizer, t.messages()) for t in tasks for _ in range(self.k)]
        outs = engine.generate(prompts, solving)
        right = [VERIFIERS["numeric"](tokenizer.decode(o.token_ids, skip_special_tokens=True),
                                      tasks[j // self.k].reference) == 1.0
                 for j, o in enumerate(outs)]
        return [sum(right[i * self.k:(i + 1) * self.k]) / self.k for i in range(len(tasks))]


def built_rows(episodes: Iterable[Episode]) -> tuple[list[dict], dict[str, int]]:
    """The learnable problems of builder episodes (a run's ``episodes.jsonl``):
    each valid problem with a pass rate strictly between 0 and 1, once (its first episode's
    figures), as a prompt row ``{"prompt", "answer", "pass_rate"}`` (``task.name: dataset``'s
    default columns); and how many episodes each reason left out."""
    rows: dict[str, dict] = {}
    left: dict[str, int] = {}
    for e in episodes:
        built = e.meta.get("built")
        why = ("not a builder episode" if built is None else built["reason"]
               or ("solved by every solver sample" if built["pass_rate"] == 1.0 else None)
               or ("solved by no solver sample" if built["pass_rate"] == 0.0 else None)
               or ("a repeat" if built["problem"] in rows else None))
        if why:
            left[why] = left.get(why, 0) + 1
        else:
            rows[built["problem"]] = {"prompt": built["problem"], "answer": built["answer"],
                                      "pass_rate": built["pass_rate"]}
    return list(rows.values()), left


class BuilderTasks:
    """Builder prompts, each showing ``examples`` problems of ``problems``' train (or eval)
    split; SFT conversations write a fresh problem and its worked answer (half the time a
    solver's conversation instead, so one policy learns both roles)."""

    def __init__(self, problems: ArithmeticTasks, examples: int) -> None:
        self.problems, self.examples = problems, examples

    def sample(self, n: int, rng: random.Random, split: str = "train") -> list[BuildPrompt]:
        return [BuildPrompt(tuple(self.problems.sample(self.examples, rng, split)))
                for _ in range(n)]

    def eval_set(self, n: int) -> list[BuildPrompt]:
        return self.sample(n, random.Random(f"build-eval:{self.problems.seed}"), "eval")

    def sft_conversation(self, task: BuildPrompt, error_rate: float,
                         rng: random.Random) -> list[dict]:
        """A builder's conversation (its answer flawed with probability ``error_rate``), or
        with probability 1/2 a solver's on a fresh problem."""
        fresh = self.problems.sample(1, rng)[0]
        if rng.random() < 0.5:
            return self.problems.sft_conversation(fresh, error_rate, rng)
        reply = f"<problem>{fresh.question}</problem>{fresh.completion(rng.random() < error_rate)}"
        return task.messages() + [{"role": "assistant", "content": reply}]


@member("task", "task_builder")
class TaskBuilderConfig(TaskFamily):
    """``task_builder``: the policy builds arithmetic problems (``ops``, ``digits`` as
    ``arithmetic``'s, ``examples`` shown a prompt), rewarded by parts ``valid`` and
    ``difficulty`` (verifier ``env``) against ``checker`` and ``solver_samples`` samples of
    itself as the solver, or of the model at ``solver`` (``synthesis.task_builder``;
    docs/synthesis.md)."""

    SINGLE_TURN: ClassVar[bool] = True
    SCORED_PARTS: ClassVar[tuple[str, ...]] = PARTS
    ops: list[Op] = Field(default_factory=lambda: ["+"], min_length=1,
                          description="the operators of the problems: +, -, *")
    digits: int = Field(2, ge=1, le=9, description="digits of each operand, 1..9")
    examples: int = Field(3, ge=1, description="example problems shown in each prompt")
    checker: str | None = Field(
        "arithmetic",
        description="checks a built answer: arithmetic, fn(problem, answer) -> bool by dotted "
                    "path, or null")
    solver_samples: int = Field(
        8, ge=2,
        description="solver samples of each valid problem; its difficulty is 1 - their pass rate")
    solver_temperature: float = Field(
        1.0, gt=0, description="sampling temperature of the solver samples (> 0)")
    solver_max_new_tokens: int = Field(32, ge=1, description="most tokens of a solver sample")
    solver: str | None = Field(
        None, description="a fixed solver's model directory (null: the policy itself)")

    @field_validator("checker")
    @classmethod
    def _checker(cls, v: str | None) -> str | None:
        if v is not None and v != "arithmetic":
            if not is_path(v):
                raise ValueError(f"{v!r}: arithmetic, null or a dotted path "
                                 "(fn(problem, answer) -> bool)")
            load_extension("built_task_check", v)
        return v

    @field_validator("solver")
    @classmethod
    def _solver_dir(cls, v: str | None) -> str | None:
        if v is not None and not (Path(v) / "config.json").is_file():
            raise ValueError(f"{v!r} is not a model directory (no config.json)")
        return v

    def build(self, seed: int, models: Models) -> TaskParts:
        from posttrain.engines.torch_member import TorchEngineConfig  # another family's

        problems = ArithmeticTasks(tuple(self.ops), self.digits, seed, self.eval_fraction)
        check = check_arithmetic if self.checker == "arithmetic" else (
            None if self.checker is None else load_extension("built_task_check", self.checker))
        solver = None if self.solver is None else \
            TorchEngineConfig(device="cpu").load(Path(self.solver))
        return TaskParts(BuilderTasks(problems, self.examples), env_score=BuiltScorer(
            check, self.solver_samples, self.solver_temperature, self.solver_max_new_tokens,
            solver))

    def check(self, cfg) -> None:
        """Episodes are scored with solver samples on the engine between steps: not async."""
        super().check(cfg)
        if "rl" in cfg.stages and cfg.rl.mode == "async":
            raise ValueError("task.name=task_builder scores its episodes with solver samples "
                             "on the engine between steps: rl.mode=sync")
        for what, on in (("task.rollout", self.rollout is not None),
                         ("agent.tools", bool(cfg.agent.tools)),
                         ((f"algo.adv_estimator={cfg.algo.adv_estimator} (its greedy "
                           "baseline is scored without the solvers)"),
                          cfg.algo.estimator().takes("baseline_rewards")),
                         ("the opd stage", "opd" in cfg.stages)):
            if on:
                raise ValueError(f"task.name=task_builder: its episodes are scored by its own "
                                 f"checker and solvers, which {what} would bypass")
