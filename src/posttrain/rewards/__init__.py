"""Verifiers (each a family member, ``@member("verifier", name)``) and reward composition
(reward = dict of named parts), user reward functions in a killable worker, judge prompts and
reply parsing."""

import lazy_loader

__getattr__, __dir__, __all__ = lazy_loader.attach_stub(__name__, __file__)
