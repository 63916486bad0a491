"""``posttrain synthesize``: build verifiable tasks (docs/synthesis.md)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from posttrain.cli.output import console, fail, fail_on

synthesize_app = typer.Typer(
    no_args_is_help=True, help="synthesise verifiable tasks: tool environments, knowledge-graph "
                               "tasks, code tasks from a repository; filter them; collect "
                               "what a task_builder run built.")
Out = Annotated[Path, typer.Argument(help="directory for the environments and report.json")]
Count = Annotated[int, typer.Option(min=1, help="environments to attempt")]
MaxRounds = Annotated[int, typer.Option(min=1, help="drafts per environment")]


def new_out(out: Path, what: str) -> None:
    """Stop unless ``out`` is new or empty (nothing a run wrote is overwritten)."""
    if out.exists() and (out.is_file() or any(out.iterdir())):
        fail(f"{out} is not empty: give {what} a new path")


def builder_of(spec: str, seed: int, flaw_rate: float, model: str | None):
    """``scripted``, an OpenAI-compatible base URL (a served model), or a dotted path to a
    ``BuildRequest -> files`` callable."""
    from posttrain.synthesis.scripted import ScriptedToolBuilder

    if spec == "scripted":
        return ScriptedToolBuilder(seed, flaw_rate)
    if spec.startswith(("http://", "https://")):
        from posttrain.synthesis.prompted import PromptedBuilder, served_chat

        return PromptedBuilder(served_chat(spec, model))
    from posttrain.config.extension import ExtensionError, load_object

    with fail_on(ExtensionError):
        return load_object(spec)


def build(out: Path, make, count: int, max_level: int, max_rounds: int) -> None:
    """Run the loop into the new directory ``out``; print the report without its rows."""
    from posttrain.reporting import StepProgress
    from posttrain.synthesis.tool_envs import synthesize_tool_envs

    new_out(out, "the environments")
    bar = StepProgress(console)
    bar.start("environments", count)
    report = synthesize_tool_envs(make, count, out, max_level, max_rounds,
                                  lambda done: bar.advance(done))
    bar.finish()
    typer.echo(json.dumps({k: v for k, v in report.items() if k != "environments"}, indent=2))


@synthesize_app.command()
def tools(
    out: Out,
    count: Count = 50,
    builder: Annotated[str, typer.Option(
        help="scripted, a served model's base URL (http://HOST:PORT/v1), or a dotted path "
             "to a BuildRequest -> files callable")] = "scripted",
    model: Annotated[str | None, typer.Option(
        help="the model name to ask at a --builder URL (default: its first)")] = None,
    max_level: Annotated[int, typer.Option(min=1, help="the hardest level asked")] = 4,
    max_rounds: MaxRounds = 6,
    flaw_rate: Annotated[float, typer.Option(
        min=0, max=1, help="scripted: share of first drafts with a planted verifier bug")] = 0.0,
    seed: Annotated[int, typer.Option(help="scripted: the builder's seed")] = 0,
) -> None:
    """Build tool environments: a database, tools, a task, a verifier and a solution each.

    Each draft is validated in the sandbox (the reference solution calls only tools and the
    verifier accepts its answer and rejects the empty one), sent back with the reason until
    it validates, then asked for one level harder; the hardest valid draft is kept. Prints the
    report (also in OUT/report.json); train on OUT with task.name=tool_envs task.dir=OUT."""
    build(out, builder_of(builder, seed, flaw_rate, model), count, max_level, max_rounds)


@synthesize_app.command()
def kg(
    out: Out,
    count: Count = 200,
    max_level: Annotated[int, typer.Option(
        min=1, help="the hardest level asked (a question follows level + 1 relations)")] = 3,
    max_rounds: MaxRounds = 6,
    seed: Annotated[int, typer.Option(help="the knowledge graph's seed")] = 0,
) -> None:
    """Build multi-hop questions over a knowledge graph of invented facts (a DAG).

    Each question follows a path of relations from one entity ("the region of the country of
    the headquarters city of the employer of ..."), answered with a facts(entity) tool; the
    path is known and kept (meta.path). Validated, made harder (one relation more a level)
    and written as tool environments: train with task.name=tool_envs task.dir=OUT."""
    from posttrain.synthesis.knowledge_graph import KnowledgeGraphBuilder

    build(out, KnowledgeGraphBuilder(seed), count, max_level, max_rounds)


@synthesize_app.command(name="filter")
def filter_cmd(
    src: Annotated[Path, typer.Argument(help="synthesised environments (synthesize tools/kg)")],
    out: Annotated[Path, typer.Argument(help="new directory for the kept ones")],
    solver: Annotated[list[Path], typer.Option(
        help="a solver model directory (repeat for a pool)")],
    k: Annotated[int, typer.Option(min=1, help="episodes a solver plays each task")] = 4,
    closed_book: Annotated[list[Path] | None, typer.Option(
        help="a model that must fail every task without its tools (repeatable)")] = None,
    require_failure: Annotated[bool, typer.Option(
        help="also drop tasks every solver passes every time")] = False,
    max_turns: Annotated[int, typer.Option(min=1, help="turns an episode may take")] = 6,
    max_new_tokens: Annotated[int, typer.Option(min=1, help="tokens a turn")] = 64,
    temperature: Annotated[float, typer.Option(min=0, help="the solvers' sampling")] = 1.0,
    seed: Annotated[int, typer.Option(help="the episodes' seed")] = 0,
) -> None:
    """Keep the tasks a solver pool can pass, with their difficulty.

    Each solver plays each task k times through the agent loop: a task no solver passes is
    dropped (pass@k = 0); with --require-failure so is one every solver always passes; a task
    a --closed-book model answers without tools is dropped too. Kept tasks are copied to OUT
    with their pass rates and difficulty (meta); OUT/filter_report.json says why each other
    task was dropped."""
    import shutil

    from posttrain.config import LoopLimits
    from posttrain.envs.tool_env import ToolEnvError, ToolEnvFiles, ToolEnvTasks
    from posttrain.recipes.outer.task_filter import filter_tasks
    from posttrain.types import SamplingParams

    new_out(out, "the kept environments")
    with fail_on(ToolEnvError):
        problems = list(ToolEnvTasks(src).problems.values())
    kept, dropped = filter_tasks(
        problems, [_solver(d) for d in solver], k, [_solver(d) for d in closed_book or []],
        require_failure, SamplingParams(temperature=temperature, max_new_tokens=max_new_tokens,
                                        seed=seed), LoopLimits(max_turns=max_turns))
    out.mkdir(parents=True, exist_ok=True)
    for p in problems:
        if p.reference in kept:
            spec = {**p.env.spec, "meta": {**p.env.spec.get("meta", {}), **kept[p.reference]}}
            ToolEnvFiles({**p.env.files, "env.json": json.dumps(spec)}).save(out / p.reference)
    difficulty = [m["difficulty"] for m in kept.values()]
    report = {"tasks": len(problems), "kept": len(kept),
              "dropped": {r: sum(1 for v in dropped.values() if v == r)
                          for r in sorted(set(dropped.values()))},
              "mean_difficulty": round(sum(difficulty) / len(difficulty), 4) if kept else None,
              "per_task": {i: kept.get(i) or {"dropped": dropped[i]}
                           for i in (p.reference for p in problems)}}
    (out / "filter_report.json").write_text(json.dumps(report, indent=1) + "\n")
    if (src / "report.json").is_file():  # the synthesis report goes with its tasks
        shutil.copy(src / "report.json", out / "report.json")
    typer.echo(json.dumps({k_: v for k_, v in report.items() if k_ != "per_task"}, indent=2))


def _solver(model_dir: Path):
    from posttrain.engines import load_torch_engine
    from posttrain.models import ModelNotFoundError
    from posttrain.recipes.outer.task_filter import Solver

    with fail_on(ModelNotFoundError):
        engine, tok = load_torch_engine(model_dir)
    return Solver(model_dir.name if model_dir.name not in ("sft_model", "rl_model")
                  else f"{model_dir.parent.name}/{model_dir.name}", engine, tok)


@synthesize_app.command()
def repo(
    repository: Annotated[Path, typer.Argument(help="a local git repository")],
    out: Annotated[Path, typer.Argument(help="new directory for the tasks and report.json")],
    runs: Annotated[int, typer.Option(min=1, help="test runs on each commit (stability)")] = 8,
    demo: Annotated[bool, typer.Option(
        help="first generate a demo repository at REPOSITORY (it must not exist)")] = False,
    demo_functions: Annotated[int, typer.Option(
        min=7, help="--demo: feature commits (one function each)")] = 8,
) -> None:
    """Build code tasks from a repository's commits: statement, workspace, F2P/P2P tests.

    Each commit with one parent is a task: its message the statement, its parent's tree the
    workspace (no history, caches or bytecode), its tests split into fail-to-pass and
    pass-to-pass by running them on both trees; flaky tests (results differing over --runs
    runs) are left out, and a commit without a stable F2P test, or whose packaged workspace
    holds a line of the solution, is dropped. Prints the report (also OUT/report.json)."""
    from posttrain.reporting import StepProgress
    from posttrain.synthesis.demo_repo import make_demo_repo
    from posttrain.synthesis.repo_tasks import git, synthesize_repo_tasks

    new_out(out, "the tasks")
    if demo:
        if repository.exists():
            fail(f"--demo generates a repository at {repository}, which exists")
        make_demo_repo(repository, functions=demo_functions)
    try:
        commits = len(git(repository, "rev-list", "HEAD").split())
    except Exception:  # git's own message says what is wrong
        fail(f"{repository} is not a git repository with commits")
    bar = StepProgress(console)
    bar.start("commits", commits)
    report = synthesize_repo_tasks(repository, out, runs, lambda done: bar.advance(done))
    bar.finish()
    typer.echo(json.dumps({k: v for k, v in report.items() if k != "tasks"}, indent=2))


@synthesize_app.command()
def built(
    episodes: Annotated[Path, typer.Argument(
        help="a task_builder run's episodes.jsonl (rl.save_episodes: true)")],
    out: Annotated[Path, typer.Argument(help="a new JSONL file of prompt rows")],
) -> None:
    """Collect what a task_builder run built as a dataset of prompts to train a solver on.

    Every valid problem whose solver pass rate lay strictly between 0 and 1 is kept once, as
    a row {prompt, answer, pass_rate}; the counts of what was left out, and why, are
    printed. Train on it with task.name=dataset task.data.path=OUT."""
    from posttrain.synthesis.task_builder import built_rows
    from posttrain.types.jsonl import read_episodes, write_atomic

    new_out(out, "the rows")
    if not episodes.is_file():
        fail(f"no file {episodes}: run the builder with rl.save_episodes=true")
    with fail_on(ValueError):  # a malformed line, named
        rows, left = built_rows(read_episodes(episodes))
    write_atomic(out, "".join(json.dumps(r) + "\n" for r in rows))
    typer.echo(json.dumps({"kept": len(rows), "left_out": left}, indent=2))
