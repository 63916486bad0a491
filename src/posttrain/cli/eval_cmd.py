"""``posttrain eval``: one command, four modes. ``--mode heldout`` (the default) scores a model
on the held-out split of a config's task; ``skills-bench`` plays those tasks in SkillsBench's
three conditions (docs/skills.md); ``tau`` plays tau-bench against a simulated user
(docs/tau.md); ``quick`` asks quick instructions (docs/quick_instructions.md). A mode's
options are the parameters of its function (``MODES``): an option of another mode is refused.
``eval --skills-bench``, ``tau eval`` and ``quick-eval`` are its old spellings.

What ``--out DIR`` gets in ``heldout``: ``samples.jsonl`` (every sample with its prompt,
completion, rewards and missing parts) and ``summary.json`` (the metrics), each atomically.
``DIR`` is an evaluation's own folder: one that holds a training run is refused (``run_in``),
so an evaluation never replaces a run's ``summary.json``."""

from __future__ import annotations

import inspect
import json
from collections.abc import Iterator, Sequence
from enum import Enum
from pathlib import Path
from typing import Annotated

import typer

from posttrain.cli.curate import write_rows
from posttrain.cli.engine_options import engine_device_option, engine_name_option
from posttrain.cli.options import load_or_fail, said
from posttrain.cli.output import console, fail, fail_on
from posttrain.cli.quick_cmd import QUICK_ANSWER_TOKENS, quick_eval
from posttrain.cli.tau import DOMAINS, TAU_OUT, TAU_TURN_TOKENS, tau_eval
from posttrain.envs import Task
from posttrain.types import Episode, write_atomic


class Mode(str, Enum):
    """What ``posttrain eval`` plays (``--mode``)."""

    heldout = "heldout"
    skills_bench = "skills-bench"
    tau = "tau"
    quick = "quick"


# the help panel of the options only some modes take (MODES' signatures decide; a test checks)
RUN, TAU, QUICK, SAMPLED = (f"--mode {modes}" for modes in (
    "heldout, skills-bench", "tau", "quick", "tau, quick"))


