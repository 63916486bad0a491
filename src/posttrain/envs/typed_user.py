"""A user of one of a few types to find out before answering (the CURIO task family,
``typed_user``; docs/curio.md). The user wants a snack fitted to their taste (``sweet``,
``salty`` or ``sour``) and will answer up to ``max_questions`` questions "Do you like X?"
with yes or no before the assistant answers ``<answer>taste</answer>``.

Each user (a task) is a taste and a fixed yes/no answer for every food, drawn with the
taste's probability of liking it (``FOODS``), so the same user gives the same answer twice.
Some foods tell the tastes apart (fruit, chips, lemon), others do not (bread, water): an
assistant that asks the telling ones ends sure of the taste, one that asks the others guesses.
The environment's ``likelihood`` is that generative model, so a Bayes belief over the types
(``reward.curio``) is exact. SFT conversations ask random distinct foods and answer the most
probable taste given the replies."""

from __future__ import annotations

import random
import re
from dataclasses import dataclass
from typing import ClassVar

from pydantic import Field

from posttrain.config.family import member
from posttrain.config.sections.task import Models, TaskFamily, TaskParts
from posttrain.envs.base import SplitTasks, answer_turn
from posttrain.harness import ToolRegistry

TASTES = ("sweet", "salty", "sour")
FOODS = {  # P(yes to "Do you like <food>?" | taste), in TASTES' order
    "fruit": (0.9, 0.1, 0.5),
    "chips": (0.1, 0.9, 0.5),
    "lemon": (0.2, 0.2, 0.9),
    "bread": (0.5, 0.5, 0.5),
    "water": (0.5, 0.5, 0.5),
}
QUESTION = re.compile(r"like (\w+)\?")
ANSWER = re.compile(r"<answer>\s*(\w+)\s*</answer>")
ASK_AGAIN = "Ask whether I like a food, or answer."
NO_MORE = "No more questions, please answer."


@dataclass(frozen=True)
class TypedUser:
    """A task: the user's ``taste`` and yes/no ``answers`` for every food (``FOODS``' order);
    ``reference`` encodes both (``sweet 10110``)."""

    taste: str
    answers: tuple[bool, ...]
    max_questions: int

    @property
    def reference(self) -> str:
        return f"{self.taste} {''.join('1' if a else '0' for a in self.answers)}"

    @property
    def domain(self) -> str:
        return "typed_user"

    def messages(self) -> list[dict]:
        return [{"role": "user", "content": f"Recommend a snack for my taste. You may ask up "
                                            f"to {self.max_questions} questions first."}]

    def likes(self, food: str) -> bool:
        return self.answers[list(FOODS).index(food)]


def draw_user(rng: random.Random, max_questions: int) -> TypedUser:
    taste = rng.randrange(len(TASTES))
    return TypedUser(TASTES[taste], tuple(rng.random() < p[taste] for p in FOODS.values()),
                     max_questions)


def asked_food(text: str) -> str | None:
    """The food of a question "Do you like X?" in ``text``, if it is one of ``FOODS``."""
    match = QUESTION.search(text)
    return match.group(1) if match and match.group(1) in FOODS else None


def posterior(replies: list[tuple[str, bool]]) -> list[float]:
    """``P(taste | replies)`` from a uniform prior, each distinct food counted once."""
    weights = [1.0] * len(TASTES)
    for food in dict(replies):
        liked = dict(replies)[food]
        weights = [w * (p if liked else 1 - p) for w, p in zip(weights, FOODS[food])]
    return [w / sum(weights) for w in weights]


