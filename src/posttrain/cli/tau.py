"""``posttrain tau``: the tau-bench environments' gold check and evaluation (docs/tau.md)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from posttrain.cli.engine_options import (
    EngineDevice,
    EngineName,
    context_window,
    engine_from_options,
)
from posttrain.cli.output import console, fail, fail_on

tau_app = typer.Typer(no_args_is_help=True,
                      help="tau-bench customer-service environments: check and evaluate.")

Domain = Annotated[str, typer.Option(help="mock, retail or telecom (the 20-task small set)")]
# the eval command's options behind TauConfig's fields, for its errors
OPTIONS = {"domain": "--domain", "eval_split": "--split", "reward_basis": "--basis",
           "user": "--user-model/--user-endpoint", "judge": "--judge-model/--judge-endpoint"}


@tau_app.command()
def check(
    domain: Domain,
    task: Annotated[list[str] | None, typer.Option(help="only these task ids")] = None,
) -> None:
    """Replay every task's gold actions from its initial state.

    Prints one JSON line per task on stdout (final hashes, each action's output and error flag, the
    reward under the domain's state basis); exit code 1 if any replay does not earn reward 1."""
    from posttrain.envs.tau.gold import gold_check
    from posttrain.envs.tau.tasks import load_tasks
    from posttrain.reporting import StepProgress

    with fail_on(ValueError):
        tasks = load_tasks(domain)
    if task:
        if unknown := sorted(set(task) - {t.id for t in tasks}):
            fail(f"unknown task ids for {domain}: {', '.join(unknown)}")
        tasks = [t for t in tasks if t.id in task]
    failed = []
    progress = StepProgress(console)
    progress.start(f"gold replay of {domain}", len(tasks))
    for done, t in enumerate(tasks, start=1):
        record = gold_check(t, domain)
        typer.echo(json.dumps(record))
        if abs(record["reward"] - 1.0) > 1e-6:
            failed.append(t.id)
        progress.advance(done)
    progress.finish()
    console.print(f"{domain}: {len(tasks) - len(failed)} of {len(tasks)} gold replays earn "
                  "reward 1" + (f"; failing: {', '.join(failed)}" if failed else ""))
    if failed:
        raise typer.Exit(code=1)


@tau_app.command(name="eval")
def eval_(
    domain: Domain,
    model: Annotated[Path, typer.Option(help="the agent: a local Hugging Face model directory")],
    trials: Annotated[int, typer.Option(min=1, help="conversations per task (pass^1..k)")] = 1,
    split: Annotated[str | None, typer.Option(
        help="task split (default: retail test; mock/telecom every task)")] = None,
    limit: Annotated[int | None, typer.Option(min=1, help="only the split's first N")] = None,
    user_model: Annotated[str | None, typer.Option(
        help="local model playing the user (default: the agent's model)")] = None,
    user_endpoint: Annotated[str | None, typer.Option(
        help="OpenAI-compatible .../v1 URL playing the user")] = None,
    user_endpoint_model: Annotated[str, typer.Option(
        help="model name sent to --user-endpoint")] = "default",
    solo: Annotated[bool, typer.Option(
        help="no user: the agent works each task's ticket alone (tasks with a ticket)")] = False,
    judge_model: Annotated[str | None, typer.Option(
        help="local model judging NL_ASSERTION")] = None,
    judge_endpoint: Annotated[str | None, typer.Option(
        help="OpenAI-compatible .../v1 URL judging NL_ASSERTION")] = None,
    judge_endpoint_model: Annotated[str, typer.Option(
        help="model name sent to --judge-endpoint")] = "default",
    basis: Annotated[str | None, typer.Option(
        help="reward basis for every task, e.g. DB,COMMUNICATE (default: each task's)")] = None,
    out: Annotated[Path, typer.Option(help="output directory")] = Path("runs/tau-eval"),
    max_turns: Annotated[int, typer.Option(min=1, help="agent turns per conversation")] = 100,
    max_tokens: Annotated[int, typer.Option(min=16, help="agent context window")] = 32768,
    max_new_tokens: Annotated[int, typer.Option(min=1, help="tokens per agent turn")] = 256,
    temperature: Annotated[float, typer.Option(min=0.0, help="the agent's sampling "
                                               "temperature (0: greedy)")] = 0.0,
    retain_reasoning: Annotated[str, typer.Option(
        help="the agent's earlier reasoning when the user speaks: keep_all, "
             "drop_on_new_user or auto_v4 (docs/agents.md)")] = "keep_all",
    dtype: Annotated[str, typer.Option(help="float32 or bfloat16")] = "float32",
    seed: Annotated[int, typer.Option(help="sampling seed")] = 0,
    engine_name: EngineName = "torch",
    device: EngineDevice = None,
) -> None:
    """Play every task of a split TRIALS times against a simulated user; report pass^k.

    Reports pass^k for k = 1..TRIALS, the average reward and the termination reasons; writes
    episodes.jsonl (viewable with `posttrain replay`) and summary.json to OUT."""
    from pydantic import ValidationError

    from posttrain.config import LoopLimits
    from posttrain.config.sections.agent import RETENTION
    from posttrain.config.served import ChatServer
    from posttrain.engines.chat import engine_tool_chat
    from posttrain.envs.tau.rl import TauConfig, llm_users
    from posttrain.models import ModelNotFoundError, load_tokenizer
    from posttrain.recipes.judges.chats import ServedChats
    from posttrain.recipes.outer.tau_eval import play, summarize
    from posttrain.reporting import StepProgress
    from posttrain.types import SamplingParams, write_episodes

    def served(path, endpoint, name):
        return None if path is None and endpoint is None else ChatServer(
            model=path, endpoint=endpoint, endpoint_model=name)

    if retain_reasoning not in RETENTION:
        fail(f"--retain-reasoning: {retain_reasoning!r} is not one of {', '.join(RETENTION)}")
    try:
        cfg = TauConfig(domain=domain, eval_split=split, solo=solo,
                        user=served(user_model, user_endpoint, user_endpoint_model),
                        judge=served(judge_model, judge_endpoint, judge_endpoint_model),
                        reward_basis=None if basis is None else basis.split(","))
        tokenizer = load_tokenizer(model)
        engine = engine_from_options(engine_name, device, model, dtype, tokenizer)
        own = ChatServer(model=str(model))  # by default the agent's engine plays the user too
        tasks = cfg.tasks(ServedChats(dtype, seed), llm_users(engine_tool_chat(
            engine, tokenizer, own.max_new_tokens, own.temperature, seed)))
    except ValidationError as e:
        fail("; ".join(f"{OPTIONS.get(str(err['loc'][0]), err['loc'][0])}: {err['msg']}"
                       for err in e.errors()))
    except (ValueError, ModelNotFoundError) as e:
        fail(str(e))
    window = context_window(model)
    if window is not None and max_tokens > window:
        console.print(f"[yellow]{model} holds {window} positions: --max-tokens {max_tokens} "
                      f"is capped to {window}")
        max_tokens = window
    prompts = tasks.splits["eval"][:limit]
    limits = LoopLimits(max_turns=max_turns, max_tokens=max_tokens, timeout_s=3600,
                        max_tool_errors=cfg.max_errors, loop_repeats=cfg.max_steps)
    sampling = SamplingParams(max_new_tokens=max_new_tokens, temperature=temperature,
                              stop_token_ids=(tokenizer.eos_token_id,), seed=seed)
    if cfg.judge is None:
        console.print("[yellow]no judge: NL_ASSERTION is left out of every task's basis")
    episodes, path = [], out / "episodes.jsonl"
    out.mkdir(parents=True, exist_ok=True)
    path.unlink(missing_ok=True)
    progress = StepProgress(console)
    progress.start(f"{domain}: {len(prompts)} tasks x {trials}", len(prompts) * trials)
    for episode in play(engine, tokenizer, tasks, prompts, trials, limits, sampling,
                        retain_reasoning=retain_reasoning):
        episodes.append(episode)
        write_episodes(path, [episode], append=True)  # kept even if the run stops
        progress.advance(len(episodes))
    progress.finish()
    summary = summarize(episodes)
    (out / "summary.json").write_text(json.dumps(summary, indent=2))
    console.print(summary_table(domain, summary))
    console.print(f"episodes.jsonl and summary.json in {out}")


def summary_table(domain: str, summary: dict):
    from rich.table import Table

    table = Table(title=f"tau-bench {domain}: {summary['tasks']} tasks, "
                        f"{summary['episodes']} scored episodes")
    table.add_column("metric")
    table.add_column("value", justify="right")
    for k, v in summary["pass_hat_k"].items():
        table.add_row(f"pass^{k}", f"{v:.3f}")
    table.add_row("average reward", f"{summary['avg_reward']:.3f}")
    for reason, count in sorted(summary["terminations"].items()):
        table.add_row(f"ended: {reason}", str(count))
    table.add_row("infrastructure errors", str(summary["infrastructure_errors"]))
    for basis, count in summary["reward_basis"].items():
        table.add_row(f"basis {basis}", str(count))
    if summary["unavailable"]:
        table.add_row("unavailable", ", ".join(summary["unavailable"]))
    return table
