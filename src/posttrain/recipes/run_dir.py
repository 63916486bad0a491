"""A run directory never loses data (docs/config.md, "The run directory").

- ``claim_run_dir``: one live run per directory (an ``flock`` on ``.lock``, released when the
  process ends, however it ends). A fresh run needs a directory that holds no run's work
  (``run_work``: what a failed start wrote is cleared); ``--overwrite`` first removes what a
  run writes (and nothing else); ``--resume`` needs a checkpoint, and a config that trains the
  same thing as the saved ``config.yaml`` (only ``RESUMABLE`` keys may differ).
- ``record_sizes`` / ``truncate_records``: every checkpoint stores the byte length of each
  record (``metrics.jsonl``, ``episodes.jsonl``, ``prompt_budgets.jsonl``,
  ``curriculum.jsonl``); a resumed run cuts
  them back to it, so rows logged between that checkpoint and the interruption are not
  repeated.
"""

from __future__ import annotations

import fcntl
import os
import shutil
from pathlib import Path
from typing import IO, Any

import yaml

from posttrain.config import RunConfig
from posttrain.reporting.curves import STAGE_PANELS
from posttrain.train import latest_checkpoint

LOCK = ".lock"
CONFIG = "config.yaml"
CHECKPOINTS = "checkpoints"
SUMMARY = "summary.json"
PROMPT_BUDGETS = "prompt_budgets.jsonl"  # budget: auto's per-prompt budgets, as fixed
RM_REFERENCE_SCORES = "rm_reference_scores.json"  # rl.rm_win_rate_monitor's reference
CURRICULUM = "curriculum.jsonl"  # task.curriculum's observed pass rates, by step
RECORDS = ("metrics.jsonl", "episodes.jsonl", PROMPT_BUDGETS, RM_REFERENCE_SCORES, CURRICULUM)
# what a run writes into its directory: --overwrite removes these and nothing else
PLOTS = ("curves.png", *(f"curves_{stage}.png" for stage in STAGE_PANELS))
ARTIFACTS = (CONFIG, *RECORDS, SUMMARY, *PLOTS, CHECKPOINTS, "base_model",
             "ranks", "sft_model", "pref_model", "distill_model", "rl_model", "opd_model")
# what a run writes before it trains: its config and the base model built from it
STARTUP = (CONFIG, "base_model")
# keys that may change when a run is resumed: where and how fast it runs, and for how many
# steps (a longer stage follows the schedule of its new length), not what it trains
RESUMABLE = ("out_dir", "threads", "checkpoint_every", "keep_last", "checkpoint_format", "dist",
             "trainer.shard", "sft.steps", "pref.steps", "distill.steps", "rl.steps", "opd.steps")


class RunDirError(ValueError):
    """The run directory cannot be used as asked; the message says what to do instead."""


def claim_run_dir(out: Path, config: dict[str, Any], resume: bool, overwrite: bool) -> IO:
    """Lock ``out`` for this process and make it ready for a fresh, resumed or overwritten
    run of ``config`` (its ``model_dump``); returns the open lock file (keep it open).
    ``RunDirError`` says why it cannot (``out`` or a parent is a file, among the rest)."""
    if resume and overwrite:
        raise RunDirError("--resume continues the run in out_dir and --overwrite replaces it: "
                          "choose one")
    try:
        out.mkdir(parents=True, exist_ok=True)
    except (FileExistsError, NotADirectoryError) as e:
        raise RunDirError(f"out_dir {str(out)!r} cannot be a run directory: {e}") from None
    lock = _lock(out)
    try:
        _prepare(out, config, resume, overwrite)
    except BaseException:
        lock.close()
        raise
    return lock


def run_work(out: Path) -> list[str]:
    """The names in ``out`` that hold a run's work (a checkpoint, a record with content, a
    trained model, a summary) or that no run writes; none for a directory holding only what a
    start that failed wrote (``STARTUP`` files, empty records and folders): no run yet."""
    return sorted(p.name for p in out.iterdir() if p.name != LOCK and not (
        p.name in ARTIFACTS and (p.name in STARTUP or _empty(p))))


def _empty(path: Path) -> bool:
    """An empty file, or a folder whose files are all empty."""
    if path.is_dir():
        return all(_empty(p) for p in path.iterdir())
    return path.lstat().st_size == 0


