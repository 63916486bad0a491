"""``posttrain synthesize``: build verifiable tasks (docs/synthesis.md)."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Annotated

import typer

from posttrain.cli.options import unused_file
from posttrain.cli.output import console, fail, fail_on, interrupted

synthesize_app = typer.Typer(
    no_args_is_help=True, help="synthesise verifiable tasks: tool environments, knowledge-graph "
                               "tasks, code tasks from a repository; filter them; collect "
                               "what a task_builder run built.")
Out = Annotated[Path, typer.Argument(help="directory for the environments and report.json")]
Count = Annotated[int, typer.Option(min=1, help="environments to attempt (--resume may raise "
                                                "it)")]
MaxRounds = Annotated[int, typer.Option(min=1, help="drafts per environment")]
Resume = Annotated[bool, typer.Option(help="continue the synthesis in OUT where it stopped "
                                           "(the same command, with --resume)")]
Overwrite = Annotated[bool, typer.Option(help="replace what a synthesis wrote in OUT")]


@contextlib.contextmanager
def claimed(ctx: typer.Context, what: str) -> Iterator[int]:
    """Claim the command's OUT (``synthesis.out_dir.claim``: fresh, ``--resume`` or
    ``--overwrite``) and give how many items its journal holds; on Ctrl-C inside, say how
    many ``what`` are done and how to continue."""
    from posttrain.synthesis.out_dir import OutDirError, claim, finished

    out = ctx.params["out"]
    settings = {k: _json(v) for k, v in ctx.params.items()
                if k not in ("out", "resume", "overwrite")}
    with fail_on(OutDirError):
        claim(out, ctx.info_name, settings, ctx.params["resume"], ctx.params["overwrite"])
    try:
        yield len(finished(out))
    except KeyboardInterrupt:
        interrupted(f"{len(finished(out))} {what} are done and kept in {out}; continue with:",
                    [*command_line(ctx), "--resume"])


def _json(value):
    """A parameter's value as JSON (paths as text)."""
    return [_json(v) for v in value] if isinstance(value, list | tuple) else \
        str(value) if isinstance(value, Path) else value


def command_line(ctx: typer.Context) -> list[str]:
    """This call's command line, every parameter spelled out but --resume and --overwrite."""
    words = ["posttrain", *ctx.command_path.split()[1:]]
    for p in ctx.command.params:
        value = ctx.params.get(p.name)
        if p.name in ("resume", "overwrite") or value is None:
            continue
        if p.param_type_name == "argument":
            words.append(str(value))
        elif getattr(p, "is_flag", False) and p.secondary_opts:
            words.append(p.opts[0] if value else p.secondary_opts[0])
        else:
            for v in value if p.multiple else [value]:
                words += [p.opts[0], str(v)]
    return words


@contextlib.contextmanager
def progress(description: str, total: int, done: int = 0) -> Iterator[Callable[[int], None]]:
    """``StepProgress`` of a loop of ``total`` items, ``done`` of them already, on the console:
    its ``advance(done)``."""
    from posttrain.reporting import StepProgress

    bar = StepProgress(console)
    bar.start(description, total, done)
    try:
        yield bar.advance
    finally:
        bar.finish()


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


def build(ctx: typer.Context, make, count: int, max_level: int, max_rounds: int) -> None:
    """Run the loop into ``ctx``'s OUT; print the report without its rows."""
    from posttrain.synthesis.tool_envs import synthesize_tool_envs

    with claimed(ctx, "environments") as done, \
            progress("environments", count, done) as advance:
        report = synthesize_tool_envs(make, count, ctx.params["out"], max_level, max_rounds,
                                      advance)
    typer.echo(json.dumps({k: v for k, v in report.items() if k != "environments"}, indent=2))


@synthesize_app.command()
def tools(
    ctx: typer.Context,
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
    resume: Resume = False,
    overwrite: Overwrite = False,
) -> None:
    """Build tool environments: a database, tools, a task, a verifier and a solution each.

    Each draft is validated in the sandbox (the reference solution calls only tools and the
    verifier accepts its answer and rejects the empty one), sent back with the reason until
    it validates, then asked for one level harder; the hardest valid draft is kept. Prints the
    report (also in OUT/report.json); train on OUT with task.name=tool_envs task.dir=OUT.
    Stopped (Ctrl-C), it says how to continue: the same command with --resume."""
    build(ctx, builder_of(builder, seed, flaw_rate, model), count, max_level, max_rounds)


@synthesize_app.command()
def kg(
    ctx: typer.Context,
    out: Out,
    count: Count = 200,
    max_level: Annotated[int, typer.Option(
        min=1, help="the hardest level asked (a question follows level + 1 relations)")] = 3,
    max_rounds: MaxRounds = 6,
    seed: Annotated[int, typer.Option(help="the knowledge graph's seed")] = 0,
    resume: Resume = False,
    overwrite: Overwrite = False,
) -> None:
    """Build multi-hop questions over a knowledge graph of invented facts (a DAG).

    Each question follows a path of relations from one entity ("the region of the country of
    the headquarters city of the employer of ..."), answered with a facts(entity) tool; the
    path is known and kept (meta.path). Validated, made harder (one relation more a level)
    and written as tool environments: train with task.name=tool_envs task.dir=OUT."""
    from posttrain.synthesis.knowledge_graph import KnowledgeGraphBuilder

    build(ctx, KnowledgeGraphBuilder(seed), count, max_level, max_rounds)


