"""Run the app on a real ASGI server (uvicorn): in the foreground (``posttrain serve``) or in
a background thread for as long as a ``with`` block lasts (tests, trainers)."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator

from fastapi import FastAPI


@contextlib.contextmanager
def running(app: FastAPI, host: str = "127.0.0.1", port: int = 0,
            timeout_s: float = 30.0) -> Iterator[str]:
    """Serve ``app`` in a thread; yields its ``http://host:port/v1`` base URL (``port`` 0: a
    free one) and stops the server at exit."""
    import uvicorn

    server = uvicorn.Server(uvicorn.Config(app, host=host, port=port, log_level="warning",
                                           lifespan="off"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + timeout_s
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError(f"the server on {host}:{port} did not start")
        time.sleep(0.01)
    bound = server.servers[0].sockets[0].getsockname()[1]
    try:
        yield f"http://{host}:{bound}/v1"
    finally:
        server.should_exit = True
        thread.join(timeout=timeout_s)
