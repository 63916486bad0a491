"""The engine options of commands that sample a model without a run config (``serve``,
``eval --mode tau``): ``--engine`` and ``--device``, validated as ``engine.name`` and
``engine.device`` are, and the engine they build."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from posttrain.cli.output import fail


def engine_name_option(panel: str | None = None) -> Any:
    """The type of ``--engine``, listed under the help panel ``panel``."""
    return Annotated[str, typer.Option(
        "--engine", help="rollout engine: torch | vllm | sglang, or a dotted path "
                         "(engine.name; docs/engines.md)", rich_help_panel=panel)]


def engine_device_option(panel: str | None = None) -> Any:
    """The type of ``--device``, listed under the help panel ``panel``."""
    return Annotated[str | None, typer.Option(
        "--device", help="where the torch engine runs: auto | cpu | cuda | cuda:N "
                         "(engine.device; default auto)", rich_help_panel=panel)]


EngineName, EngineDevice = engine_name_option(), engine_device_option()


def engine_from_options(name: str, device: str | None, model: Path, dtype: str,
                        tokenizer: Any) -> Any:
    """The engine ``--engine name --device device`` describe, holding ``model``, or a failed
    command saying why not."""
    from pydantic import ValidationError

    from posttrain.config.family import member_of
    from posttrain.engines import EngineUnavailableError
    from posttrain.models import ModelNotFoundError

    given = {} if device is None else {"device": device}
    try:
        section = member_of("engine", name).model_validate({"name": name, **given})
        return section.build(model, dtype, tokenizer.pad_token_id, tokenizer.eos_token_id)
    except ValidationError as e:
        fail("; ".join(f"--{err['loc'][0] if err['loc'] else 'engine'}: "
                       f"{err['msg'].removeprefix('Value error, ')}" for err in e.errors()))
    except (ValueError, ModelNotFoundError, EngineUnavailableError) as e:
        fail(f"--engine {name}: {e}")


def context_window(model: Path) -> int | None:
    """The positions ``model``'s config says it holds (None: it does not say)."""
    from transformers import AutoConfig

    return getattr(AutoConfig.from_pretrained(model), "max_position_embeddings", None)
