"""``posttrain serve``: a model behind the OpenAI- and Anthropic-compatible endpoints,
recording every session (docs/serve.md)."""

from __future__ import annotations

import contextlib
import ipaddress
import signal
import socket
from collections.abc import Iterator
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


def free_port_or_fail(host: str, port: int) -> None:
    """Fail (before any URL is printed) when ``host:port`` cannot be listened on."""
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError as e:
            fail(f"cannot listen on {host}:{port}: {e.strerror} (another server there? pick "
                 "another --port)")


def loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


@contextlib.contextmanager
def graceful_stop() -> Iterator[list[int]]:
    """SIGTERM and SIGINT stop the server inside the ``with`` gracefully (uvicorn stops on
    them, then raises them again: here they end nothing more), so what follows the server
    (writing the record) runs; yields the signals received."""
    received: list[int] = []
    before = {sig: signal.signal(sig, lambda s, _: received.append(s))
              for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield received
    finally:
        for sig, handler in before.items():
            signal.signal(sig, handler)


Host = Annotated[str, typer.Option(help="interface to listen on")]
Port = Annotated[int, typer.Option(help="port to listen on")]


def serve(
    model: Annotated[Path, typer.Argument(help="a from_pretrained model directory to serve")],
    host: Host = "127.0.0.1",
    port: Port = 8000,
    name: Annotated[str | None, typer.Option(
        help="the model name clients ask for (default: the directory's name)")] = None,
    max_tokens: Annotated[int, typer.Option(
        help="completion length when a request does not say")] = 256,
    record: Annotated[Path | None, typer.Option(
        help="JSONL file each session's episode is appended to when it ends")] = None,
    record_every: Annotated[float, typer.Option(
        help="seconds between writes of the open sessions to RECORD.open")] = 10.0,
    session_idle_s: Annotated[float, typer.Option(
        help="with --record: a session without a call this long has ended")] = 300.0,
    api_key: Annotated[str | None, typer.Option(
        envvar="POSTTRAIN_API_KEY", help="the key every request must carry (KEY, or "
        "KEY:<session>); needed to listen beyond loopback safely")] = None,
    tool_format: Annotated[str, typer.Option(
        help="auto (from the chat template) | hermes | qwen3_coder | llama3_json")] = "auto",
    engine_name: EngineName = "torch",
    device: EngineDevice = None,
) -> None:
    """Serve a model behind OpenAI-compatible endpoints, recording every session.

    Each API key is a session; its calls are recorded token for token and bridged across
    turns (docs/serve.md). Stop with Ctrl-C or SIGTERM: every session is kept."""
    import uvicorn

    from posttrain.models import ModelNotFoundError, load_tokenizer
    from posttrain.serve import Completer, Sessions, create_app
    from posttrain.serve.recording import Recorder, RecordError
    from posttrain.serve.tool_formats import FORMATS

    if tool_format != "auto" and tool_format not in FORMATS:
        fail(f"--tool-format: {tool_format!r} is not auto, {', '.join(FORMATS)}")
    sessions = Sessions()
    with fail_on(RecordError):
        recorder = None if record is None else Recorder(record, sessions, record_every,
                                                        session_idle_s)
    free_port_or_fail(host, port)
    if api_key is None and not loopback(host):
        console.print(f"[bold yellow]warning:[/] listening on {host} without --api-key: "
                      "anyone who reaches it can use the model, read every transcript and "
                      "set rewards")
    with fail_on(ModelNotFoundError):
        tokenizer = load_tokenizer(model)
    engine = engine_from_options(engine_name, device, model, "float32", tokenizer)
    completer = Completer(engine, tokenizer, context_window(model) or 4096, max_tokens,
                          tool_format=FORMATS.get(tool_format))
    served = name or model.resolve().name
    app = create_app(completer, sessions, served, recorder=recorder, api_key=api_key)
    with contextlib.ExitStack() as stack:
        if recorder is not None:
            if recovered := recorder.recover():
                console.print(f"appended {recovered} sessions a stopped server left open to "
                              f"{record}")
            stack.enter_context(recorder)
        received = stack.enter_context(graceful_stop())
        console.print(f"serving {served!r} at http://{host}:{port}/v1")
        uvicorn.run(app, host=host, port=port, log_level="warning")
    if recorder is not None:
        console.print(f"recorded {recorder.written} sessions in {record}")
    if received:
        console.print(f"stopped by {signal.Signals(received[-1]).name}")


def tinker_serve(
    model: Annotated[Path, typer.Argument(help="a from_pretrained model directory to train")],
    host: Host = "127.0.0.1",
    port: Port = 8001,
    name: Annotated[str | None, typer.Option(
        help="the base_model name clients ask for (default: the directory's name)")] = None,
    checkpoints: Annotated[Path | None, typer.Option(
        help="directory of the saved states and sampler weights (default: "
             "MODEL/../tinker_checkpoints)")] = None,
    api_key: Annotated[str | None, typer.Option(
        envvar="POSTTRAIN_API_KEY", help="the X-API-Key every request must carry (the SDK "
        "wants it to start with tml-); needed to listen beyond loopback safely")] = None,
    device: Annotated[str, typer.Option(help="cpu, cuda or cuda:N")] = "cpu",
) -> None:
    """Serve the Tinker training API for MODEL: LoRA training clients and samplers.

    The official tinker SDK and its recipes connect with ServiceClient(base_url=...,
    api_key="tml-...") (docs/tinker.md). Stop with Ctrl-C."""
    import uvicorn

    try:
        import tinker  # noqa: F401  (the server speaks the SDK's own protobuf messages)
    except ImportError:
        fail('tinker-serve needs the tinker SDK: pip install -e ".[tinker]"')
    from posttrain.models import ModelNotFoundError
    from posttrain.tinker_api.app import create_app
    from posttrain.tinker_api.service import Service

    free_port_or_fail(host, port)
    if api_key is None and not loopback(host):
        console.print(f"[bold yellow]warning:[/] listening on {host} without --api-key: "
                      "anyone who reaches it can train and sample the model")
    served = name or model.resolve().name
    root = checkpoints or model.resolve().parent / "tinker_checkpoints"
    with fail_on(ModelNotFoundError):
        service = Service(model, served, root, device=device)
    console.print(f"serving {served!r} for Tinker clients at http://{host}:{port} "
                  f"(checkpoints in {root})")
    uvicorn.run(create_app(service, api_key=api_key), host=host, port=port,
                log_level="warning")
