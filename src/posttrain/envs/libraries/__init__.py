"""Environments of other libraries played through posttrain's rollout: OpenEnv environments
as ``task.env`` (``openenv_adapter``), Harbor tasks in the sandbox (``harbor``), and the
libraries that own their tasks and loop, run in a Python of their own (``bridge``:
verifiers, NeMo-Gym)."""
