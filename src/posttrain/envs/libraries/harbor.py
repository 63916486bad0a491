"""Harbor tasks (the task format of the harbor framework, Terminal-Bench's successor;
``task.name: harbor``), played in posttrain's sandbox instead of a container.

A task is a folder: ``instruction.md`` (the prompt), ``task.toml`` (``[verifier]
timeout_sec``), ``environment/Dockerfile`` and its build context, ``tests/test.sh`` (the
verifier) and, optionally, ``solution/solve.sh``. The Dockerfile is read, not built: the host
system stands in for its ``FROM`` image, ``WORKDIR`` (default ``/app``) is where the sandbox
puts the workspace, ``COPY``/``ADD`` of the build context fill it, and ``LABEL``, ``CMD``,
``ENTRYPOINT``, ``EXPOSE``, ``HEALTHCHECK``, ``STOPSIGNAL`` and ``MAINTAINER`` are ignored. A
task whose image needs building (``RUN``, ``ENV``, ``ARG``, ``USER``, ...), a
``docker-compose.yaml`` environment, or a copy to outside the working directory is left out,
with the reason.

The model works with one tool, ``bash`` (each call a fresh shell in the working directory:
files persist between calls, ``cd`` and variables do not). When it answers without a call,
``tests/`` appears read-only at ``/tests`` and ``bash /tests/test.sh`` runs there, as Harbor
runs it; what it writes to ``/logs/verifier/reward.txt`` (a number) is the reward part
``harbor``, or ``/logs/verifier/reward.json``'s ``reward`` entry (else the mean of its
entries, all of which go to the episode's ``meta``). No reward file scores 0.
"""

from __future__ import annotations

import json
import math
import os
import random
import shlex
import shutil
import stat
import tempfile
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import ClassVar

import tomllib
from pydantic import Field

from posttrain.config.family import member
from posttrain.config.sections.task import Models, TaskFamily, TaskParts
from posttrain.envs.base import SplitTasks, tool_turns
from posttrain.harness import Tool, ToolRegistry
from posttrain.sandbox import Sandbox, SandboxError, SandboxLimits
from posttrain.sandbox.runner import jail_path

PART = "harbor"
LIMITS = SandboxLimits(cpu_s=20, memory_mb=1024, wall_s=30.0, tmp_mb=256,
                       max_output_bytes=64 * 1024)
IGNORED = {"FROM", "LABEL", "CMD", "ENTRYPOINT", "EXPOSE", "HEALTHCHECK", "STOPSIGNAL",
           "MAINTAINER"}
MAX_VERIFIER_S = 600.0


class UnsupportedTask(ValueError):
    """A Harbor task this adapter cannot play without a container (the reason)."""


def dockerfile_lines(text: str) -> list[tuple[str, list[str]]]:
    """``(INSTRUCTION, arguments)`` of a Dockerfile: comments dropped, ``\\`` continuations
    joined, flags (``--chown=...``) removed from the arguments."""
    joined, out = text.replace("\\\n", " "), []
    for line in joined.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        word, _, rest = line.partition(" ")
        args = [a for a in shlex.split(rest) if not a.startswith("--")]
        out.append((word.upper(), args))
    return out


def inside(path: str, workdir: str) -> str | None:
    """``path`` (absolute, or relative to ``workdir``) relative to ``workdir``; None when
    outside it."""
    full = PurePosixPath(workdir, path)
    if ".." in full.parts:
        return None
    if full == PurePosixPath(workdir):
        return "."
    if PurePosixPath(workdir) not in full.parents:
        return None
    return str(full.relative_to(workdir))


@dataclass
class HarborTask:
    """One Harbor task folder, read: its instruction, working directory, initial files
    (relative path -> text), verifier timeout and folder."""

    name: str
    instruction: str
    workdir: str
    files: dict[str, str]
    verifier_timeout_s: float
    folder: Path

    @property
    def reference(self) -> str:
        return self.name

    def messages(self) -> list[dict]:
        return [{"role": "user", "content": self.instruction.strip()}]

    @classmethod
    def load(cls, folder: Path, name: str | None = None) -> HarborTask:
        """The task in ``folder``, named ``name`` (default: the folder's name)."""
        env = folder / "environment"
        if (env / "docker-compose.yaml").exists() or (env / "docker-compose.yml").exists():
            raise UnsupportedTask("a docker-compose environment")
        if not (folder / "tests" / "test.sh").is_file():
            raise UnsupportedTask("no tests/test.sh")
        config = tomllib.loads((folder / "task.toml").read_text())
        workdir, placed = "/app", {}  # absolute path in the image -> text
        dockerfile = env / "Dockerfile"
        for word, args in dockerfile_lines(dockerfile.read_text() if dockerfile.exists() else ""):
            if word not in IGNORED and not args:
                raise UnsupportedTask(f"{word} without arguments")
            if word == "WORKDIR":
                workdir = str(PurePosixPath(workdir, args[0]))
            elif word in ("COPY", "ADD"):
                placed |= copied(env, args, workdir)
            elif word not in IGNORED:
                raise UnsupportedTask(f"its image needs building ({word})")
        try:
            jail_path(workdir)
        except ValueError as e:
            raise UnsupportedTask(f"WORKDIR {workdir}: {e}") from None
        if PurePosixPath(workdir).parts[1] in ("tests", "logs"):
            raise UnsupportedTask(f"WORKDIR {workdir}: /tests and /logs are the verifier's")
        files = {}
        for path, text in placed.items():
            relative = inside(path, workdir)
            if relative is None or relative == ".":
                raise UnsupportedTask(f"COPY to {path}, outside the working directory {workdir}")
            files[relative] = text
        timeout = float(config.get("verifier", {}).get("timeout_sec", LIMITS.wall_s))
        return cls(name or folder.name, (folder / "instruction.md").read_text(), workdir, files,
                   min(timeout, MAX_VERIFIER_S), folder)


