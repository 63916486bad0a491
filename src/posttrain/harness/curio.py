"""CURIO on a conversation: a belief over the user's type, updated after every user turn,
and the potential-based intrinsic reward it earns (arXiv 2504.03206; docs/curio.md).

The environment says who the user may be: ``user_types`` (names), ``true_type`` (one of them)
and, for Bayes without a likelihood of the config's, ``likelihood(messages, reply, user_type)``
— the probability that a user of that type replies ``reply`` after ``messages``. For a
``task.env`` class the episode's instance is asked (``SteppedEpisode.env``)."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import torch

from posttrain.algos import get
from posttrain.algos.intrinsic import bayes_belief, discounted_sum
from posttrain.config.sections.features.curio import CURIO_PART, CurioConfig
from posttrain.harness.tools import ToolRegistry

Likelihood = Callable[[list[dict], str, str], float]
Classifier = Callable[[list[dict], list[str]], Sequence[float]]


class CurioEpisode:
    """``env`` (a ``ConversationEnv``) with CURIO: every user message ``reply`` returns updates
    the belief (Bayes with ``likelihood``, or ``classifier``'s probabilities; neither: the
    environment's own likelihood); ``verdict`` adds the part ``curio``, the discounted sum of
    the per-turn rewards; ``info()["curio"]`` records the types, the true one's index, every
    belief and every turn's reward."""

    def __init__(self, env: Any, cfg: CurioConfig, likelihood: Likelihood | None = None,
                 classifier: Classifier | None = None) -> None:
        self.env, self.cfg, self.classifier = env, cfg, classifier
        user = getattr(env, "env", env)  # the task.env instance a SteppedEpisode plays
        missing = [a for a in ("user_types", "true_type") if not hasattr(user, a)]
        if missing:
            raise TypeError(f"reward.curio needs an environment that names its user types; "
                            f"{type(user).__name__} lacks {', '.join(missing)}")
        self.types = [str(t) for t in user.user_types]
        if user.true_type not in self.types:
            raise ValueError(f"reward.curio: the true user type {user.true_type!r} is not one "
                             f"of user_types {self.types}")
        self.true = self.types.index(user.true_type)
        self.likelihood = likelihood or getattr(user, "likelihood", None)
        if classifier is None and self.likelihood is None:
            raise TypeError(f"reward.curio: {type(user).__name__} has no likelihood(messages, "
                            "reply, user_type); set reward.curio.likelihood or classifier")
        self.beliefs = [torch.full((len(self.types),), 1 / len(self.types), dtype=torch.float64)]
        self.messages: list[dict] = []

    @property
    def tools(self) -> ToolRegistry:
        return self.env.tools

    def opening(self) -> list[dict]:
        opening = self.env.opening()
        self.messages.extend(opening)
        return opening

    def reply(self, text: str) -> tuple[str | list[dict] | None, str | None]:
        self.messages.append({"role": "assistant", "content": text})
        reply, stop = self.env.reply(text)
        turns = [{"role": "user", "content": reply}] if isinstance(reply, str) else reply or []
        for turn in turns:
            if turn.get("role") == "user":
                self.beliefs.append(self._updated(turn["content"]))
            self.messages.append(turn)
        return reply, stop

    def _updated(self, reply: str) -> torch.Tensor:
        if self.classifier is not None:
            probs = torch.tensor([float(p) for p in self.classifier(
                [*self.messages, {"role": "user", "content": reply}], list(self.types))],
                dtype=torch.float64)
            if probs.shape != (len(self.types),) or not bool(torch.isfinite(probs).all()) \
                    or bool((probs < 0).any()) or float(probs.sum()) <= 0:
                raise ValueError(f"reward.curio.classifier returned {probs.tolist()}: it must "
                                 f"give a probability >= 0 to each of {len(self.types)} types")
            return probs / probs.sum()
        lik = torch.tensor([float(self.likelihood(list(self.messages), reply, t))
                            for t in self.types], dtype=torch.float64)
        return bayes_belief(self.beliefs[-1], lik)

    def turn_rewards(self) -> list[float]:
        """Each user turn's intrinsic reward (``curio`` of the catalogue)."""
        (rewards,) = get("reward", "curio")(
            beliefs=[torch.stack(self.beliefs)], true_types=[self.true], gamma=self.cfg.gamma,
            form=self.cfg.form, floor=self.cfg.floor)
        return rewards.tolist()

    def calls_text(self, text: str) -> None:
        self.env.calls_text(text)

    def stop_reason(self) -> str | None:
        return self.env.stop_reason()

    def verdict(self, final: str) -> dict[str, float]:
        return {**self.env.verdict(final),
                CURIO_PART: discounted_sum(self.turn_rewards(), self.cfg.gamma)}

    def info(self) -> dict:
        return {**self.env.info(), "curio": {
            "user_types": self.types, "true_type": self.true,
            "beliefs": [b.tolist() for b in self.beliefs], "rewards": self.turn_rewards(),
            "form": self.cfg.form, "gamma": self.cfg.gamma}}

    def close(self) -> None:
        self.env.close()


def final_log_belief(info: dict) -> float:
    """``log b_T(u*)`` of an episode's ``info()["curio"]``."""
    return math.log(max(info["beliefs"][-1][info["true_type"]], 1e-300))
