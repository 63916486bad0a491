"""What many commands take: a config file with ``dotted.key=value`` overrides, and a run's
output directory; the config loaded, or the command failed with its error; and the old
spellings a command keeps (``alias``)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Annotated

import typer

from posttrain.cli.output import console, fail, fail_on

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


def unused_file(out: Path, overwrite: bool, what: str) -> None:
    """Fail unless ``out`` may receive ``what``: a new or empty file (a 0-byte one a failed
    write left holds nothing), or any file with ``overwrite``; never a directory."""
    if out.is_dir():
        fail(f"{out} is a directory: give {what} a file path")
    if out.is_file() and out.stat().st_size and not overwrite:
        fail(f"{out} is not empty: --overwrite replaces it, or give {what} a new path")


def said(old: str, new: str) -> None:
    """One line on stderr: what was ``posttrain old`` is ``posttrain new`` now."""
    console.print(f"note: posttrain {old} is now posttrain {new}", markup=False, highlight=False,
                  soft_wrap=True)


def alias(group: typer.Typer, name: str, runs: list[str], old: str, new: str,
          translate: Callable[[list[str]], list[str]] = list) -> None:
    """Keep ``name`` in ``group`` as a hidden old spelling of ``posttrain *runs``: it says
    that ``old`` is now ``new`` (the words that differ), then runs ``runs`` with the words it
    was given, made the new command's by ``translate`` (``--help`` included)."""

    @group.command(name=name, hidden=True, add_help_option=False,
                   help=f"The old spelling of posttrain {' '.join(runs)}.",
                   context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
    def old_spelling(ctx: typer.Context) -> None:
        said(old, new)
        root = ctx.find_root()
        command = root.command.get_command(root, runs[0])
        args = [*runs[1:], *translate(ctx.args)]
        with command.make_context(runs[0], args, parent=root) as sub:
            command.invoke(sub)