def copied(context: Path, args: list[str], workdir: str) -> dict[str, str]:
    """The files a ``COPY src... dest`` puts in the image, by absolute path (``dest``
    relative to the ``WORKDIR`` then in force): a file copied to a path ending in ``/``, to
    ``.``, to the working directory, or with other sources goes into that directory."""
    *sources, dest = args
    if not sources:
        raise UnsupportedTask(f"COPY {dest} names no source")
    target = PurePosixPath(workdir, dest)
    if ".." in target.parts:
        raise UnsupportedTask(f"COPY to {dest}: no .. in a destination")
    files, root = {}, context.resolve()

    def within(path: Path) -> bool:
        return root in (path, *path.parents)

    for source in sources:
        path = (context / source).resolve()
        if not within(path) or not path.exists():
            raise UnsupportedTask(f"COPY of {source}, not in the build context")
        if path.is_dir():
            for f in sorted(p for p in path.rglob("*") if p.is_file()):
                if not within(f.resolve()):  # a link out of the context, as Docker refuses
                    raise UnsupportedTask(f"COPY of {source}: {f.name} links outside the "
                                          "build context")
                files[str(target / f.relative_to(path))] = f.read_text()
        else:
            into_dir = dest.endswith("/") or dest == "." or len(sources) > 1 \
                or target == PurePosixPath(workdir)
            files[str(target / path.name if into_dir else target)] = path.read_text()
    return files


MAX_REWARD_BYTES = 64 * 1024


