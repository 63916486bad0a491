"""``posttrain filter`` and ``posttrain rejection-sample``: sample k answers per train prompt of
a config's task with a model, then write the kept prompts or best answers as JSONL."""

from __future__ import annotations

import json
import os
import random
from collections.abc import Callable, Iterator
from pathlib import Path

from rich.console import Console
from rich.progress import Progress

from posttrain.config import RunConfig
from posttrain.data.curation import Sampled, sample_prompts
from posttrain.models import load_tokenizer
from posttrain.recipes.placement import make_engine
from posttrain.recipes.run_tasks import RunTasks
from posttrain.types import SamplingParams


def sampled(cfg: RunConfig, model: Path, k: int, num_prompts: int, temperature: float,
            console: Console) -> Iterator[Sampled]:
    """``k`` scored samples of ``num_prompts`` train prompts, with a progress bar."""
    parts = RunTasks(cfg)
    tokenizer = load_tokenizer(model)
    engine = make_engine(cfg, model, tokenizer)
    tasks = parts.tasks.sample(num_prompts, random.Random(f"{cfg.seed}:curate"))
    sampling = SamplingParams(max_new_tokens=cfg.rl.max_new_tokens, temperature=temperature,
                              stop_token_ids=(tokenizer.eos_token_id,), seed=cfg.seed)
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
