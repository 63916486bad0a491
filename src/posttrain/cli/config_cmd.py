"""``posttrain config explain``: the resolved config with each value's source, and what each
stage will do (``config.explain``)."""

from __future__ import annotations

import json
from typing import Annotated

import typer
from rich.markup import escape
from rich.table import Table

from posttrain.cli.options import ConfigFile, Overrides
from posttrain.cli.output import console, fail

config_app = typer.Typer(no_args_is_help=True,
                         help="configs: the resolved values and what a run will do.")

SOURCE_STYLE = {"default": "dim", "file": "cyan", "override": "bold yellow"}


@config_app.command()
def explain(
    config: ConfigFile,
    overrides: Overrides = None,
    changed: Annotated[bool, typer.Option(
        help="list only the values the file or an override set")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="print JSON on stdout")] = False,
) -> None:
    """Print every value with where it came from, and each stage's arithmetic.

    Rows per step, optimiser steps per rollout, micro-batches per optimiser step (gradient
    accumulation) per process, totals, sampled tokens, checkpoints and evaluations."""
    from posttrain.config import ConfigError, build_config
    from posttrain.config.explain import plan, sources
    from posttrain.config.loading import read_tree

    try:
        tree = read_tree(config)
        cfg = build_config(tree, list(overrides or []))
    except ConfigError as e:
        fail(str(e))
    where = sources(cfg.model_dump(mode="json", by_alias=True), tree, overrides or [])
    plans = plan(cfg)
    if as_json:
        print(json.dumps({
            "config": {k: {"value": v, "source": s} for k, (v, s) in where.items()},
            "stages": [p.as_dict() for p in plans]}, indent=2))
        return
    console.print(stage_table(plans))
    for p in plans:
        for note in p.notes:
            console.print(f"[yellow]{p.stage}: {escape(note)}")
    listing = Table(title=f"{config} resolved", show_edge=False)
    for col in ("key", "value", "from"):
        listing.add_column(col, overflow="fold")
    for key, (value, source) in where.items():
        if source != "default" or not changed:
            style = SOURCE_STYLE[source]
            listing.add_row(key, escape(json.dumps(value)), f"[{style}]{source}")
    console.print(listing)


def stage_table(plans) -> Table:
    """One column per stage, one row per quantity."""
    table = Table(title="what each stage does")
    table.add_column("")
    for p in plans:
        table.add_column(p.stage, justify="right")
    rows = [
        ("steps", lambda p: p.steps),
        ("rows per step", lambda p: p.rows_per_step),
        ("optimiser steps per step", lambda p: p.optimizer_steps_per_step),
        ("micro-batches per optimiser step, per process",
         lambda p: p.micro_batches_per_process),
        ("optimiser steps in all", lambda p: p.optimizer_steps),
        ("micro-batches in all", lambda p: p.micro_batches),
        ("sampled tokens per step, at most",
         lambda p: "-" if p.sampled_tokens_per_step is None else p.sampled_tokens_per_step),
        ("checkpoints written", lambda p: p.checkpoints),
        ("evaluations during the stage", lambda p: p.evals),
    ]
    for name, value in rows:
        cells = [value(p) for p in plans]
        table.add_row(name, *(f"{c:,}" if isinstance(c, int) else c for c in cells))
    return table
