"""Rollout engines behind the ``Engine`` protocol (generate, update weights, report their
checksum, score sequences): ``TorchEngine`` and its decoders, ``VLLMEngine`` and
``SGLangEngine`` (optional, imported lazily; docs/engines.md), each with its family member
(``*_member.py``: ``engine.name``), counter-based sampling, ``weights_checksum``; chat as a
function for judges and simulated users."""

import lazy_loader

__getattr__, __dir__, __all__ = lazy_loader.attach_stub(__name__, __file__)
