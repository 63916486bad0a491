"""``posttrain filter-prompts`` (``filter`` its old spelling), ``posttrain rejection-sample``
and ``posttrain pair-sample``: sample k answers per train prompt of a config's task with a
model, then write the kept prompts, best answers or best-over-worst pairs as JSONL."""

from __future__ import annotations

import json
import os
import random
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.progress import Progress

from posttrain.cli.options import ConfigFile, Overrides, load_or_fail
from posttrain.cli.output import console, fail, fail_on


def sampled(cfg, model: Path, k: int, num_prompts: int, temperature: float,
            console: Console) -> Iterator:
    """``k`` scored samples of ``num_prompts`` train prompts, with a progress bar."""
    from posttrain.data.curation import sample_prompts
    from posttrain.models import load_tokenizer, stop_tokens
    from posttrain.recipes.placement import make_engine
    from posttrain.recipes.run_tasks import RunTasks
    from posttrain.types import SamplingParams

    parts = RunTasks(cfg)
    tokenizer = load_tokenizer(model)
    engine = make_engine(cfg, model, tokenizer)
    tasks = parts.tasks.sample(num_prompts, random.Random(f"{cfg.seed}:curate"))
    sampling = SamplingParams(max_new_tokens=cfg.rl.max_new_tokens, temperature=temperature,
                              stop_token_ids=stop_tokens(tokenizer), seed=cfg.seed)
    with Progress(console=console, transient=True) as progress:
        bar = progress.add_task(f"sampling {k} per prompt", total=len(tasks))
        for s in sample_prompts(engine, tokenizer, tasks, parts.reward_fn, parts.rollout_fn,
                                k, sampling, cfg.reward.accuracy_part):
            progress.advance(bar)
            yield s


def write_rows(out: Path, rows: Iterator[dict | None], keep: Callable[[dict], bool]
               ) -> tuple[int, int]:
    """Write the kept rows to ``out`` atomically (a temporary file renamed at the end);
    returns (kept, seen)."""
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.tmp")
    kept = seen = 0
    try:
        with open(tmp, "w", encoding="utf-8") as f:
            for row in rows:
                seen += 1
                if row is not None and keep(row):
                    f.write(json.dumps(row) + "\n")
                    kept += 1
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    os.replace(tmp, out)
    return kept, seen


Model = Annotated[Path, typer.Option(help="local Hugging Face model directory to sample")]
Out = Annotated[Path, typer.Option(help="JSONL file to write")]
K = Annotated[int, typer.Option(min=1, help="samples per prompt")]
NumPrompts = Annotated[int, typer.Option(min=1, help="train prompts to sample")]
Temperature = Annotated[float, typer.Option(min=0.0, help="sampling temperature")]


def filter_prompts(
    config: ConfigFile,
    model: Model,
    out: Out,
    overrides: Overrides = None,
    k: K = 8,
    num_prompts: NumPrompts = 200,
    temperature: Temperature = 1.0,
    min_pass: Annotated[float | None, typer.Option(
        min=0.0, max=1.0, help="keep pass rate >= this (unset: > 0)")] = None,
    max_pass: Annotated[float | None, typer.Option(
        min=0.0, max=1.0, help="keep pass rate <= this (unset: < 1)")] = None,
) -> None:
    """Keep the train prompts whose pass rate over K samples lies in a range.

    Samples MODEL K times on each train prompt of CONFIG's task and writes the kept prompts
    as JSONL rows {messages, reference, pass_rate, passes, k}."""
    from posttrain.data.curation import filter_row, in_range

    _curate(load_or_fail(config, overrides), model, k, num_prompts, temperature, out, filter_row,
            lambda row: in_range(row["pass_rate"], min_pass, max_pass))


Threshold = Annotated[float, typer.Option(help="a good answer's reward is at least this")]


def _answers_command(command: str, row: str, doc: str) -> Callable[..., None]:
    """A command that samples single-turn answers and writes one row a prompt:
    ``posttrain.data.curation``'s ``row(sampled, threshold)`` (imported when it runs)."""

    def run(
        config: ConfigFile,
        model: Model,
        out: Out,
        overrides: Overrides = None,
        k: K = 8,
        num_prompts: NumPrompts = 200,
        temperature: Temperature = 1.0,
        threshold: Threshold = 1.0,
    ) -> None:
        from posttrain.data import curation

        to_row = getattr(curation, row)
        _curate(_single_turn(config, overrides, command), model, k, num_prompts, temperature,
                out, lambda s: to_row(s, threshold), lambda r: True)

    run.__name__, run.__doc__ = command.replace("-", "_"), doc
    return run


rejection_sample = _answers_command("rejection-sample", "best_row", """Keep the best of K \
samples per train prompt when its reward reaches THRESHOLD.

    Samples MODEL on CONFIG's task and writes SFT rows {messages, reward, pass_rate}, usable
    as sft.data.""")
pair_sample = _answers_command("pair-sample", "pair_row", """Pair the best of K samples per \
train prompt with the worst, as preference data.

    Samples MODEL on CONFIG's task; a prompt gives a pair when its best reward reaches
    THRESHOLD and its worst does not. Writes rows {prompt, chosen, rejected, chosen_reward,
    rejected_reward, pass_rate}, usable as pref.data (docs/preference.md).""")


def _single_turn(config: Path, overrides: list[str] | None, command: str):
    """The loaded config, or a clear failure for an agent task (its answers span turns)."""
    cfg = load_or_fail(config, overrides)
    if not cfg.single_turn:
        fail(f"{command} writes single-turn answers; task.name={cfg.task.name} is an agent "
             "task")
    return cfg


def _curate(cfg, model: Path, k: int, num_prompts: int, temperature: float, out: Path,
            to_row, keep) -> None:
    """Sample, turn each prompt's samples into a row (or None), write the kept rows."""
    from posttrain.models import ModelNotFoundError

    def rows():
        with fail_on(ModelNotFoundError):
            for s in sampled(cfg, model, k, num_prompts, temperature, console):
                yield to_row(s)

    kept, seen = write_rows(out, rows(), keep)
    console.print(f"kept {kept} of {seen} prompts -> {out}")