class TypedUserEpisode:
    """One conversation with ``user`` (a ``ConversationEnv`` of the agent loop, with the
    ``user_types``, ``true_type`` and ``likelihood`` CURIO reads). The part ``correct`` is 1
    for an answer naming the user's taste."""

    user_types = TASTES

    def __init__(self, user: TypedUser) -> None:
        self.user, self.asked, self.answer = user, 0, None
        self.tools = ToolRegistry()

    @property
    def true_type(self) -> str:
        return self.user.taste

    def opening(self) -> list[dict]:
        return []

    def reply(self, text: str) -> tuple[str | None, str | None]:
        answer = ANSWER.search(text)
        if answer:
            self.answer = answer.group(1)
            return None, "answer"
        food = asked_food(text)
        if food is None:
            return ASK_AGAIN, None
        if self.asked >= self.user.max_questions:
            return NO_MORE, None
        self.asked += 1
        return ("yes" if self.user.likes(food) else "no"), None

    @staticmethod
    def likelihood(messages: list[dict], reply: str, user_type: str) -> float:
        """``P(reply | messages, user_type)``: a first yes/no to a food is the taste's
        probability of liking it; anything else (a repeated food, a prompt to ask or answer)
        is as likely under every taste."""
        said = [m["content"] for m in messages if m["role"] == "assistant"]
        food = asked_food(said[-1]) if said else None
        if food is None or reply not in ("yes", "no") \
                or any(asked_food(s) == food for s in said[:-1]):
            return 1.0
        p = FOODS[food][TASTES.index(user_type)]
        return p if reply == "yes" else 1 - p

    def calls_text(self, text: str) -> None:
        pass

    def stop_reason(self) -> str | None:
        return None

    def verdict(self, final: str) -> dict[str, float]:
        return {"correct": float(self.answer == self.user.taste)}

    def info(self) -> dict:
        return {"taste": self.user.taste, "questions": self.asked, "answer": self.answer}

    def close(self) -> None:
        pass


class TypedUserTasks(SplitTasks):
    """``n_problems`` users (the last ``eval_fraction`` held out)."""

    def __init__(self, seed: int = 0, eval_fraction: float = 0.1, max_questions: int = 2,
                 n_problems: int = 2000) -> None:
        rng = random.Random(f"typed_user:{seed}")
        users = [draw_user(rng, max_questions) for _ in range(n_problems)]
        n_eval = self.held_out(n_problems, eval_fraction)
        self.splits = {"train": users[:-n_eval], "eval": users[-n_eval:]}
        self.by_reference = {u.reference: u for u in users}
        self.max_questions = max_questions

    def make_env(self, reference: str) -> TypedUserEpisode:
        return TypedUserEpisode(self.by_reference[reference])

    def sft_conversation(self, user: TypedUser, error_rate: float,
                         rng: random.Random) -> list[dict]:
        """Questions on ``max_questions`` random distinct foods, then the most probable taste
        (a random one with probability ``error_rate``)."""
        foods = rng.sample(list(FOODS), self.max_questions)
        turns, replies = [], []
        for food in foods:
            liked = user.likes(food)
            replies.append((food, liked))
            turns += [{"role": "assistant", "content": f"Do you like {food}?"},
                      {"role": "user", "content": "yes" if liked else "no"}]
        belief = posterior(replies)
        taste = rng.choice(TASTES) if rng.random() < error_rate \
            else TASTES[belief.index(max(belief))]
        return [*user.messages(), *turns, answer_turn(taste)]


@member("task", "typed_user")
class TypedUserConfig(TaskFamily):
    """``typed_user``: find out the user's taste (one of three types) with at most
    ``max_questions`` yes/no questions, then recommend for it; scored by its environment
    (part ``correct``), with the user types CURIO needs (``reward.curio``)."""

    SCORED_PARTS: ClassVar[tuple[str, ...]] = ("correct",)
    max_questions: int = Field(2, ge=1, le=len(FOODS),
                               description="most yes/no questions before the recommendation")

    def build(self, seed: int, models: Models) -> TaskParts:
        tasks = TypedUserTasks(seed, self.eval_fraction, self.max_questions)
        return TaskParts(tasks, ToolRegistry(), tasks.make_env)
