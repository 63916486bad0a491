"""The ASGI app (FastAPI): OpenAI's ``/v1/models``, ``/v1/chat/completions`` and
``/v1/responses`` and Anthropic's ``/v1/messages`` in front of a ``Completer``, each request in
the session its API key names (``Authorization: Bearer``, ``x-api-key``, or an ``X-Session-Id``
header), and each session's recorded trace at ``/v1/sessions/{key}/episode``.

With ``api_key`` every request must carry it (``SECRET``, or ``SECRET:<anything>`` to name a
session of its own): the completion routes and the session routes alike (401 otherwise).

Every refusal is a 4xx in the error format of the API asked (Anthropic's under ``/v1/messages``,
OpenAI's elsewhere): a body that is not JSON (or nested too deeply), over ``max_body_bytes``
(413), a field out of range, an unknown model (404), a tool whose parameters are not JSON
Schema, a conversation longer than the context window, a missing, wrong or unknown key (401), an
unknown session (404), an unknown route (404). A refused request starts no session.
"""

from __future__ import annotations

import hmac
import json
import uuid

import anyio
from fastapi import FastAPI
from fastapi import Request as HttpRequest
from fastapi.responses import JSONResponse, StreamingResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from posttrain.serve import anthropic_format, openai_format, responses_format
from posttrain.serve.batching import EngineBusy
from posttrain.serve.completion import Completer
from posttrain.serve.recording import Recorder
from posttrain.serve.requests import RequestError
from posttrain.serve.sessions import Sessions, UnknownSession
from posttrain.types.jsonl import nesting_depth

MAX_BODY_BYTES = 32 * 2**20


class Unauthorized(Exception):
    """A request without the server's API key."""


class NoSuchSession(KeyError):
    """A session route for a key that has no session."""


class TooLarge(Exception):
    """A request body over the server's limit."""


def credential(request: HttpRequest) -> str:
    """The request's API key (``x-api-key``, else its bearer token; "" without)."""
    auth = request.headers.get("authorization", "")
    return request.headers.get("x-api-key") or (
        auth[7:].strip() if auth.lower().startswith("bearer ") else "")


def session_key(request: HttpRequest, sessions: Sessions) -> str:
    """The session a request belongs to: ``X-Session-Id``, else its API key. A server that
    serves only the sessions it issued (a trainer's) takes the API key when the
    ``X-Session-Id`` is none of them: a harness that names its own sessions (verifiers'
    does) on a key a trainer issued."""
    named = request.headers.get("x-session-id")
    if named and not sessions.open_sessions and not sessions.has(named):
        named = None
    key = named or credential(request)
    if not key:
        raise UnknownSession("")
    return key


MAX_JSON_DEPTH = 128  # objects and arrays within one another; chat bodies use a dozen


async def _json(request: HttpRequest, limit: int) -> dict:
    if int(request.headers.get("content-length") or 0) > limit:
        raise TooLarge
    raw = bytearray()
    async for chunk in request.stream():
        raw += chunk
        if len(raw) > limit:
            raise TooLarge
    try:
        body = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:  # ValueError: an integer of 4,300+ digits
        raise RequestError(f"the request body is not valid JSON: {exc}") from None
    except RecursionError:
        raise RequestError("the request body is nested too deeply") from None
    if nesting_depth(body) > MAX_JSON_DEPTH:  # whatever the interpreter's recursion limit
        raise RequestError("the request body is nested too deeply")
    if not isinstance(body, dict):
        raise RequestError("the request body must be a JSON object")
    return body


