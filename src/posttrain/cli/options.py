"""What many commands take: a config file with ``dotted.key=value`` overrides, and a run's
output directory; the config loaded, or the command failed with its error."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from posttrain.cli.output import fail_on

Overrides = Annotated[list[str] | None, typer.Argument(help="dotted.key=value overrides")]
ConfigFile = Annotated[Path, typer.Argument(help="YAML config")]
Resume = Annotated[bool, typer.Option(help="continue the run in the output directory from its "
                                      "newest checkpoint")]
Overwrite = Annotated[bool, typer.Option(help="replace the run already in the output directory")]
OutDir = Annotated[str | None, typer.Option(help="output directory (the config's out_dir)")]


def load_or_fail(config: Path | None, overrides: list[str] | None, **forced):
    """The ``RunConfig`` of ``config`` with ``overrides`` and the ``forced`` keys (None: not
    forced), or a failed command."""
    from posttrain.config import ConfigError, load_config

    extra = [f"{k}={json.dumps(v)}" for k, v in forced.items() if v is not None]
    with fail_on(ConfigError):
        return load_config(config, list(overrides or []) + extra)
