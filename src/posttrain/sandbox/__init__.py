"""Run untrusted Python or shell in a jail (``Sandbox``): its own workspace, no network,
rlimits, in user namespaces where the kernel allows them (``jail`` is the jailed side). Uses
the standard library only."""

from posttrain.sandbox.runner import (
    Sandbox,
    SandboxError,
    SandboxLimits,
    SandboxResult,
    namespaces_available,
)

__all__ = ["Sandbox", "SandboxError", "SandboxLimits", "SandboxResult", "namespaces_available"]
