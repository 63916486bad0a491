"""``posttrain serve --record FILE``: every session's episode reaches ``FILE`` (JSONL), and a
server that is killed loses at most a few seconds of the sessions still open.

A session **ends** when its agent posts its reward or after ``idle_s`` without a call; its
episode is then appended to ``FILE`` and the session forgotten (a later call with its key
starts a new session, recorded as another episode). Every ``every_s`` seconds the sessions
still open are written to ``FILE.open`` (replaced whole, atomically). When the server stops
(SIGINT or SIGTERM) every open session is appended and ``FILE.open`` removed; after a
SIGKILL, a crash or an out-of-memory kill, the next ``Recorder`` on ``FILE`` first appends
what ``FILE.open`` holds, but for the sessions that ended after that snapshot was taken (each
snapshot episode carries ``FILE``'s size then: the episodes appended since are its ends).
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
from pathlib import Path

from posttrain.serve.sessions import Sessions
from posttrain.types import Episode, read_episodes, write_episodes

logger = logging.getLogger(__name__)
OFFSET = "record_offset"  # a snapshot episode's: FILE's size when the snapshot was taken


class RecordError(ValueError):
    """A record file that cannot be written."""


def checked_record(path: Path) -> Path:
    """``path`` if a record can be appended there and its snapshot written beside it;
    ``RecordError`` says why not, at start rather than when the first session is due. A file
    is created beside it and removed (``os.access`` passes ``/proc/x`` as root), and the path,
    if it exists, must be a regular file (``/dev/full`` opens and then fails every write)."""
    if path.is_dir():
        raise RecordError(f"--record {path} is a directory; give a file")
    if not path.parent.is_dir():
        raise RecordError(f"--record {path}: the directory {path.parent} does not exist")
    if path.exists() and not path.is_file():
        raise RecordError(f"--record {path} is not a regular file")
    probe = path.with_name(f".{path.name}.{os.getpid()}.probe")
    try:
        with open(probe, "wb") as f:
            f.write(b"\n")
            f.flush()
            os.fsync(f.fileno())
        probe.unlink()
        if path.exists():
            open(path, "ab").close()  # noqa: SIM115 - opened to check, nothing written
    except OSError as e:
        with contextlib.suppress(OSError):
            probe.unlink()
        raise RecordError(f"--record {path} cannot be written ({e.strerror or e})") from None
    return path


class Recorder:
    """Records ``sessions`` into ``path`` as the module docstring says; a context manager
    (its thread runs inside the ``with``, the open sessions are written at its end)."""

    def __init__(self, path: Path, sessions: Sessions, every_s: float = 10.0,
                 idle_s: float = 300.0) -> None:
        self.path, self.sessions = checked_record(Path(path)), sessions
        self.snapshot_path = self.path.with_name(self.path.name + ".open")
        self.every_s, self.idle_s = every_s, idle_s
        self.written = 0  # episodes appended
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="posttrain-record", daemon=True)
        self._snapshot: dict[str, int] = {}

    def recover(self) -> int:
        """Append the sessions a killed server left open in ``FILE.open`` (but those it
        appended to ``FILE`` after that snapshot); how many."""
        if not self.snapshot_path.is_file():
            return 0
        episodes = list(read_episodes(self.snapshot_path))
        offset = min((e.meta.pop(OFFSET, 0) for e in episodes), default=0)
        ended = {e.meta.get("session") for e in
                 (read_episodes(self.path, offset) if self.path.exists() else [])}
        kept = [e for e in episodes if e.meta.get("session") not in ended]
        for e in kept:
            e.meta["recovered"] = True
        self._append(kept)
        self.snapshot_path.unlink()
        return len(kept)

    def end(self, key: str) -> None:
        """End session ``key``: its episode is appended now."""
        if (episode := self.sessions.end(key)) is not None:
            self._append([episode])

    def tick(self) -> None:
        """End the idle sessions, then write the open ones to ``FILE.open`` if they changed."""
        for key in self.sessions.idle(self.idle_s):
            self.end(key)
        state = self.sessions.activity()
        if state == self._snapshot:
            return
        with self._lock:  # no session is appended between the offset and the snapshot
            offset = self.path.stat().st_size if self.path.exists() else 0
            episodes = [e for k, calls in state.items() if calls and (e := self._episode(k))]
        for e in episodes:
            e.meta[OFFSET] = offset
        tmp = self.snapshot_path.with_name(self.snapshot_path.name + ".tmp")
        write_episodes(tmp, episodes)
        os.replace(tmp, self.snapshot_path)
        self._snapshot = state

    def _episode(self, key: str) -> Episode | None:
        try:
            return self.sessions.episode(key)
        except (KeyError, ValueError):  # ended meanwhile, or no call yet
            return None

    def _append(self, episodes: list[Episode]) -> None:
        with self._lock:
            self.written += write_episodes(self.path, episodes, append=True)

    def _run(self) -> None:
        """Tick every ``every_s`` seconds until the ``with`` ends; a tick that fails (a full
        disk) is logged and the next one tries again: the recorder never stops."""
        while not self._stop.wait(self.every_s):
            try:
                self.tick()
            except Exception as e:  # noqa: BLE001 - the record's thread must go on
                logger.warning("recording to %s failed: %s: %s", self.path, type(e).__name__, e)

    def __enter__(self) -> Recorder:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        for key in self.sessions.keys():
            self.end(key)
        self.snapshot_path.unlink(missing_ok=True)
