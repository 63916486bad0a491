"""Environments of libraries that own their tasks and their rollout loop (verifiers,
NeMo-Gym), played in a Python of their own: such a library often pins versions of shared
packages (``openai``) that posttrain's cannot share, so a runner script, run by that
interpreter, speaks to posttrain in JSON lines and to the policy through ``posttrain serve``.

    PYTHON RUNNER tasks SPEC   -> stdout: one task a line, {"id", "messages", "answer",
                                  "split" ("train", "eval" or null), "row"}
    PYTHON RUNNER serve SPEC   <- stdin: {"n", "base_url", "api_key", "task": {"messages",
                                  "reference", "row"}} lines; it plays each task through
                                  the server at base_url with that key, concurrently, and
                                  answers {"n", "parts"} (the environment's reward
                                  functions' weighted scores: their sum is its reward) or
                                  {"n", "error"}

``SPEC`` is a JSON object (the environment's id and arguments). A runner imports only the
standard library and its own library. Tasks without a split are split by a hash of their
id. One ``serve`` process plays a run's episodes (``LibraryAgent``: an external agent that
returns reward parts), so the library is imported once.
"""

from __future__ import annotations

import atexit
import contextlib
import itertools
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections import deque
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path

from posttrain.envs.base import SplitTasks, task_payload

RUNNERS = Path(__file__).with_name("runners")


@dataclass(frozen=True)
class LibraryTask:
    """One task of a library's environment: its opening messages (``prompt``, as JSON), the
    ``answer`` as the reference, and the library's own ``row`` (what its runner plays it
    from)."""

    id: str
    prompt: str
    answer: str
    row: dict = field(compare=False, hash=False)

    @property
    def reference(self) -> str:
        return self.answer

    def messages(self) -> list[dict]:
        return json.loads(self.prompt)


class LibraryError(RuntimeError):
    """A runner that failed, or wrote what is not its protocol: the library's environment or
    its installation, named with the runner's own words."""


def runner_command(python: str | None, runner: str, mode: str, spec: dict) -> list[str]:
    return [python or sys.executable, str(RUNNERS / runner), mode, json.dumps(spec)]


def task_of(line: str, number: int) -> tuple[LibraryTask, str | None]:
    try:
        item = json.loads(line)
        messages = item["messages"]
        if not messages or not all(isinstance(m, dict) and "role" in m for m in messages):
            raise ValueError("messages must be a non-empty list of {role, content}")
        answer = item.get("answer")
        task = LibraryTask(str(item["id"]), json.dumps(messages),
                           "" if answer is None else str(answer),
                           item.get("row") or {})
    except (ValueError, KeyError, TypeError) as exc:
        raise LibraryError(f"task line {number} is not a task ({exc}): {line[:200]}") from exc
    split = item.get("split")
    return task, split if split in ("train", "eval") else None


class LibraryTasks(SplitTasks):
    """The tasks a runner lists for ``spec``: each in the split it names (``train`` or
    ``eval``), the others split by a hash of their ids (``eval_fraction``)."""

    def __init__(self, python: str | None, runner: str, spec: dict,
                 eval_fraction: float, timeout_s: float = 600.0) -> None:
        command = runner_command(python, runner, "tasks", spec)
        try:
            done = subprocess.run(command, capture_output=True, encoding="utf-8",
                                  errors="replace", timeout=timeout_s)
        except FileNotFoundError as exc:
            raise LibraryError(f"no Python at {command[0]!r} (task.python)") from exc
        if done.returncode != 0:
            raise LibraryError(f"{runner} could not list the tasks of {spec}: "
                               f"{done.stderr.strip()[-1500:]}")
        lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
        tasks = [task_of(line, i + 1) for i, line in enumerate(lines)]
        if not tasks:
            raise LibraryError(f"{runner} listed no tasks for {spec}")
        hashed = self.split_by_id({t.id: t for t, split in tasks if split is None},
                                  eval_fraction) if any(s is None for _, s in tasks) else {}
        self.splits = {s: [t for t, split in tasks if split == s] + hashed.get(s, [])
                       for s in ("train", "eval")}


