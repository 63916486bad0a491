"""Confessions in generated SFT data (``sft.confessions``): the form, not its honesty."""

from __future__ import annotations

from collections.abc import Callable


def confession_turns(cfg) -> Callable | None:
    """``then(task, conversation, rng)`` for a share ``sft.confessions`` of generated
    conversations: the confession prompt and a verdict drawn at random; None at share 0."""
    share = cfg.sft.confessions
    if not share:
        return None
    prompt = cfg.reward.confession.prompt

    def then(task, conversation: list[dict], rng) -> list[dict]:
        if rng.random() >= share:
            return []
        verdict = rng.choice(("correct", "wrong"))
        return [{"role": "system", "content": prompt},
                {"role": "assistant", "content": f"My answer is {verdict}."}]

    return then
