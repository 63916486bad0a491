"""``posttrain quick-data`` and ``posttrain eval --mode quick`` (``quick-eval`` its old
spelling): quick-instruction rows from the built-in task families, and their answers' accuracy
through the engine or a served endpoint (docs/quick_instructions.md)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from posttrain.cli.options import unused_file
from posttrain.cli.output import console, fail, fail_on

QUICK_ANSWER_TOKENS = 16  # eval --mode quick's --max-new-tokens


def quick_data(
    out: Annotated[Path, typer.Argument(help="JSONL file to write")],
    rows: Annotated[int, typer.Option(min=1, help="how many rows")] = 3000,
    split: Annotated[str, typer.Option(help="train, or eval (held out)")] = "train",
    seed: Annotated[int, typer.Option(help="the rows' seed")] = 0,
    overwrite: Annotated[bool, typer.Option(help="replace OUT if it holds rows")] = False,
) -> None:
    """Write quick-instruction rows of the built-in task families (JSONL).

    Each row is a task's prompt with its answers to <action>, <query> and <domain>: train rows
    for sft.data, eval rows (held out) for eval --mode quick --data. A file that holds rows is
    replaced only with --overwrite."""
    from posttrain.features.quick.data import quick_rows

    if split not in ("train", "eval"):
        fail(f"--split is train or eval, not {split!r}")
    unused_file(out, overwrite, "the rows")
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".tmp")
    tmp.write_text("".join(json.dumps(r) + "\n" for r in quick_rows(rows, split, seed)))
    tmp.replace(out)
    console.print(f"wrote {rows} {split} rows to {out}")


def quick_eval(model: Path | None, data: Path | None, rows: int, url: str | None,
               served_model: str, api_key: str, max_new_tokens: int | None,
               out: Path | None) -> None:
    """``posttrain eval --mode quick``: ask quick instructions after held-out prompts (DATA, or
    ROWS of the built-in tasks); print their accuracy (JSON), and write it to OUT.

    Each row's instructions are answered from its prompt's KV cache, through the engine or a
    served model (URL); the report adds the prompt tokens not prefilled again."""
    from posttrain.data.chat_formats import conversation
    from posttrain.data.reading import read_rows
    from posttrain.features.quick.data import quick_rows
    from posttrain.features.quick.evaluation import ask_served, report
    from posttrain.types import DataError

    if (model is None) == (url is None):
        fail("--mode quick: give MODEL (ask it through the engine) or --url (ask a served "
             "model), not both")

    def parse(row: dict):
        c = conversation(row)
        if not c.quick:
            raise ValueError("no quick answers")
        return c, str(row.get("source") or "all")

    with fail_on(DataError, FileNotFoundError):
        parsed = [parse(r) for r in quick_rows(rows, "eval")] if data is None \
            else read_rows(data, parse, "quick-eval data")[0]
    convs, sources = [c for c, _ in parsed], [s for _, s in parsed]
    if url is not None:
        from openai import OpenAI

        client = OpenAI(base_url=url, api_key=api_key)
        asked = ask_served(client, served_model or client.models.list().data[0].id, convs)
    else:
        asked = _ask_local(model, convs, max_new_tokens or QUICK_ANSWER_TOKENS)
    result = report(convs, sources, asked) | {"through": "serve" if url else "engine"}
    if out is not None:
        out.write_text(json.dumps(result, indent=2) + "\n")
    typer.echo(json.dumps(result, indent=2))


def _ask_local(model: Path, convs, max_tokens: int):
    from posttrain.engines.torch_member import TorchEngineConfig
    from posttrain.features.quick.evaluation import ask_engine
    from posttrain.models import ModelNotFoundError

    # a model without the tokens, or whose engine cannot continue a cache: ValueError
    with fail_on(ModelNotFoundError, ValueError):
        engine, tok = TorchEngineConfig(device="cpu").load(model)
        engine.check_quick()
        return ask_engine(engine, tok, convs, max_tokens)


def quick_eval_words(args: list[str]) -> list[str]:
    """``quick-eval``'s words as ``eval --mode quick``'s: its ``--max-tokens`` is
    ``--max-new-tokens``."""
    return [f"--max-new-tokens{word.removeprefix('--max-tokens')}"
            if word.split("=")[0] == "--max-tokens" else word for word in args]