def create_app(completer: Completer, sessions: Sessions, model_name: str,
               any_model: bool = False, recorder: Recorder | None = None,
               api_key: str | None = None, max_body_bytes: int = MAX_BODY_BYTES) -> FastAPI:
    """``any_model``: answer whatever model a request names (a training server, where the
    agent's own configuration names some other model); ``recorder``: a posted reward ends
    its session into the record (``recording``)."""
    app = FastAPI(title="posttrain serve", docs_url=None, redoc_url=None, openapi_url=None)
    stored = responses_format.Conversations()
    # each waiting request holds a thread until its batch is done: enough for the batcher's
    # largest batch (anyio's default, 40, would cap every batch there)
    threads = anyio.CapacityLimiter(completer.batcher.max_rows)

    async def complete(model: str, req, key: str):
        """``completer.complete(req)`` in session ``key`` (in a thread); ``model`` must be
        served here."""
        if model != model_name and not any_model:
            raise RequestError(f"model {model!r} is not served here; this server serves "
                               f"{model_name!r}", "model", "model_not_found")
        return await anyio.to_thread.run_sync(completer.complete, req, sessions.trace(key),
                                              limiter=threads)

    def refusal(request: HttpRequest, status: int, message: str, kind: str,
                param: str | None = None, code: str | None = None) -> JSONResponse:
        if request.url.path.startswith("/v1/messages"):
            return JSONResponse(anthropic_format.error_body(status, message), status)
        return JSONResponse(openai_format.error_body(message, kind, param, code), status)

    @app.exception_handler(RequestError)
    async def refused(request: HttpRequest, exc: RequestError) -> JSONResponse:
        status = 404 if exc.code == "model_not_found" else 400
        kind = "not_found_error" if status == 404 else "invalid_request_error"
        return refusal(request, status, str(exc), kind, exc.param, exc.code)

    def refuse(exc_type: type[Exception], status: int, kind: str, code: str | None,
               message) -> None:
        """Answer ``exc_type`` with a ``status`` refusal saying ``message(exc)``."""
        async def handler(request: HttpRequest, exc: Exception) -> JSONResponse:
            return refusal(request, status, message(exc), kind, code=code)
        app.add_exception_handler(exc_type, handler)

    ended = " (an ended session is in the record file)" if recorder is not None else ""
    refuse(UnknownSession, 401, "authentication_error", "invalid_api_key", lambda exc: (
        f"no session was issued for key {exc.args[0]!r}" if exc.args[0]
        else "no API key: send one as a bearer token, x-api-key or X-Session-Id"))
    refuse(Unauthorized, 401, "authentication_error", "invalid_api_key", lambda _: "this server "
           "needs its API key (as a bearer token or x-api-key: the key, or key:<session>)")
    refuse(NoSuchSession, 404, "not_found_error", None,
           lambda exc: f"no session {exc.args[0]!r}{ended}")
    refuse(TooLarge, 413, "invalid_request_error", "request_too_large",
           lambda _: f"the request body is over {max_body_bytes} bytes")
    refuse(Exception, 500, "server_error", None, lambda exc: f"the server failed: {exc!r}")
    refuse(EngineBusy, 503, "server_error", "engine_busy", str)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: HttpRequest, exc: StarletteHTTPException) -> JSONResponse:
        what = "not_found_error" if exc.status_code == 404 else "invalid_request_error"
        return refusal(request, exc.status_code,
                       f"{request.method} {request.url.path}: {exc.detail}", what)

    def authorised(request: HttpRequest) -> None:
        """The request carries ``api_key`` (alone or as ``key:<session>``), compared in
        constant time."""
        if api_key is None:
            return
        given, secret = credential(request).encode(), api_key.encode()
        named = given[len(secret):len(secret) + 1] in (b"", b":")  # alone, or key:<session>
        if not (hmac.compare_digest(given[:len(secret)], secret) and named):
            raise Unauthorized

    async def call(request: HttpRequest) -> tuple[dict, str]:
        """The body and session key of a completion call (checked before its session is
        looked up or started: a refused request starts none)."""
        authorised(request)
        key = session_key(request, sessions)
        return await _json(request, max_body_bytes), key

    def existing(request: HttpRequest, key: str):
        authorised(request)
        try:
            return sessions.get(key)
        except UnknownSession:
            raise NoSuchSession(key) from None

    @app.get("/v1/models")
    async def models(request: HttpRequest) -> dict:
        authorised(request)
        return {"object": "list", "data": [{"id": model_name, "object": "model", "created": 0,
                                             "owned_by": "posttrain"}]}

    @app.post("/v1/chat/completions")
    async def chat_completions(request: HttpRequest):
        body, key = await call(request)
        chat, req = openai_format.parse_chat(body)
        prompt_tokens, sampled = await complete(chat.model, req, key)
        if chat.stream:
            return StreamingResponse(
                openai_format.completion_chunks(chat, sampled, prompt_tokens, completer.tokenizer),
                media_type="text/event-stream")
        return openai_format.completion_response(chat, sampled, prompt_tokens, completer.tokenizer)

    @app.post("/v1/messages")
    async def messages(request: HttpRequest):
        body, key = await call(request)
        msg, req = anthropic_format.parse_messages(body)
        prompt_tokens, (sampled,) = await complete(msg.model, req, key)
        if msg.stream:
            return StreamingResponse(anthropic_format.message_events(msg, sampled, prompt_tokens),
                                     media_type="text/event-stream")
        return anthropic_format.message_response(msg, sampled, prompt_tokens)

    @app.post("/v1/responses")
    async def responses(request: HttpRequest):
        body, key = await call(request)
        rb, req = responses_format.parse_responses(body, stored, key)
        prompt_tokens, (sampled,) = await complete(rb.model, req, key)
        response_id = f"resp_{uuid.uuid4().hex}"
        stored.put(key, response_id, responses_format.conversation_after(req.messages, sampled))
        whole = responses_format.response_body(rb, sampled, prompt_tokens, response_id)
        if rb.stream:
            return StreamingResponse(responses_format.response_events(whole),
                                     media_type="text/event-stream")
        return whole

    @app.post("/v1/sessions/{key}/reward")
    async def reward(key: str, request: HttpRequest) -> dict:
        existing(request, key)
        value = (await _json(request, max_body_bytes)).get("reward")
        if not isinstance(value, int | float) or isinstance(value, bool):
            raise RequestError("the body must be {\"reward\": <a finite number>}", "reward")
        try:
            sessions.set_reward(key, float(value))
        except OverflowError:  # an integer past float's range
            raise RequestError("reward is too large for a float", "reward") from None
        except ValueError as exc:  # not finite
            raise RequestError(str(exc), "reward") from None
        if recorder is not None:
            recorder.end(key)  # the agent is done: its episode goes to the record now
        return {"session": key, "reward": float(value)}

    @app.get("/v1/sessions/{key}/episode")
    async def episode(key: str, request: HttpRequest) -> dict:
        trace = existing(request, key)
        try:
            return trace.episode(session=key).to_dict()
        except ValueError as exc:
            raise RequestError(str(exc), "key") from None

    return app
