"""CURIO (``reward.curio``): curiosity about the user as a per-turn intrinsic reward
(Wan et al. 2025, arXiv 2504.03206; docs/curio.md)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, model_validator

from posttrain.config.extension import extension
from posttrain.config.section import Section

CURIO_PART = "curio"  # the reward part (verifier env) that carries the intrinsic reward


class CurioConfig(Section):
    """A belief over the environment's user types, ``b_0`` uniform, is updated after every
    user turn: by Bayes with ``likelihood`` (``f(messages, reply, user_type) -> P``; null: the
    environment's own ``likelihood``), or read off ``classifier`` (``f(messages, user_types) ->
    probabilities``). Each turn earns ``gamma phi(b_{t+1}) - phi(b_t)`` in the form ``form``
    (``log``: ``phi = log b(u*)``, floored at ``floor``; ``linear``: ``b(u*)``; ``entropy``:
    ``-H(b)``); the reward part ``curio`` (verifier ``env``; its weight is alpha_int) takes
    their discounted sum."""

    form: Literal["linear", "log", "entropy"] = Field(
        "log",
        description="the potential phi of the belief: log b(u*), linear b(u*), or entropy -H(b)")
    gamma: float = Field(
        1.0, gt=0, le=1,
        description="discount of the potential difference gamma phi(b_t+1) - phi(b_t), in (0, 1]")
    floor: float = Field(1e-6, gt=0, lt=1,
                         description="the floor of b(u*) under the log form, in (0, 1)")
    likelihood: Annotated[str, extension("curio_likelihood")] | None = Field(
        None,
        description="f(messages, reply, user_type) -> P by dotted path, for Bayes' update (null: "
                    "the environment's)")
    classifier: Annotated[str, extension("curio_classifier")] | None = Field(
        None,
        description="f(messages, user_types) -> probabilities by dotted path: the belief read off "
                    "it")

    @model_validator(mode="after")
    def _one_belief(self) -> CurioConfig:
        if self.likelihood is not None and self.classifier is not None:
            raise ValueError("reward.curio: the belief comes from a likelihood (Bayes) or a "
                             "classifier: set one of them")
        return self
