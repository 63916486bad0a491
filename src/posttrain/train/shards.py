"""Sharded checkpoints (``trainer.checkpoint_format: sharded``) through
``torch.distributed.checkpoint`` (DCP).

Every process writes the part of the weights and optimiser state it holds (FSDP2: its shards;
one process: everything), so nothing is gathered whole; a checkpoint's global shapes are in
its metadata, and DCP re-slices them on load, so it resumes on any process count (one process
included, without a process group). The checkpoint's ``shards/`` hold ``policy.model``,
``policy.optim`` and, with a critic, ``critic.model`` and ``critic.optim``, keyed by the Hugging
Face parameter names; ``whole_model`` turns them back into a ``from_pretrained`` model.
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Iterator
from pathlib import Path

import torch

SHARDS = "shards"


class CheckpointMismatchError(ValueError):
    """A checkpoint's tensors do not fit the model (or optimiser) being resumed."""


def held_state(trainer) -> dict:
    """The trainer's model and optimiser state as this process holds it (sharded tensors as
    DTensors), to be saved or loaded in place."""
    from torch.distributed.checkpoint.state_dict import get_state_dict

    model, optim = get_state_dict(trainer.model, trainer.optimizer)
    return {"model": model, "optim": optim}


def set_held_state(trainer, state: dict) -> None:
    """Put ``held_state``'s (filled by a load) into the trainer's model and optimiser."""
    from torch.distributed.checkpoint.state_dict import set_state_dict

    set_state_dict(trainer.model, trainer.optimizer, model_state_dict=state["model"],
                   optim_state_dict=state["optim"])


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    """Without DCP's warning that one process without a group is 'assumed' (it is meant)."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="torch.distributed is disabled")
        yield


def is_sharded(checkpoint: Path) -> bool:
    return (Path(checkpoint) / SHARDS).is_dir()


def save_shards(directory: Path, policy, critic=None) -> None:
    """Every process of the trainers' group calls it; ``policy`` is a ``PolicyTrainer``
    (``apply`` runs where it lives), ``critic`` a ``Trainer``."""
    import torch.distributed.checkpoint as dcp

    parts = {"policy": policy.apply(held_state)}
    if critic is not None:
        parts["critic"] = held_state(critic)
    with _quiet():
        dcp.save(parts, checkpoint_id=Path(directory) / SHARDS)


def load_shards(checkpoint: Path, policy, critic=None) -> None:
    """Load ``save_shards``' into trainers built like the ones that wrote it (any process
    count); a tensor the model lacks or of another shape raises ``CheckpointMismatchError``."""
    parts = {"policy": policy.apply(held_state)}
    if critic is not None:
        parts["critic"] = held_state(critic)
    _load(parts, Path(checkpoint))
    policy.apply(set_held_state, parts["policy"])
    if critic is not None:
        set_held_state(critic, parts["critic"])


def _load(parts: dict, checkpoint: Path) -> None:
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.api import CheckpointException

    try:
        with _quiet():
            dcp.load(parts, checkpoint_id=checkpoint / SHARDS)
    except (Exception, CheckpointException) as exc:  # (a BaseException: ranks' tracebacks)
        reason = str(exc).strip().splitlines()[-1] if str(exc).strip() else repr(exc)
        raise CheckpointMismatchError(
            f"checkpoint {str(checkpoint)!r} does not fit this run ({reason}): resume with the "
            "model.preset / model.path / model.architecture, critic.enabled and trainer.lora "
            "of the run that wrote it") from exc


def whole_model(checkpoint: Path) -> torch.nn.Module:
    """The policy of a sharded checkpoint as a plain fp32 model with whole weights (in this
    process, no process group): built from the checkpoint's ``config.json``, then filled from
    its shards."""
    from transformers import AutoConfig, AutoModelForCausalLM

    model = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(checkpoint),
                                             torch_dtype=torch.float32)
    state = {"model": model.state_dict()}
    _load({"policy": state}, Path(checkpoint))
    model.load_state_dict(state["model"])
    return model.eval()
