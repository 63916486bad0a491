"""A Ray session leaves the process's environment as it found it: ``ray.init`` of a local
cluster sets ``RAY_AUTH_MODE=token`` and ``PYTHONBREAKPOINT`` (Ray's remote debugger) in it
and ``shutdown`` leaves them, so the user's ``breakpoint()`` and the processes they start
later would inherit them."""

import os

import pytest

from posttrain.cluster import ray_session
from posttrain.config import DistConfig

ray = pytest.importorskip("ray")
pytestmark = pytest.mark.ray


def test_a_session_restores_the_environment_it_found(monkeypatch):
    if ray.is_initialized():
        ray.shutdown()
    monkeypatch.delenv("RAY_AUTH_MODE", raising=False)
    before = dict(os.environ)
    with ray_session(DistConfig(backend="ray"), num_cpus=1):
        assert ray.is_initialized()
    assert not ray.is_initialized() and dict(os.environ) == before
