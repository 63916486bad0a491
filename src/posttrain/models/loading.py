"""Load any Hugging Face causal LM and its tokenizer from a local directory; save modules
of our own beside one."""

from __future__ import annotations

import json
import os
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file
from transformers import (
    AutoConfig,
    AutoModelForCausalLM,
    AutoModelForTokenClassification,
    AutoTokenizer,
    PreTrainedModel,
)
from transformers.utils import logging as hf_logging

from posttrain.models.architectures import attn_res  # noqa: F401  (registers the auto classes)
from posttrain.types import TeacherMismatchError

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


class ModelNotFoundError(FileNotFoundError):
    """The model directory is missing or holds no Hugging Face config."""


def _check_dir(path: str | Path) -> Path:
    p = Path(path)
    if not p.is_dir():
        raise ModelNotFoundError(
            f"model directory {str(p)!r} does not exist; pass a local Hugging Face model "
            "directory, or build a tiny one with `posttrain build-tiny DIR`"
        )
    if not (p / "config.json").is_file():
        raise ModelNotFoundError(f"{str(p)!r} has no config.json: not a Hugging Face model dir")
    return p


def load_tokenizer(path: str | Path):
    """The tokenizer at ``path``; a pad token falls back to eos when the model has none. It
    keeps the ids that end a reply (``stop_tokens``): its eos and those of the model's
    ``generation_config.json`` (an instruct model's end of turn, such as Gemma's
    ``<end_of_turn>`` or Llama 3's ``<|eot_id|>``)."""
    directory = _check_dir(path)
    tok = AutoTokenizer.from_pretrained(directory)
    if tok.pad_token_id is None:
        tok.pad_token = tok.eos_token
    generation = directory / "generation_config.json"
    listed = json.loads(generation.read_text()).get("eos_token_id") \
        if generation.is_file() else None
    listed = listed if isinstance(listed, list) else [listed]
    tok.stop_token_ids = tuple(dict.fromkeys(
        i for i in (tok.eos_token_id, *listed) if isinstance(i, int)))
    return tok


def _dtype(dtype: str) -> torch.dtype:
    if dtype not in DTYPES:
        raise ValueError(f"unknown dtype {dtype!r}; known: {', '.join(DTYPES)}")
    hf_logging.disable_progress_bar()
    return DTYPES[dtype]


def load_model(path: str | Path, dtype: str = "float32") -> PreTrainedModel:
    """The causal LM at ``path`` in ``dtype`` (``float32``, ``bfloat16`` or ``float16``)."""
    model = AutoModelForCausalLM.from_pretrained(_check_dir(path), dtype=_dtype(dtype))
    model.config.use_cache = False
    return model


def load_value_model(path: str | Path, dtype: str = "float32") -> PreTrainedModel:
    """A value (or reward) model: the backbone at ``path`` (a causal LM's, or a saved critic's)
    with a one-output token head (``AutoModelForTokenClassification``, ``num_labels=1``); a
    causal LM's head is dropped and the value head starts fresh. No dropout before the head
    (HF's default is 0.1): a value or a reward is a function of the weights, in training too."""
    torch_dtype, verbosity = _dtype(dtype), hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()  # the fresh head is expected, not worth a warning
    try:
        config = AutoConfig.from_pretrained(_check_dir(path), num_labels=1)
        config.classifier_dropout = 0.0
        model = AutoModelForTokenClassification.from_pretrained(
            _check_dir(path), config=config, dtype=torch_dtype)
    finally:
        hf_logging.set_verbosity(verbosity)
    model.config.use_cache = False
    return model


def save_model(model: PreTrainedModel, tokenizer, out_dir: str | Path) -> None:
    """Write a ``from_pretrained``-loadable directory (safetensors weights)."""
    hf_logging.disable_progress_bar()
    model.save_pretrained(out_dir, safe_serialization=True)
    tokenizer.save_pretrained(out_dir)


def check_same_vocabulary(student_tokenizer, teacher_tokenizer,
                          what: str = "token-level distillation") -> None:
    """``what`` compares distributions (or token ids) over one vocabulary."""
    if student_tokenizer.get_vocab() != teacher_tokenizer.get_vocab():
        raise TeacherMismatchError(f"the tokenizers differ: {what} needs the policy's "
                                   "vocabulary")


def save_beside(directory: str | Path, weights: str, tensors: dict[str, torch.Tensor],
                settings: str, values: dict) -> None:
    """``tensors`` to ``directory/weights`` (safetensors) and ``values`` to
    ``directory/settings`` (JSON), each written to a temporary file, then renamed."""
    directory = Path(directory)
    save_file({k: v.detach().contiguous() for k, v in tensors.items()},
              directory / f"{weights}.tmp")
    (directory / f"{settings}.tmp").write_text(json.dumps(values, indent=1))
    for name in (weights, settings):
        os.replace(directory / f"{name}.tmp", directory / name)


def load_beside(directory: str | Path, weights: str, settings: str, missing: str
                ) -> tuple[dict[str, torch.Tensor], dict]:
    """What ``save_beside`` wrote; a missing file raises ``FileNotFoundError`` naming it,
    then ``missing``."""
    directory = Path(directory)
    for name in (weights, settings):
        if not (directory / name).is_file():
            raise FileNotFoundError(f"{directory / name} is missing: {missing}")
    return load_file(directory / weights), json.loads((directory / settings).read_text())
