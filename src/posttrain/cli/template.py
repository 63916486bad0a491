"""``posttrain template check``: which conversation constructs a chat template keeps
prefix-stable for ``posttrain serve``'s bridging (docs/serve.md)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape
from rich.table import Table

from posttrain.cli.output import console, fail_on

template_app = typer.Typer(no_args_is_help=True,
                           help="chat templates: audit multi-turn prefix stability.")


@template_app.command()
def check(model: Annotated[Path, typer.Argument(help="a model or tokenizer directory")]) -> None:
    """Report which constructs break bridging across turns.

    Plain turns, a system prompt, a tool call and its result, a reasoning block, and JSON booleans
    and numbers that a client parses and serialises again; exit code 1 if any breaks."""
    from posttrain.models import ModelNotFoundError, load_tokenizer
    from posttrain.serve.template_check import check_template

    with fail_on(ModelNotFoundError):
        verdicts = check_template(load_tokenizer(model))
    table = Table(title=f"chat template of {model}")
    for col in ("construct", "bridges", "where the turns part"):
        table.add_column(col, overflow="fold")
    for v in verdicts:
        table.add_row(v.name, "[green]yes" if v.bridges else "[red]no", escape(v.detail))
    console.print(table)
    if broken := [v.name for v in verdicts if not v.bridges]:
        console.print(f"{len(broken)} of {len(verdicts)} constructs start a new segment in "
                      "posttrain serve: " + ", ".join(broken))
        raise typer.Exit(code=1)