def eval_(
    ctx: typer.Context,
    model: Annotated[Path | None, typer.Argument(
        help="a local Hugging Face model directory (--mode quick: a Llama-family one, or "
             "--url)")] = None,
    overrides: Annotated[list[str] | None, typer.Argument(
        help="dotted.key=value overrides of the config", rich_help_panel=RUN)] = None,
    mode: Annotated[Mode, typer.Option(
        help="heldout: the config task's held-out split; skills-bench: SkillsBench's three "
             "conditions (docs/skills.md); tau: tau-bench's pass^k against a simulated user "
             "(docs/tau.md); quick: quick instructions' accuracy "
             "(docs/quick_instructions.md)")] = Mode.heldout,
    out: Annotated[Path | None, typer.Option(
        help="heldout: a folder for samples.jsonl (every sample with its rewards) and "
             "summary.json; skills-bench: for skills_bench.json; tau: for episodes.jsonl and "
             f"summary.json (default {TAU_OUT}); quick: a JSON file of the report")] = None,
    skills_bench_flag: Annotated[bool, typer.Option(
        "--skills-bench", hidden=True, help="the old spelling of --mode skills-bench")] = False,
    config: Annotated[Path | None, typer.Option(
        help="YAML config for task/eval", rich_help_panel=RUN)] = None,
    domain: Annotated[str | None, typer.Option(help=DOMAINS, rich_help_panel=TAU)] = None,
    trials: Annotated[int, typer.Option(
        min=1, help="conversations per task (pass^1..k)", rich_help_panel=TAU)] = 1,
    split: Annotated[str | None, typer.Option(
        help="task split (default: retail test; mock/telecom every task)",
        rich_help_panel=TAU)] = None,
    limit: Annotated[int | None, typer.Option(
        min=1, help="only the split's first N", rich_help_panel=TAU)] = None,
    user_model: Annotated[str | None, typer.Option(
        help="local model playing the user (default: the agent's model)",
        rich_help_panel=TAU)] = None,
    user_endpoint: Annotated[str | None, typer.Option(
        help="OpenAI-compatible .../v1 URL playing the user", rich_help_panel=TAU)] = None,
    user_endpoint_model: Annotated[str, typer.Option(
        help="model name sent to --user-endpoint", rich_help_panel=TAU)] = "default",
    solo: Annotated[bool, typer.Option(
        help="no user: the agent works each task's ticket alone (tasks with a ticket)",
        rich_help_panel=TAU)] = False,
    judge_model: Annotated[str | None, typer.Option(
        help="local model judging NL_ASSERTION", rich_help_panel=TAU)] = None,
    judge_endpoint: Annotated[str | None, typer.Option(
        help="OpenAI-compatible .../v1 URL judging NL_ASSERTION", rich_help_panel=TAU)] = None,
    judge_endpoint_model: Annotated[str, typer.Option(
        help="model name sent to --judge-endpoint", rich_help_panel=TAU)] = "default",
    basis: Annotated[str | None, typer.Option(
        help="reward basis for every task, e.g. DB,COMMUNICATE (default: each task's)",
        rich_help_panel=TAU)] = None,
    max_turns: Annotated[int, typer.Option(
        min=1, help="agent turns per conversation", rich_help_panel=TAU)] = 100,
    max_tokens: Annotated[int, typer.Option(
        min=16, help="agent context window", rich_help_panel=TAU)] = 32768,
    temperature: Annotated[float, typer.Option(
        min=0.0, help="the agent's sampling temperature (0: greedy)",
        rich_help_panel=TAU)] = 0.0,
    retain_reasoning: Annotated[str, typer.Option(
        help="the agent's earlier reasoning when the user speaks: keep_all, "
             "drop_on_new_user or auto_v4 (docs/agents.md)", rich_help_panel=TAU)] = "keep_all",
    dtype: Annotated[str, typer.Option(
        help="float32 or bfloat16", rich_help_panel=TAU)] = "float32",
    seed: Annotated[int, typer.Option(help="sampling seed", rich_help_panel=TAU)] = 0,
    engine_name: engine_name_option(TAU) = "torch",
    device: engine_device_option(TAU) = None,
    max_new_tokens: Annotated[int | None, typer.Option(
        min=1, help=f"tokens an agent turn (tau, default {TAU_TURN_TOKENS}) or an answer "
                    f"(quick, default {QUICK_ANSWER_TOKENS})", rich_help_panel=SAMPLED)] = None,
    data: Annotated[Path | None, typer.Option(
        help="rows with quick answers (default: --rows held-out rows of the built-in tasks)",
        rich_help_panel=QUICK)] = None,
    rows: Annotated[int, typer.Option(
        min=1, help="held-out rows without --data", rich_help_panel=QUICK)] = 300,
    url: Annotated[str | None, typer.Option(
        help="ask a served model instead of MODEL (posttrain serve's base URL, e.g. "
             "http://127.0.0.1:8000/v1)", rich_help_panel=QUICK)] = None,
    served_model: Annotated[str, typer.Option(
        help="the model name to ask at --url", rich_help_panel=QUICK)] = "",
    api_key: Annotated[str, typer.Option(
        help="the key to send to --url", rich_help_panel=QUICK)] = "quick-eval",
) -> None:
    """Evaluate MODEL: on a config's held-out split, SkillsBench, tau-bench or quick answers.

    --mode heldout (the default) prints the metrics of the held-out split of the config's task
    as JSON: eval.samples=N (with eval.temperature > 0) adds pass@k, maj@k and mean@N with
    standard errors; eval.group_by=[column] splits the accuracy by a dataset column.
    --mode skills-bench plays those tasks in SkillsBench's three conditions (docs/skills.md);
    --mode tau plays every task of a tau-bench split --trials times against a simulated user
    and reports pass^k (docs/tau.md); --mode quick asks quick instructions after held-out
    prompts and prints their accuracy (docs/quick_instructions.md). An option of another mode
    is refused."""
    given = dict(locals())  # every parameter by name, as typer converted it
    if skills_bench_flag:
        if _given(ctx, "mode"):
            fail("--skills-bench is the old spelling of --mode skills-bench: give one --mode")
        said("eval --skills-bench", "eval --mode skills-bench")
        mode = Mode.skills_bench
    _refuse_other_modes(ctx, mode)
    MODES[mode](**{name: given[name] for name in takes(mode)})


def _refuse_other_modes(ctx: typer.Context, mode: Mode) -> None:
    """Fail on every option (or argument) on the command line that ``mode`` does not take."""
    foreign = [p for p in ctx.command.params
               if p.name not in takes(mode) | {"mode", "skills_bench_flag"}
               and _given(ctx, p.name)]
    if foreign:
        fail("; ".join(f"{_spelt(p)} belongs to --mode "
                       f"{', '.join(m.value for m in Mode if p.name in takes(m))}, "
                       f"not --mode {mode.value}" for p in foreign))


def _given(ctx: typer.Context, name: str) -> bool:
    """Whether the command line gives the parameter ``name`` (the ``ParameterSource`` is read
    by name: typer carries a click of its own)."""
    source = ctx.get_parameter_source(name)
    return source is not None and source.name == "COMMANDLINE"


def _spelt(param) -> str:
    """How the command line spells ``param``: ``--trials``, or ``OVERRIDES``."""
    name = param.opts[0]
    return name if name.startswith("-") else name.upper()


