"""Where the command line reports: rich output on stderr, and the one way a command fails
(a red message on one line, however long its paths: the terminal wraps it, no newline is
inserted; exit code 2)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import typer
from rich.console import Console

console = Console(stderr=True)


def fail(message: str) -> None:
    from rich.markup import escape

    console.print(f"[bold red]error:[/] {escape(message)}", soft_wrap=True)
    raise typer.Exit(code=2)


@contextlib.contextmanager
def fail_on(*errors: type[Exception]) -> Iterator[None]:
    """Fail the command with the message of any of ``errors`` the ``with`` body raises."""
    try:
        yield
    except errors as e:
        fail(str(e))
