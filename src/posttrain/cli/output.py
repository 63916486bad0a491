"""Where the command line reports: rich output on stderr, and the one way a command fails
(a red message on one line, however long its paths: the terminal wraps it, no newline is
inserted; exit code 2), and the one way it stops on Ctrl-C (what was kept, the command that
continues; exit code 130)."""

from __future__ import annotations

import contextlib
import shlex
from collections.abc import Iterator, Sequence
from typing import NoReturn

import typer
from rich.console import Console

console = Console(stderr=True)


def fail(message: str) -> None:
    from rich.markup import escape

    console.print(f"[bold red]error:[/] {escape(message)}", soft_wrap=True)
    raise typer.Exit(code=2)


def interrupted(said: str, command: Sequence[str] | None = None) -> NoReturn:
    """Stop on Ctrl-C: ``said`` (what was kept), then ``command`` (the command line that
    continues), on a line of its own to copy; exit code 130."""
    console.print(f"[yellow]interrupted.[/] {said}")
    if command:
        console.print(f"  {shlex.join(command)}", soft_wrap=True, markup=False, highlight=False)
    raise typer.Exit(code=130)


@contextlib.contextmanager
def fail_on(*errors: type[Exception]) -> Iterator[None]:
    """Fail the command with the message of any of ``errors`` the ``with`` body raises."""
    try:
        yield
    except errors as e:
        fail(str(e))