@synthesize_app.command(name="filter")
def filter_cmd(
    ctx: typer.Context,
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
    batch: Annotated[int, typer.Option(
        min=1, help="tasks played together (a step of the progress and of --resume)")] = 32,
    resume: Resume = False,
    overwrite: Overwrite = False,
) -> None:
    """Keep the tasks a solver pool can pass, with their difficulty.

    Each solver plays each task k times through the agent loop: a task no solver passes is
    dropped (pass@k = 0); with --require-failure so is one every solver always passes; a task
    a --closed-book model answers without tools is dropped too. Kept tasks are copied to OUT
    with their pass rates and difficulty (meta); OUT/filter_report.json says why each other
    task was dropped. Stopped (Ctrl-C), it says how to continue: the same command with
    --resume."""
    import shutil

    from posttrain.config import LoopLimits
    from posttrain.envs.tool_env import ToolEnvError, ToolEnvTasks
    from posttrain.recipes.outer.task_filter import filter_into
    from posttrain.types import SamplingParams

    with fail_on(ToolEnvError):
        problems = list(ToolEnvTasks(src).problems.values())
    with claimed(ctx, "tasks") as done:
        pool, book = [_solver(d) for d in solver], [_solver(d) for d in closed_book or []]
        with progress("tasks", len(problems), done) as advance:
            report = filter_into(
                out, problems, pool, k, book, require_failure,
                SamplingParams(temperature=temperature, max_new_tokens=max_new_tokens,
                               seed=seed), LoopLimits(max_turns=max_turns), batch, advance)
    if (src / "report.json").is_file():  # the synthesis report goes with its tasks
        shutil.copy(src / "report.json", out / "report.json")
    typer.echo(json.dumps({k_: v for k_, v in report.items() if k_ != "per_task"}, indent=2))


def _solver(model_dir: Path):
    from posttrain.engines.torch_member import TorchEngineConfig
    from posttrain.models import ModelNotFoundError
    from posttrain.recipes.outer.task_filter import Solver

    with fail_on(ModelNotFoundError):
        engine, tok = TorchEngineConfig(device="cpu").load(model_dir)
    return Solver(model_dir.name if model_dir.name not in ("sft_model", "rl_model")
                  else f"{model_dir.parent.name}/{model_dir.name}", engine, tok)


@synthesize_app.command()
def repo(
    ctx: typer.Context,
    repository: Annotated[Path, typer.Argument(help="a local git repository")],
    out: Annotated[Path, typer.Argument(help="new directory for the tasks and report.json")],
    runs: Annotated[int, typer.Option(min=1, help="test runs on each commit (stability)")] = 8,
    demo: Annotated[bool, typer.Option(
        help="first generate a demo repository at REPOSITORY (it must not exist)")] = False,
    demo_functions: Annotated[int, typer.Option(
        min=7, help="--demo: feature commits (one function each)")] = 8,
    resume: Resume = False,
    overwrite: Overwrite = False,
) -> None:
    """Build code tasks from a repository's commits: statement, workspace, F2P/P2P tests.

    Each commit with one parent is a task: its message the statement, its parent's tree the
    workspace (no history, caches or bytecode), its tests split into fail-to-pass and
    pass-to-pass by running them on both trees; flaky tests (results differing over --runs
    runs) are left out, and a commit without a stable F2P test, or whose packaged workspace
    holds a line of the solution, is dropped. Prints the report (also OUT/report.json).
    Stopped (Ctrl-C), it says how to continue: the same command with --resume (a --demo
    repository made before is used again)."""
    from posttrain.synthesis.demo_repo import make_demo_repo
    from posttrain.synthesis.repo_tasks import git, synthesize_repo_tasks

    with claimed(ctx, "commits") as done:
        if demo and not (resume and repository.exists()):
            if repository.exists():
                fail(f"--demo generates a repository at {repository}, which exists")
            make_demo_repo(repository, functions=demo_functions)
        try:
            commits = len(git(repository, "rev-list", "HEAD").split())
        except Exception:  # git's own message says what is wrong
            fail(f"{repository} is not a git repository with commits")
        with progress("commits", commits, done) as advance:
            report = synthesize_repo_tasks(repository, out, runs, advance)
    typer.echo(json.dumps({k: v for k, v in report.items() if k != "tasks"}, indent=2))


@synthesize_app.command()
def built(
    episodes: Annotated[Path, typer.Argument(
        help="a task_builder run's episodes.jsonl (rl.save_episodes: true)")],
    out: Annotated[Path, typer.Argument(help="a new JSONL file of prompt rows")],
    overwrite: Annotated[bool, typer.Option(help="replace OUT if it holds rows")] = False,
) -> None:
    """Collect what a task_builder run built as a dataset of prompts to train a solver on.

    Every valid problem whose solver pass rate lay strictly between 0 and 1 is kept once, as
    a row {prompt, answer, pass_rate}; the counts of what was left out, and why, are
    printed. Train on it with task.name=dataset task.data.path=OUT. Nothing to keep (an
    empty file, no builder episode) is an error, and nothing is written."""
    from posttrain.synthesis.task_builder import built_rows
    from posttrain.types.jsonl import read_episodes, write_atomic

    unused_file(out, overwrite, "the rows")
    if not episodes.is_file():
        fail(f"no file {episodes}: run the builder with rl.save_episodes=true")
    with fail_on(ValueError):  # a malformed line, named
        rows, left = built_rows(read_episodes(episodes))
    if not rows:
        fail(f"nothing to collect from {episodes}: " + (
            f"none of its {sum(left.values())} episodes is a learnable problem (left out: "
            + ", ".join(f"{n} {why}" for why, n in left.items()) + ")" if left
            else "it holds no episodes") + f"; {out} is not written")
    write_atomic(out, "".join(json.dumps(r) + "\n" for r in rows))
    typer.echo(json.dumps({"kept": len(rows), "left_out": left}, indent=2))
