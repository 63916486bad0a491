"""A user's reward function runs in a worker process of its own, so that a call that hangs
costs one timeout per batch and never keeps the run alive.

``RewardWorker(path, timeout_s)`` scores a batch of ``Sample``s: the worker (``python -m
posttrain.rewards.reward_worker PATH``, a plain child, like math-verify's: a ``multiprocessing`` one
would import the caller's main script again) loads the function by its dotted path and sends each
call's value back as it ends. When the batch outlives ``timeout_s`` the worker is killed and the
samples not scored yet are missing, with that reason; the next batch starts a new worker. A worker
exits when its parent does (stdin closes, or a watchdog sees the parent gone), and the parent kills
its workers at exit, so a stuck call never delays the end of a run. Each worker leads a process
group of its own, and a kill ends the group: the programs a reward function started go with it.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
import weakref
from collections.abc import Sequence
from multiprocessing.connection import Connection

from posttrain.rewards.user_reward import Missing, Sample, UserCalls, Value

STARTUP_S = 120.0  # the worker importing posttrain and the user's module
_WORKERS: weakref.WeakSet[RewardWorker] = weakref.WeakSet()


class RewardWorker:
    """One function's worker process, started on first use and after a kill; batches from
    several threads take turns."""

    def __init__(self, path: str, timeout_s: float = 30.0) -> None:
        self.path, self.timeout_s = path, timeout_s
        self._lock = threading.Lock()
        self._process: subprocess.Popen | None = None
        self._send: Connection | None = None
        self._receive: Connection | None = None
        _WORKERS.add(self)

    def __call__(self, samples: Sequence[Sample]) -> list[Value]:
        values: list[Value | None] = [None] * len(samples)
        with self._lock:
            self._submit(list(samples))
            deadline = time.monotonic() + self.timeout_s
            while any(v is None for v in values):
                try:
                    if not self._receive.poll(max(0.0, deadline - time.monotonic())):
                        self.stop()
                        return _missing(values, f"not scored: the batch took over "
                                                f"reward.timeout_s={self.timeout_s:g} s")
                    indices, got = self._receive.recv()
                except (EOFError, OSError):  # the function ended the worker (os._exit, a crash)
                    code = self.stop()
                    return _missing(values, f"the reward worker exited with code {code}")
                for i, v in zip(indices, got):
                    values[i] = v
        return values

    def _submit(self, samples: list[Sample]) -> None:
        """Send a batch, starting the worker first when none runs (or it died since)."""
        if self._process is not None:
            try:
                self._send.send(samples)
                return
            except OSError:  # it exited between batches
                self.stop()
        self._start()
        self._send.send(samples)

    def _start(self) -> None:
        down_r, down_w = os.pipe()  # parent -> worker
        up_r, up_w = os.pipe()  # worker -> parent
        self._process = subprocess.Popen(
            [sys.executable, "-m", "posttrain.rewards.reward_worker", self.path, str(down_r),
             str(up_w), str(os.getpid())], pass_fds=(down_r, up_w), stdin=subprocess.DEVNULL,
            start_new_session=True)
        os.close(down_r)
        os.close(up_w)
        self._send = Connection(down_w, readable=False)
        self._receive = Connection(up_r, writable=False)
        ready = self._receive.poll(STARTUP_S) and self._receive.recv()
        if ready != "ready":
            self.stop()
            raise RuntimeError(f"the reward worker for {self.path} did not start: "
                               f"{ready or f'no answer in {STARTUP_S:g} s'}")

    def stop(self) -> int | None:
        """Kill the worker (if any); its exit code."""
        if self._process is None:
            return None
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self._process.pid, signal.SIGKILL)  # the worker and what it started
        code = self._process.wait()
        self._send.close()
        self._receive.close()
        self._process = self._send = self._receive = None
        return code


def _missing(values: list[Value | None], why: str) -> list[Value]:
    return [Missing(why) if v is None else v for v in values]


@atexit.register
def _stop_all() -> None:
    for worker in list(_WORKERS):
        worker.stop()


def serve(path: str, receive: Connection, send: Connection, parent: int) -> None:
    """The worker: load ``path``, say ``ready``, then score each batch received, sending
    ``(indices, values)`` as its calls end, until the parent closes the pipe or is gone."""
    from posttrain.config.extension import load_extension

    def orphaned() -> None:
        while os.getppid() == parent:
            time.sleep(0.5)
        os.killpg(0, signal.SIGKILL)  # its group: itself and the programs its calls started

    threading.Thread(target=orphaned, daemon=True).start()
    try:
        calls = UserCalls(load_extension("reward", path))
    except Exception as e:
        send.send(f"{type(e).__name__}: {e}")
        return
    send.send("ready")
    while True:
        try:
            samples = receive.recv()
        except EOFError:
            return
        calls.run(samples, lambda indices, values: send.send((indices, values)))


if __name__ == "__main__":
    _path, _down, _up, _parent = sys.argv[1:]
    serve(_path, Connection(int(_down), writable=False), Connection(int(_up), readable=False),
          int(_parent))