def read_plain(directory: Path, name: str) -> str | None:
    """The text of ``directory/name`` if it is a regular file, not a link (the sandbox wrote
    it: a link would read a host file as the trainer), at most ``MAX_REWARD_BYTES``."""
    try:
        fd = os.open(directory / name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    with open(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        return f.read(MAX_REWARD_BYTES).decode("utf-8", "replace")


def reward_of(logs: Path) -> tuple[float, dict]:
    """The reward a verifier left in ``logs/verifier`` (``reward.txt``, else ``reward.json``,
    as Harbor reads them) and what to keep of it in ``meta``."""
    verifier = logs / "verifier"
    text, entries = read_plain(verifier, "reward.txt"), read_plain(verifier, "reward.json")
    try:
        if text is not None:
            value, kept = float(text.strip()), {}
        elif entries is not None:
            parsed = {str(k): float(v) for k, v in json.loads(entries).items()}
            value = parsed.get("reward", sum(parsed.values()) / max(len(parsed), 1))
            kept = {"harbor_rewards": parsed}
        else:
            return 0.0, {"harbor_error": "the verifier wrote no reward"}
    except (ValueError, TypeError, AttributeError, OverflowError, RecursionError):
        return 0.0, {"harbor_error": "the verifier's reward file is not a number (or an "
                                     "object of numbers)"}
    return (value if math.isfinite(value) else 0.0), kept


class HarborEnv:
    """One episode's sandbox (the task's working directory, ``/logs`` and an empty ``/tests``
    that the verifier's files fill once the episode ends), its ``bash`` tool and verdict."""

    def __init__(self, task: HarborTask) -> None:
        self.task, self._sandbox, self._mounts, self.meta = task, None, None, {}
        self.tools = ToolRegistry([Tool(self._bash_tool(), LIMITS.wall_s + 5)])

    @property
    def sandbox(self) -> Sandbox:
        if self._sandbox is None:
            self._mounts = Path(tempfile.mkdtemp(prefix="posttrain-harbor-"))
            tests, logs = self._mounts / "tests", self._mounts / "logs"
            tests.mkdir(mode=0o755)
            (logs / "verifier").mkdir(parents=True)
            (logs / "agent").mkdir()
            os.chmod(self._mounts, 0o755)
            try:
                self._sandbox = Sandbox(self.task.files, LIMITS, isolation="namespaces",
                                        at=self.task.workdir,
                                        mounts={"/tests": (tests, False), "/logs": (logs, True)})
            except BaseException:
                self.close()
                raise
        return self._sandbox

    def _bash_tool(self):
        def bash(command: str) -> str:
            """Run a shell command in the task's working directory.

            Args:
                command: The command line (bash).
            """
            try:
                r = self.sandbox.run_shell(f"bash -c {shlex.quote(command)}")
            except (OSError, SandboxError, ValueError) as e:
                return f"error: {e}"
            timed = " (timed out)" if r.timed_out else ""
            return f"{r.stdout}{r.stderr}[exit code {r.returncode}{timed}]"

        return bash

    def verify(self) -> float:
        """Run the task's tests as Harbor does; the reward (``meta`` gets the details)."""
        sandbox = self.sandbox
        verifier = self._mounts / "logs" / "verifier"  # what the agent left there is not a reward
        shutil.rmtree(verifier)
        verifier.mkdir()
        os.chmod(verifier, 0o777)
        # links stay links (read inside the jail, never copied from the host), and only the
        # copies are made readable to the jail's user
        shutil.copytree(self.task.folder / "tests", self._mounts / "tests", symlinks=True,
                        dirs_exist_ok=True)
        for d, _, names in os.walk(self._mounts / "tests"):
            for path in (d, *(os.path.join(d, n) for n in names)):
                if not os.path.islink(path):
                    os.chmod(path, 0o755)
        limits = SandboxLimits(cpu_s=max(1, math.ceil(self.task.verifier_timeout_s)),
                               memory_mb=LIMITS.memory_mb, tmp_mb=LIMITS.tmp_mb,
                               wall_s=self.task.verifier_timeout_s)
        run = sandbox.run_shell("bash /tests/test.sh", limits=limits)
        reward, self.meta = reward_of(self._mounts / "logs")
        self.meta["harbor_test_exit"] = run.returncode
        return reward

    def verdict(self, final: str) -> dict[str, float]:
        try:
            return {PART: self.verify()}
        except Exception as e:  # whatever the episode left: it failed (a verdict never raises)
            self.meta = {"harbor_error": f"the verifier could not run: {type(e).__name__}: {e}"}
            return {PART: 0.0}

    def info(self) -> dict:
        return self.meta

    def close(self) -> None:
        if self._sandbox is not None:
            self._sandbox.close()
            self._sandbox = None
        if self._mounts is not None:
            shutil.rmtree(self._mounts, ignore_errors=True)
            self._mounts = None


class HarborTasks(SplitTasks):
    """The Harbor tasks under ``directory`` (folders with a ``task.toml``, at any depth), each
    named by its path under ``directory`` (``dataset/task``; the folder's own name when it is
    ``directory``), split by a hash of their names; ``skipped``: name -> why a task is left
    out."""

    def __init__(self, directory: str | Path, eval_fraction: float = 0.1) -> None:
        root = Path(directory)
        folders = sorted(p.parent for p in root.rglob("task.toml"))
        if not folders:
            raise ValueError(f"no Harbor task (a folder with task.toml) under {directory}")
        self.tasks, self.skipped = {}, {}
        for folder in folders:
            name = folder.relative_to(root).as_posix() if folder != root else folder.name
            try:
                task = HarborTask.load(folder, name)
            except UnsupportedTask as e:
                self.skipped[name] = str(e)
                continue
            except (OSError, UnicodeError, ValueError, TypeError, KeyError, IndexError,
                    AttributeError) as e:  # a task folder that does not parse
                self.skipped[name] = f"unreadable: {type(e).__name__}: {e}"
                continue
            self.tasks[task.name] = task
        if not self.tasks:
            raise ValueError(f"no Harbor task under {directory} runs without a container: "
                             + "; ".join(f"{n}: {why}" for n, why in self.skipped.items()))
        self.splits = self.split_by_id(self.tasks, eval_fraction)

    def make_env(self, reference: str) -> HarborEnv:
        return HarborEnv(self.tasks[reference])

    def sft_conversation(self, task: HarborTask, error_rate: float,
                         rng: random.Random) -> list[dict]:
        """The reference solution (``solution/solve.sh``) as one ``bash`` call, its output
        from a sandbox, then Done; with probability ``error_rate`` Done without it."""
        solution = task.folder / "solution" / "solve.sh"
        if not solution.is_file():
            raise ValueError(f"Harbor task {task.name} has no solution/solve.sh to learn from")
        if rng.random() < error_rate:
            return task.messages() + [{"role": "assistant", "content": "Done."}]
        script = solution.read_text()
        env = HarborEnv(task)
        try:
            output = env.tools.tools["bash"].fn(script)
        finally:
            env.close()
        return task.messages() + tool_turns([("bash", {"command": script})], [output]) + [
            {"role": "assistant", "content": "Done."}]


@member("task", "harbor")
class HarborConfig(TaskFamily):
    """``harbor``: the Harbor tasks under ``dir`` (a task folder or a folder of them), each
    worked in the sandbox with a ``bash`` tool and scored by its ``tests/test.sh`` (reward
    part ``harbor``, verifier ``env``). Needs user namespaces (docs/agents.md, Sandbox)."""

    SCORED_PARTS: ClassVar[tuple[str, ...]] = (PART,)
    dir: str = Field(description="a Harbor task folder, or a folder of them")

    def build(self, seed: int, models: Models) -> TaskParts:
        tasks = HarborTasks(self.dir, self.eval_fraction)
        return TaskParts(tasks, HarborEnv(next(iter(tasks.tasks.values()))).tools,
                         tasks.make_env)
