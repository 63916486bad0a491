"""The part of the bridge protocol (``posttrain.envs.libraries.bridge``) every runner shares,
standard library only: the command line, a stdout that carries the protocol alone, and the
``serve`` loop that plays the requests it reads concurrently.

A runner calls ``main(argv, usage, list_tasks, serve)`` with its two modes:
``list_tasks(spec, out)`` writes one task a line to ``out``; ``serve(spec, out)`` sets its
library up and hands ``answer_requests(play, out)`` its ``play(request) -> reply`` coroutine.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import sys
import threading


async def answer_requests(play, out) -> None:
    """Read ``{"n", ...}`` request lines from stdin until it closes, play each at once (in
    this event loop) and write ``{"n", **reply}`` as it finishes; an exception is that
    request's ``{"n", "error"}``, not the loop's end."""
    loop, requests = asyncio.get_running_loop(), asyncio.Queue()

    def read() -> None:  # stdin, in a thread: the event loop stays free for the episodes
        for line in sys.stdin:
            loop.call_soon_threadsafe(requests.put_nowait, json.loads(line))
        loop.call_soon_threadsafe(requests.put_nowait, None)

    async def answer(request: dict) -> None:
        try:
            reply = await play(request)
        except Exception as exc:  # the episode's error, not the worker's end
            reply = {"error": f"{type(exc).__name__}: {exc}"}
        out.write(json.dumps({"n": request["n"], **reply}) + "\n")
        out.flush()

    threading.Thread(target=read, daemon=True).start()
    running = set()
    while (request := await requests.get()) is not None:
        running.add(task := asyncio.create_task(answer(request)))
        task.add_done_callback(running.discard)
    await asyncio.gather(*running)


def main(argv: list[str], usage: str, list_tasks, serve) -> None:
    """``RUNNER tasks SPEC`` or ``RUNNER serve SPEC``, with stdout kept for the protocol:
    whatever the library prints goes to stderr."""
    if len(argv) != 2 or argv[0] not in ("tasks", "serve"):
        raise SystemExit(usage)
    spec = json.loads(argv[1])
    out = os.fdopen(os.dup(sys.stdout.fileno()), "w")  # the protocol's own stdout
    with contextlib.redirect_stdout(sys.stderr):
        os.dup2(sys.stderr.fileno(), sys.stdout.fileno())  # and a library's prints too
        if argv[0] == "tasks":
            list_tasks(spec, out)
        else:
            asyncio.run(serve(spec, out))
