"""``posttrain env audit``: scripted exploits against a config's environment, its verifier
and its guard (``posttrain.audit``; docs/env_audit.md)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer
import yaml

from posttrain.cli.output import console, fail, fail_on

env_app = typer.Typer(no_args_is_help=True,
                      help="environments: audit a verifier and guard with scripted exploits.")

TURN_TOKENS = 8192  # an attacker's turn (a submitted module) fits; its context is unbounded


@env_app.command()
def audit(
    config: Annotated[Path, typer.Argument(help="YAML config whose task is audited")],
    overrides: Annotated[list[str] | None, typer.Argument(
        help="dotted.key=value overrides")] = None,
    num_tasks: Annotated[int, typer.Option(min=1, help="held-out tasks each exploit plays")] = 20,
    exploit: Annotated[list[str] | None, typer.Option(
        help="only these exploits (default: every one the task's tools allow)")] = None,
    out: Annotated[Path | None, typer.Option(
        help="directory for audit.json, audit.md and guard_fix.yaml")] = None,
) -> None:
    """Play every exploit on the task's held-out tasks; report what passed without solving.

    Each exploit (reading files the task never named, forging result lines, editing test
    files, probing packages, spraying answers, stopping at once) plays through the run's own
    agent loop, verifier and guard (agent.guard). Prints the table, the holes and the
    agent.guard settings that block them; exit code 1 when a hole is found."""
    from posttrain.audit import EXPLOITS
    from posttrain.audit import audit as run_audit
    from posttrain.audit.report import attack_sampling
    from posttrain.config import ConfigError, load_config
    from posttrain.models.tiny import build_tokenizer
    from posttrain.recipes.run_tasks import RunTasks

    if unknown := sorted(set(exploit or []) - set(EXPLOITS)):
        fail(f"unknown exploits {', '.join(unknown)}; known: {', '.join(EXPLOITS)}")
    with fail_on(ConfigError, ValueError):
        cfg = load_config(config, list(overrides or []))
        if not cfg.single_turn:  # the attacker's context is not the model's to budget
            cfg = cfg.model_copy(update={"agent": cfg.agent.model_copy(update={
                "max_tokens": 16 * TURN_TOKENS, "max_turns": max(cfg.agent.max_turns, 4)})})
        parts = RunTasks(cfg.model_copy(update={"eval": cfg.eval.model_copy(
            update={"num_problems": num_tasks, "samples": 1})}))
    tokenizer = build_tokenizer()  # ChatML: what the scripted attacker reads
    sampling = attack_sampling(TURN_TOKENS, tokenizer.eos_token_id)
    report = run_audit(
        cfg.task.name, tool_schemas(parts), parts.eval_tasks,
        lambda engine, tasks: parts.rollout_fn(engine, tokenizer, tasks, parts.reward_fn,
                                               sampling, 1),
        cfg.reward.accuracy_part, tokenizer, [EXPLOITS[e] for e in exploit or EXPLOITS])
    console.print(report.markdown(), soft_wrap=True, markup=False, highlight=False)  # rows whole
    holes = report.holes()
    fix = yaml.safe_dump({"agent": {"guard": report.guard_fix()}}, sort_keys=False)
    for f in holes:
        console.print(f"[red]hole: {f.exploit}[/red] passed {f.passed} of {f.tasks} tasks "
                      f"({', '.join(f.passed_tasks)}); " + (
                          "the guard settings below block it" if f.guardable else
                          "it makes no call a guard could block: the verifier must change"))
    if any(f.guardable for f in holes):
        console.print(fix)
    if not holes:
        console.print("[green]no exploit passed a task without solving it[/green]")
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        (out / "audit.json").write_text(json.dumps(report.to_dict(), indent=2) + "\n")
        (out / "audit.md").write_text(report.markdown() + "\n")
        (out / "guard_fix.yaml").write_text(fix)
    if holes:
        raise typer.Exit(code=1)


def tool_schemas(parts) -> list[dict]:
    """The tools the task's episodes get: the task's, or (an environment that brings its
    own, such as tau's) those of the first held-out task's environment."""
    schemas = parts.tools.schemas() if parts.tools is not None else []
    make = getattr(parts.rollout_fn, "env_factory", None)
    if schemas or make is None:
        return schemas
    env = make(parts.eval_tasks[0].reference)
    try:
        return env.tools.schemas()
    finally:
        env.close()