def _prepare(out: Path, config: dict[str, Any], resume: bool, overwrite: bool) -> None:
    existing = run_work(out)
    if overwrite or not existing:  # and what a failed start wrote: its base model, built anew
        for name in ARTIFACTS:
            path = out / name
            if path.is_dir():
                shutil.rmtree(path)
            else:
                path.unlink(missing_ok=True)
    elif resume:
        if latest_checkpoint(out / CHECKPOINTS) is None:
            raise RunDirError(f"nothing to resume in {out}: it holds no checkpoint "
                              f"({_why_no_checkpoint(out / CONFIG)}); --overwrite starts the "
                              "run over")
        changed = config_changes(out / CONFIG, config)
        if changed:
            raise RunDirError(f"--resume with a config that trains something else than the run "
                              f"in {out}: {', '.join(changed)} differ from its {CONFIG} "
                              f"(only {', '.join(RESUMABLE)} may change)")
        longer = [k for k in _diff(yaml.safe_load((out / CONFIG).read_text()) or {}, config,
                                   {}) if k.endswith(".steps")]
        if (out / SUMMARY).is_file() and not longer:
            raise RunDirError(f"the run in {out} is complete ({SUMMARY}): nothing to resume; "
                              "raise a stage's steps to continue it, or --overwrite starts it over")
        (out / SUMMARY).unlink(missing_ok=True)  # the resumed run writes its own
    else:
        shown = ", ".join(existing[:4]) + (", ..." if len(existing) > 4 else "")
        raise RunDirError(f"{out} already holds files ({shown}): --resume continues that run, "
                          "--overwrite replaces it, or choose another out_dir")
    (out / CONFIG).write_text(yaml.safe_dump(config, sort_keys=False))


def _why_no_checkpoint(saved: Path) -> str:
    """What the saved config says of a run without a checkpoint."""
    every = (yaml.safe_load(saved.read_text()) or {}).get("checkpoint_every") \
        if saved.is_file() else None
    if every == 0:
        return "it ran with checkpoint_every=0"
    return (f"it stopped before its first checkpoint, due every {every} steps" if every
            else "it stopped before its first checkpoint")


def _lock(out: Path) -> IO:
    f = open(out / LOCK, "a+")  # noqa: SIM115 - held open for the run's lifetime
    try:
        fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        f.seek(0)
        owner = f.read().strip() or "unknown"
        f.close()
        raise RunDirError(f"another posttrain run (pid {owner}) is writing to {out}; wait for "
                          "it or choose another out_dir") from None
    f.seek(0)
    f.truncate()
    f.write(str(os.getpid()))
    f.flush()
    return f


def config_changes(saved: Path, config: dict[str, Any]) -> list[str]:
    """Dotted keys whose values differ between the run's saved config and ``config``, but for
    ``RESUMABLE`` ones (none when nothing was saved). The saved config is read as this
    version reads it, so a run an older posttrain started (nulls now shown as the values they
    meant, keys of task families it did not use) resumes; a key it lacks (a newer
    posttrain's) counts as changed only when ``config`` sets it away from its default."""
    if not saved.is_file():
        return []
    old = yaml.safe_load(saved.read_text()) or {}
    try:  # as this version reads it: its defaults shown, other members' keys dropped
        old = RunConfig.model_validate(old).model_dump(mode="json")
    except ValueError:
        pass  # compared as written
    defaults = RunConfig().model_dump(mode="json")
    return [k for k in _diff(old, config, defaults)
            if not any(k == r or k.startswith(f"{r}.") for r in RESUMABLE)]


def _diff(a: Any, b: Any, default: Any, prefix: str = "") -> list[str]:
    if isinstance(a, dict) and isinstance(b, dict):
        defaults = default if isinstance(default, dict) else {}
        return [d for k in sorted(set(a) | set(b), key=str)
                for d in _diff(a.get(k, defaults.get(k)), b.get(k), defaults.get(k),
                               f"{prefix}{k}.")]
    return [] if a == b else [prefix.rstrip(".")]


def record_sizes(out: Path) -> dict[str, int]:
    """The byte length of each record in ``out`` now."""
    return {name: (out / name).stat().st_size for name in RECORDS if (out / name).is_file()}


def truncate_records(out: Path, sizes: dict[str, int]) -> None:
    """Cut each record back to its length in ``sizes`` (a checkpoint's); a record written
    after that checkpoint was taken is removed."""
    for name in RECORDS:
        path = out / name
        if path.is_file() and name in sizes:
            os.truncate(path, sizes[name])
        elif path.is_file():
            path.unlink()


def clear_records(out: Path) -> None:
    """A fresh run's records start empty."""
    for name in (*RECORDS, "summary.json", *PLOTS):
        (out / name).unlink(missing_ok=True)