def heldout(model: Path | None, config: Path | None, overrides: list[str] | None,
            out: Path | None) -> None:
    """Score MODEL on the held-out split of the config's task; print the metrics (JSON)."""
    cfg = _config(model, config, overrides, out, Mode.heldout.value)
    from posttrain.types import ChatTemplateError

    parts, engine, tok = _prepared(cfg, model)
    with fail_on(ChatTemplateError):
        episodes, result = parts.evaluate(engine, tok)
    if out is not None:
        write_eval(out, episodes, parts.eval_tasks, cfg.eval.samples, result)
    typer.echo(json.dumps(result, indent=2))


def skills_bench(model: Path | None, config: Path | None, overrides: list[str] | None,
                 out: Path | None) -> None:
    """Play the held-out tasks without skills, with the bank of skills.dir and with
    self-written skills; print the report (JSON) with the gain g."""
    from posttrain.features.skills.run import run_skills_bench

    cfg = _config(model, config, overrides, out, Mode.skills_bench.value)
    if cfg.skills is None:
        fail("--mode skills-bench needs a skill bank: set skills.dir")
    parts, engine, tok = _prepared(cfg, model)
    result = run_skills_bench(parts, engine, tok)
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        (out / "skills_bench.json").write_text(json.dumps(result, indent=2) + "\n")
    typer.echo(json.dumps(result, indent=2))


def _config(model: Path | None, config: Path | None, overrides: list[str] | None,
            out: Path | None, mode: str):
    """The run config ``mode`` evaluates MODEL with, or a failed command."""
    if model is None:
        fail(f"--mode {mode} evaluates MODEL: give a model directory")
    if config is None:
        config = run_config(model)
        said = (f"the task of its run, {config}" if config else
                "the quickstart task (column additions); --config names yours")
        console.print(f"note: no --config: {said}", markup=False, highlight=False,
                      soft_wrap=True)
    cfg = load_or_fail(config, overrides)
    if out is not None and (mark := run_in(out)):
        fail(f"--out {out} holds a training run ({mark}): give the evaluation a folder of its own")
    return cfg


def _prepared(cfg, model: Path):
    """The task parts of ``cfg`` with their judges, an engine holding MODEL, its tokenizer."""
    from posttrain.engines import EngineUnavailableError
    from posttrain.models import ModelNotFoundError, load_tokenizer
    from posttrain.recipes.placement import make_engine
    from posttrain.recipes.run_tasks import RunTasks

    with fail_on(ModelNotFoundError, EngineUnavailableError, FileNotFoundError):
        tok = load_tokenizer(model)
        engine = make_engine(cfg, model, tok)
    parts = RunTasks(cfg)
    parts.attach_judges(tok)
    return parts, engine, tok


MODES = {Mode.heldout: heldout, Mode.skills_bench: skills_bench, Mode.tau: tau_eval,
         Mode.quick: quick_eval}


def takes(mode: Mode) -> set[str]:
    """The parameters of ``posttrain eval`` that ``mode`` reads."""
    return set(inspect.signature(MODES[mode]).parameters)


def sample_rows(episodes: Sequence[Episode], tasks: Sequence[Task], samples: int) -> Iterator[dict]:
    """One row a sample: problem ``k``'s samples are episodes ``[k n, (k+1) n)``."""
    for i, e in enumerate(episodes):
        task = tasks[i // samples]
        yield {"problem": i // samples, "sample": i % samples, "prompt": task.messages(),
               "completion": e.meta.get("completion", e.meta.get("final")),
               "reference": task.reference, "reward": e.reward, "rewards": e.rewards,
               "missing": e.meta.get("missing_reasons", {}),
               "finish_reason": e.finish_reason, "row": getattr(task, "row", {})}


RUN_MARKS = ("config.yaml", "metrics.jsonl", ".lock")  # what a training run's directory holds


def run_config(model: Path) -> Path | None:
    """The config of the run MODEL is a stage's model of (``<out_dir>/<stage>_model``)."""
    config = model.parent / "config.yaml"
    return config if model.name.endswith("_model") and config.is_file() else None


def run_in(out: Path) -> str | None:
    """What in ``out`` shows it holds a training run (None: an evaluation may write there)."""
    return next((m for m in RUN_MARKS if (out / m).exists()), None)


def write_eval(out: Path, episodes: Sequence[Episode], tasks: Sequence[Task], samples: int,
               metrics: dict[str, float]) -> None:
    """``out/samples.jsonl`` and ``out/summary.json``."""
    write_rows(out / "samples.jsonl", sample_rows(episodes, tasks, samples), lambda row: True)
    write_atomic(out / "summary.json", json.dumps(metrics, indent=2, default=str) + "\n")
