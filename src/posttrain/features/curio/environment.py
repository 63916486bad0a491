"""CURIO around the agent loop's per-episode environments."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from posttrain.config.extension import load_extension
from posttrain.harness.curio import CurioEpisode


def with_curio(make: Callable[..., Any] | None, cfg) -> Callable[..., Any] | None:
    """``make`` (an episode environment factory) with ``reward.curio``'s belief and intrinsic
    reward around every environment it makes (``harness.curio``); ``make`` itself without
    ``reward.curio``."""
    curio = cfg.reward.curio
    if make is None or curio is None:
        return make
    likelihood = None if curio.likelihood is None else \
        load_extension("curio_likelihood", curio.likelihood)
    classifier = None if curio.classifier is None else \
        load_extension("curio_classifier", curio.classifier)
    return lambda *args: CurioEpisode(make(*args), curio, likelihood, classifier)