class LibraryAgent:
    """An external agent, ``agent(base_url, api_key, task) -> reward parts``, that sends the
    task to the runner's ``serve`` process (started on first use, and again after it died)
    and waits up to ``timeout_s`` for its answer. Thread-safe: the rollout calls it from a
    thread per episode."""

    def __init__(self, python: str | None, runner: str, spec: dict,
                 timeout_s: float = 600.0) -> None:
        self.command, self.timeout_s = runner_command(python, runner, "serve", spec), timeout_s
        self.runner = runner
        self._lock = threading.Lock()
        self._process: subprocess.Popen | None = None
        self._pending: dict[int, Future] = {}
        self._stderr: deque[str] = deque(maxlen=40)
        self._numbers = itertools.count()
        atexit.register(self.close)

    def __call__(self, base_url: str, api_key: str, task) -> dict[str, float]:
        future: Future = Future()
        request = {"base_url": base_url, "api_key": api_key, "task": task_payload(task)}
        with self._lock:
            process = self._started()
            request["n"] = n = next(self._numbers)
            self._pending[n] = future
            try:
                process.stdin.write(json.dumps(request) + "\n")
                process.stdin.flush()
            except OSError:
                self._pending.pop(n, None)
                raise LibraryError(f"{self.runner} stopped: {self._last_words()}") from None
        try:
            reply = future.result(timeout=self.timeout_s)
        except TimeoutError:
            self._pending.pop(n, None)
            raise LibraryError(f"{self.runner} gave no answer in {self.timeout_s:.0f} s") from None
        if "error" in reply:
            raise LibraryError(f"{self.runner}: {reply['error']}")
        return reply["parts"]

    def _started(self) -> subprocess.Popen:
        if self._process is None or self._process.poll() is not None:
            try:
                self._process = subprocess.Popen(
                    self.command, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE, encoding="utf-8", errors="replace", bufsize=1,
                    start_new_session=True)  # its children (tool servers) go with it
            except FileNotFoundError as exc:
                raise LibraryError(f"no Python at {self.command[0]!r} (task.python)") from exc
            pending = self._pending = {}  # this process's requests
            readers = [threading.Thread(target=self._read_replies, daemon=True,
                                        args=(self._process, pending)),
                       threading.Thread(target=self._read_stderr, daemon=True,
                                        args=(self._process,))]
            for reader in readers:
                reader.start()
            threading.Thread(target=self._watch, daemon=True,
                             args=(self._process, pending, readers)).start()
        return self._process

    def _read_replies(self, process: subprocess.Popen, pending: dict[int, Future]) -> None:
        for line in process.stdout:
            try:
                reply = json.loads(line)
                future = pending.pop(reply["n"])
            except (ValueError, KeyError, TypeError):
                continue  # not a reply (the runner's stdout is its protocol only)
            future.set_result(reply)

    def _watch(self, process: subprocess.Popen, pending: dict[int, Future],
               readers: list[threading.Thread]) -> None:
        """When the runner exits, what it was still playing fails with its last words: at
        once, though a child it started may hold its stdout open (its children are
        stopped)."""
        process.wait()
        deadline = time.monotonic() + 2  # its last replies and words, before they are quoted
        for reader in readers:
            reader.join(timeout=max(0.0, deadline - time.monotonic()))
        kill_group(process)
        with self._lock:
            failed = list(pending.values())
            pending.clear()
        for future in failed:
            future.set_exception(LibraryError(f"{self.runner} stopped: {self._last_words()}"))

    def _read_stderr(self, process: subprocess.Popen) -> None:
        for line in process.stderr:
            self._stderr.append(line.rstrip())

    def _last_words(self) -> str:
        return "\n".join(self._stderr)[-1500:] or "no message"

    def close(self) -> None:
        """Stop the runner (a later call starts it again)."""
        process, self._process = self._process, None
        if process is None:
            return
        if process.poll() is None:
            process.stdin.close()
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(timeout=10)
        kill_group(process)


def kill_group(process: subprocess.Popen) -> None:
    """Stop what a runner started (its process group), itself too."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signal.SIGKILL)
