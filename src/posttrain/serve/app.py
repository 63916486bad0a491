"""The ASGI app (FastAPI): OpenAI's ``/v1/models``, ``/v1/chat/completions`` and
``/v1/responses`` and Anthropic's ``/v1/messages`` in front of a ``Completer``, each request
in the session its API key names (``Authorization: Bearer``, ``x-api-key``, or an
``X-Session-Id`` header), and each session's recorded trace at
``/v1/sessions/{key}/episode``.

Every refusal is a 4xx in the error format of the API asked (Anthropic's under
``/v1/messages``, OpenAI's elsewhere): a body that is not JSON, a field out of range, an
unknown model (404), a tool whose parameters are not JSON Schema, a conversation longer than
the context window, a missing or unknown key (401).
"""

from __future__ import annotations

import json
import uuid

import anyio
from fastapi import FastAPI
from fastapi import Request as HttpRequest
from fastapi.responses import JSONResponse, StreamingResponse

from posttrain.serve import anthropic_format
from posttrain.serve.anthropic_format import message_events, message_response, parse_messages
from posttrain.serve.batching import EngineBusy
from posttrain.serve.completion import Completer
from posttrain.serve.openai_format import (
    completion_chunks,
    completion_response,
    error_body,
    parse_chat,
)
from posttrain.serve.requests import RequestError
from posttrain.serve.responses_format import (
    Conversations,
    conversation_after,
    parse_responses,
    response_body,
    response_events,
)
from posttrain.serve.sessions import Sessions, UnknownSession


def session_key(request: HttpRequest) -> str:
    """The session a request belongs to: ``X-Session-Id``, else its API key."""
    auth = request.headers.get("authorization", "")
    key = (request.headers.get("x-session-id") or request.headers.get("x-api-key")
           or (auth[7:].strip() if auth.lower().startswith("bearer ") else ""))
    if not key:
        raise UnknownSession("")
    return key


async def _json(request: HttpRequest) -> dict:
    try:
        body = json.loads(await request.body())
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise RequestError(f"the request body is not valid JSON: {exc}") from None
    if not isinstance(body, dict):
        raise RequestError("the request body must be a JSON object")
    return body


def create_app(completer: Completer, sessions: Sessions, model_name: str,
               any_model: bool = False) -> FastAPI:
    """``any_model``: answer whatever model a request names (a training server, where the
    agent's own configuration names some other model)."""
    app = FastAPI(title="posttrain serve")
    stored = Conversations()
    # each waiting request holds a thread until its batch is done: enough for the batcher's
    # largest batch (anyio's default, 40, would cap every batch there)
    threads = anyio.CapacityLimiter(completer.batcher.max_rows)

    async def complete(req, trace):
        return await anyio.to_thread.run_sync(completer.complete, req, trace,
                                              limiter=threads)

    def refusal(request: HttpRequest, status: int, message: str, kind: str,
                param: str | None = None, code: str | None = None) -> JSONResponse:
        if request.url.path.startswith("/v1/messages"):
            return JSONResponse(anthropic_format.error_body(status, message), status)
        return JSONResponse(error_body(message, kind, param, code), status)

    @app.exception_handler(RequestError)
    async def refused(request: HttpRequest, exc: RequestError) -> JSONResponse:
        status = 404 if exc.code == "model_not_found" else 400
        kind = "not_found_error" if status == 404 else "invalid_request_error"
        return refusal(request, status, str(exc), kind, exc.param, exc.code)

    @app.exception_handler(UnknownSession)
    async def unknown(request: HttpRequest, exc: UnknownSession) -> JSONResponse:
        message = ("no API key: send one as a bearer token, x-api-key or X-Session-Id"
                   if not exc.args[0] else f"no session was issued for key {exc.args[0]!r}")
        return refusal(request, 401, message, "authentication_error", code="invalid_api_key")

    @app.exception_handler(Exception)
    async def failed(request: HttpRequest, exc: Exception) -> JSONResponse:
        return refusal(request, 500, f"the server failed: {exc!r}", "server_error")

    @app.exception_handler(EngineBusy)
    async def busy(request: HttpRequest, exc: EngineBusy) -> JSONResponse:
        return refusal(request, 503, str(exc), "server_error", code="engine_busy")

    def check_model(name: str) -> None:
        if name != model_name and not any_model:
            raise RequestError(f"model {name!r} is not served here; this server serves "
                               f"{model_name!r}", "model", "model_not_found")

    @app.get("/v1/models")
    async def models() -> dict:
        return {"object": "list", "data": [{"id": model_name, "object": "model", "created": 0,
                                             "owned_by": "posttrain"}]}

    @app.post("/v1/chat/completions")
    async def chat_completions(request: HttpRequest):
        trace = sessions.trace(session_key(request))
        chat, req = parse_chat(await _json(request))
        check_model(chat.model)
        prompt_tokens, sampled = await complete(req, trace)
        if chat.stream:
            return StreamingResponse(
                completion_chunks(chat, sampled, prompt_tokens, completer.tokenizer),
                media_type="text/event-stream")
        return completion_response(chat, sampled, prompt_tokens, completer.tokenizer)

    @app.post("/v1/messages")
    async def messages(request: HttpRequest):
        trace = sessions.trace(session_key(request))
        msg, req = parse_messages(await _json(request))
        check_model(msg.model)
        prompt_tokens, (sampled,) = await complete(req, trace)
        if msg.stream:
            return StreamingResponse(message_events(msg, sampled, prompt_tokens),
                                     media_type="text/event-stream")
        return message_response(msg, sampled, prompt_tokens)

    @app.post("/v1/responses")
    async def responses(request: HttpRequest):
        key = session_key(request)
        trace = sessions.trace(key)
        rb, req = parse_responses(await _json(request), stored, key)
        check_model(rb.model)
        prompt_tokens, (sampled,) = await complete(req, trace)
        response_id = f"resp_{uuid.uuid4().hex}"
        stored.put(key, response_id, conversation_after(req.messages, sampled))
        whole = response_body(rb, sampled, prompt_tokens, response_id)
        if rb.stream:
            return StreamingResponse(response_events(whole), media_type="text/event-stream")
        return whole

    @app.post("/v1/sessions/{key}/reward")
    async def reward(key: str, request: HttpRequest) -> dict:
        value = (await _json(request)).get("reward")
        if not isinstance(value, int | float) or isinstance(value, bool):
            raise RequestError("the body must be {\"reward\": <a finite number>}", "reward")
        try:
            sessions.set_reward(key, value)
        except ValueError as exc:  # not finite
            raise RequestError(str(exc), "reward") from None
        return {"session": key, "reward": float(value)}

    @app.get("/v1/sessions/{key}/episode")
    async def episode(key: str) -> dict:
        try:
            return sessions.episode(key).to_dict()
        except ValueError as exc:
            raise RequestError(str(exc), "key") from None

    return app
