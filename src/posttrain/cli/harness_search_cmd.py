"""``posttrain harness-search``: the Meta-Harness outer loop over a config's harness with a
fixed model (``posttrain.harness_search``; docs/harness_search.md)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer
import yaml
from rich.table import Table

from posttrain.cli.output import console, fail, fail_on


def harness_search(
    config: Annotated[Path, typer.Argument(help="YAML config: the task and starting harness")],
    overrides: Annotated[list[str] | None, typer.Argument(
        help="dotted.key=value overrides: the starting harness")] = None,
    model: Annotated[Path, typer.Option(help="local model directory every harness runs")] =
        Path("runs/quickstart/rl_model"),
    out: Annotated[Path, typer.Option(help="the store: every candidate's source, result and "
                                           "traces")] = Path("runs/harness_search"),
    iterations: Annotated[int, typer.Option(min=0, help="proposal rounds")] = 3,
    k: Annotated[int, typer.Option(min=1, help="candidates a round")] = 4,
    search_tasks: Annotated[int, typer.Option(min=1, help="held-out tasks scoring a "
                                                          "candidate")] = 50,
    test_tasks: Annotated[int, typer.Option(min=1, help="held-out tasks after them, for the "
                                                        "pick")] = 50,
    space: Annotated[Path | None, typer.Option(
        help="YAML: dotted key -> values to try (the mutation proposer)")] = None,
    proposer: Annotated[str | None, typer.Option(
        help="a proposer by dotted path, f(store, k, iteration) -> candidates")] = None,
    proposer_endpoint: Annotated[str | None, typer.Option(
        help="an OpenAI-compatible .../v1 URL whose model proposes")] = None,
    proposer_model: Annotated[str, typer.Option(help="the endpoint's model name")] = "default",
    resume: Annotated[bool, typer.Option(help="continue the search in --out")] = False,
) -> None:
    """Search the harness around a fixed model: propose, evaluate, keep the Pareto frontier.

    Every candidate (config overrides and files) is stored in --out with its score on the
    search tasks, its context tokens and its raw traces; the frontier's pick is then scored on
    the test tasks. Prints the candidates and writes search.json."""
    import os

    from posttrain.config import ConfigError, load_config
    from posttrain.config.extension import ExtensionError, load_object
    from posttrain.engines import EngineUnavailableError
    from posttrain.engines.chat import openai_chat
    from posttrain.harness_search import ChatProposer, HarnessSearch, HarnessStore, MutationProposer
    from posttrain.models import ModelNotFoundError, load_tokenizer
    from posttrain.recipes.outer.harness_search import harness_evaluator
    from posttrain.recipes.placement import make_engine

    if sum(s is not None for s in (space, proposer, proposer_endpoint)) != 1:
        fail("name one proposer: --space FILE, --proposer module:fn or --proposer-endpoint URL")
    store = HarnessStore(out)
    if store.dir.exists() and not resume:
        fail(f"{out} holds a search: --resume continues it, or choose another --out")
    with fail_on(ConfigError, ModelNotFoundError, EngineUnavailableError, ExtensionError, OSError,
                 ValueError):
        cfg = load_config(config, list(overrides or []))
        tok = load_tokenizer(model)
        engine = make_engine(cfg, model, tok)
        if space is not None:
            propose = MutationProposer(yaml.safe_load(space.read_text()), cfg.seed,
                                       cfg.model_dump(mode="json"))
        elif proposer is not None:
            propose = load_object(proposer)
        else:
            propose = ChatProposer(openai_chat(proposer_endpoint, proposer_model,
                                               os.environ.get("OPENAI_API_KEY"), 2048, 0.7))
    # the starting harness: what the proposers read and change
    start = {key.strip(): yaml.safe_load(value) if value.strip() else None
             for key, _, value in (o.partition("=") for o in overrides or [])}
    evaluate = harness_evaluator(config, [], store, engine, tok, search_tasks, test_tasks)
    def shown(c, r) -> None:
        console.print(f"{c.id} ({c.note or 'start'}): " + (
            f"error {r.error}" if r.error else f"score {r.score:.3f}, tokens {r.tokens:.0f}"))

    report = HarnessSearch(store, evaluate, propose, k, iterations, shown).run(start)
    (out / "search.json").write_text(json.dumps(report, indent=2) + "\n")
    table = Table(title=f"frontier of {report['candidates']} harnesses")
    for column in ("candidate", "search score", "tokens"):
        table.add_column(column)
    for f in report["frontier"]:
        table.add_row(f["id"], f"{f['score']:.3f}", f"{f['tokens']:.0f}")
    console.print(table)
    console.print(f"start {report['start_score']:.3f} -> pick {report['pick']} "
                  f"{report['pick_search_score']:.3f} on the search tasks, "
                  f"{report['pick_test']['score']:.3f} on the test tasks")
