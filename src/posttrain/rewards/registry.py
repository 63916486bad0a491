"""Every verifier by the name a reward part's config uses: the functions decorated
``@member("verifier", name)`` (the quickstart's short names, the rule verifiers,
math-verify's and reasoning-gym's), from the families index."""

from __future__ import annotations

from posttrain.config.family import member_of, names
from posttrain.rewards.verifiers import Verifier

VERIFIERS: dict[str, Verifier] = {name: member_of("verifier", name) for name in names("verifier")}
# those that may leave a part missing (None: a reference they cannot read)
FALLIBLE_VERIFIERS = tuple(n for n, fn in VERIFIERS.items() if getattr(fn, "fallible", False))
