"""Grading prompts in generated SFT data (``sft.gradings``)."""

from __future__ import annotations

import random

from posttrain.features.actor_as_grm.grading import grading_conversation


def grading_prompts(conversations: list[list[dict]], cfg) -> list[list[dict]]:
    """A share ``sft.gradings`` of ``conversations`` turned into grading prompts
    (``rl.actor_as_grm``'s form); all of them kept at share 0."""
    share = cfg.sft.gradings
    if not share:
        return conversations
    rng = random.Random(f"gradings:{cfg.seed}")
    return [grading_conversation(c, cfg.rl.actor_as_grm, rng) if rng.random() < share else c
            for c in conversations]
