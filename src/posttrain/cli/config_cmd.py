"""``posttrain config explain``: the resolved config with each value's source and meaning, the
keys the run never reads, and what each stage will do (``config.explain``)."""

from __future__ import annotations

import json
from typing import Annotated

import typer
from rich.markup import escape
from rich.table import Table

from posttrain.cli.options import ConfigFile, Overrides
from posttrain.cli.output import console, fail_on

config_app = typer.Typer(no_args_is_help=True,
                         help="configs: the resolved values and what a run will do.")

SOURCE_STYLE = {"default": "dim", "file": "cyan", "override": "bold yellow"}


@config_app.command()
def explain(
    config: ConfigFile,
    overrides: Overrides = None,
    changed: Annotated[bool, typer.Option(
        help="list only the values the file or an override set")] = False,
    unused: Annotated[bool, typer.Option(
        help="mark the keys no stage of this run reads, with the reason")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="print JSON on stdout")] = False,
) -> None:
    """Print every value with where it came from and what it means, and each stage's arithmetic.

    Rows per step, optimiser steps per rollout, micro-batches per optimiser step (gradient
    accumulation) per process, totals, sampled tokens, checkpoints and evaluations."""
    from posttrain.config import ConfigError, build_config
    from posttrain.config.explain import plan, sources
    from posttrain.config.explain import unused as unused_keys
    from posttrain.config.keys import describe
    from posttrain.config.loading import read_tree

    with fail_on(ConfigError):
        tree = read_tree(config)
        cfg = build_config(tree, list(overrides or []))
    where = sources(cfg.model_dump(mode="json", by_alias=True), tree, overrides or [])
    unread = unused_keys(cfg, where) if unused else {}
    plans = plan(cfg)
    if as_json:
        print(json.dumps({"config": {k: {"value": v, "source": s, "description": describe(cfg, k),
                                         **({"unused": unread.get(k)} if unused else {})}
                                     for k, (v, s) in where.items()},
                          "stages": [p.as_dict() for p in plans]}, indent=2))
        return
    console.print(stage_table(plans))
    for p in plans:
        for note in p.notes:
            console.print(f"[yellow]{p.stage}: {escape(note)}")
    listing = Table(title=f"{config} resolved", show_edge=False)
    for col in ("key", "value", "from", "meaning", *(["unused: why"] if unused else [])):
        listing.add_column(col, overflow="fold")
    for key, (value, source) in where.items():
        if source != "default" or not changed:
            why = [f"[dim]{escape(unread.get(key, ''))}"] if unused else []
            listing.add_row(key, escape(json.dumps(value)), f"[{SOURCE_STYLE[source]}]{source}",
                            escape(describe(cfg, key)), *why)
    console.print(listing)


def stage_table(plans) -> Table:
    """One column per stage, one row per quantity."""
    table = Table(title="what each stage does")
    table.add_column("")
    for p in plans:
        table.add_column(p.stage, justify="right")
    rows = [("steps", "steps"), ("rows per step", "rows_per_step"),
            ("optimiser steps per step", "optimizer_steps_per_step"),
            ("micro-batches per optimiser step, per process", "micro_batches_per_process"),
            ("optimiser steps in all", "optimizer_steps"),
            ("micro-batches in all", "micro_batches"),
            ("sampled tokens per step, at most", "sampled_tokens_per_step"),  # None: samples none
            ("checkpoints written", "checkpoints"), ("evaluations during the stage", "evals")]
    for name, attr in rows:
        cells = [getattr(p, attr) for p in plans]
        table.add_row(name, *("-" if c is None else f"{c:,}" for c in cells))
    return table
