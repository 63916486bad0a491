"""The tau-bench environments' gold check (``posttrain tau check``) and evaluation (``posttrain
eval --mode tau``; ``tau eval`` is its old spelling), docs/tau.md."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from posttrain.cli.engine_options import context_window, engine_from_options
from posttrain.cli.options import alias
from posttrain.cli.output import console, fail, fail_on

tau_app = typer.Typer(no_args_is_help=True,
                      help="tau-bench customer-service environments: check their gold actions.")

DOMAINS = "mock, retail or telecom (the 20-task small set)"
# eval --mode tau's options behind TauConfig's fields, for its errors
OPTIONS = {"domain": "--domain", "eval_split": "--split", "reward_basis": "--basis",
           "user": "--user-model/--user-endpoint", "judge": "--judge-model/--judge-endpoint"}
TAU_OUT, TAU_TURN_TOKENS = Path("runs/tau-eval"), 256  # eval --mode tau's --out, --max-new-tokens


@tau_app.command()
def check(
    domain: Annotated[str, typer.Option(help=DOMAINS)],
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


def tau_eval(model: Path | None, domain: str | None, trials: int, split: str | None,
             limit: int | None, user_model: str | None, user_endpoint: str | None,
             user_endpoint_model: str, solo: bool, judge_model: str | None,
             judge_endpoint: str | None, judge_endpoint_model: str, basis: str | None,
             out: Path | None, max_turns: int, max_tokens: int, max_new_tokens: int | None,
             temperature: float, retain_reasoning: str, dtype: str, seed: int,
             engine_name: str, device: str | None) -> None:
    """``posttrain eval --mode tau``: play every task of a split TRIALS times against a
    simulated user; report pass^k for k = 1..TRIALS, the average reward and the termination
    reasons; write episodes.jsonl (viewable with ``posttrain replay``) and summary.json to OUT
    (default ``runs/tau-eval``)."""
    from pydantic import ValidationError

    from posttrain.config import LoopLimits
    from posttrain.config.sections.agent import RETENTION
    from posttrain.config.served import ChatServer
    from posttrain.engines.chat import engine_tool_chat
    from posttrain.envs.tau.rl import TauConfig, llm_users
    from posttrain.models import ModelNotFoundError, load_tokenizer, stop_tokens
    from posttrain.recipes.judges.chats import ServedChats
    from posttrain.recipes.outer.tau_eval import play, summarize
    from posttrain.reporting import StepProgress
    from posttrain.types import SamplingParams, write_episodes

    def served(path, endpoint, name):
        return None if path is None and endpoint is None else ChatServer(
            model=path, endpoint=endpoint, endpoint_model=name)

    if model is None or domain is None:
        fail("--mode tau plays MODEL in --domain: give both")
    out, max_new_tokens = out or TAU_OUT, max_new_tokens or TAU_TURN_TOKENS
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
                              stop_token_ids=stop_tokens(tokenizer), seed=seed)
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


def tau_eval_words(args: list[str]) -> list[str]:
    """``tau eval``'s words as ``eval --mode tau``'s: its ``--model M`` is the argument M."""
    rest, model = [], []
    words = iter(args)
    for word in words:
        if word == "--model":
            model = [next(words, "")]
        elif word.startswith("--model="):
            model = [word.removeprefix("--model=")]
        else:
            rest.append(word)
    return [*model, *rest]


alias(tau_app, "eval", ["eval", "--mode", "tau"], "tau eval --model M", "eval M --mode tau",
      tau_eval_words)


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
