"""The ASGI app (FastAPI) of the Tinker API under ``/api/v1``. Submitting calls answer at once
with a ``request_id``; ``retrieve_future`` holds the poll up to ``POLL_S`` seconds for the
result, then answers ``try_again``. Forward-backward and sampling results are protobuf, the
rest JSON. A failed request's result is ``{"error", "category"}`` (``user`` for bad input).
A result is dropped ``FETCHED_KEPT_S`` after its first fetch; a finished session's training
clients (adapters and optimizer states) are dropped when its last request has run. Heartbeats
and telemetry are accepted and not kept."""

from __future__ import annotations

import asyncio
import itertools
import uuid

from fastapi import FastAPI
from fastapi import Request as HttpRequest
from fastapi.responses import JSONResponse, Response

from posttrain.tinker_api import wire
from posttrain.tinker_api.adapters import LoraSpec
from posttrain.tinker_api.checkpoints import CheckpointError
from posttrain.tinker_api.losses import BadRequest
from posttrain.tinker_api.requests import Requests
from posttrain.tinker_api.scoring import Asked
from posttrain.tinker_api.service import SampleRequest, Service

POLL_S = 20.0
FETCHED_KEPT_S = 120.0  # a result after its first fetch
USER_ERRORS = (BadRequest, CheckpointError, wire.WireError, KeyError, ValueError)
# what the SDK reads first: plain httpx, no chunking of forward-backward batches
CLIENT_CONFIG = {"pjwt_auth_enabled": False, "use_pyqwest_transport": False,
                 "proto_compress_fwdbwd": False, "parallel_fwdbwd_chunks": False,
                 "fwdbwd_max_chunk_len": 1_000_000, "fwdbwd_max_chunk_bytes_count": 2**40}


def new_model_id(body: dict) -> str:
    """A new training client's id, as the SDK assumes it (``<session>:train:<n>``)."""
    return f"{body['session_id']}:train:{body['model_seq_id']}"


def create_app(service: Service, api_key: str | None = None) -> FastAPI:
    """With ``api_key``, a request without that ``X-API-Key`` is refused (401)."""
    app, requests = FastAPI(title="posttrain tinker-serve"), Requests()
    # unique across restarts: checkpoints under tinker://<session>:train:<n>/ outlive a server
    sessions = (f"session-{uuid.uuid4().hex[:12]}" for _ in itertools.count())
    api = "/api/v1"

    def future(rid: str, **extra) -> dict:
        return {"request_id": rid, **extra}

    def sample_all(batch: list[SampleRequest]) -> list:
        """Concurrent sample requests, sampled together, as the SDK's protobuf answers."""
        return [outcome if isinstance(outcome, Exception) else wire.sample_response(*outcome)
                for outcome in service.sample_all(batch)]

    async def refused(request: HttpRequest, exc: Exception) -> JSONResponse:
        return JSONResponse({"detail": f"{type(exc).__name__}: {exc}"}, status_code=400)

    for error in USER_ERRORS:  # bad input is the client's 400, not a 500 it would retry
        app.add_exception_handler(error, refused)

    @app.middleware("http")
    async def authorised(request: HttpRequest, call_next):
        if api_key is not None and request.headers.get("x-api-key") != api_key:
            return JSONResponse({"detail": "a missing or wrong X-API-Key"}, status_code=401)
        return await call_next(request)

    @app.post(api + "/client/config")
    async def client_config(request: HttpRequest) -> dict:
        return CLIENT_CONFIG

    @app.post(api + "/client/dynamic_config")
    async def dynamic_config(request: HttpRequest) -> dict:
        return {}

    @app.post(api + "/create_session")
    async def create_session(request: HttpRequest) -> dict:
        return {"session_id": next(sessions), "type": "create_session"}

    @app.post(api + "/session_heartbeat")
    async def heartbeat(request: HttpRequest) -> dict:
        return {"type": "session_heartbeat"}

    @app.post(api + "/telemetry")
    async def telemetry(request: HttpRequest) -> dict:
        return {"status": "accepted"}

    @app.post(api + "/sessions/{session_id}/finish")
    async def finish(session_id: str) -> dict:
        requests.submit(lambda: service.finish(session_id))  # after what the session sent
        return {}

    @app.get(api + "/healthz")
    async def healthz() -> dict:
        return {"status": "ok"}

    @app.get(api + "/get_server_capabilities")
    async def capabilities() -> dict:
        return {"supported_models": [{"model_name": service.name, "trainable": True,
                                      "sampleable": True}]}

    @app.post(api + "/create_model")
    async def create_model(request: HttpRequest) -> dict:
        body = await request.json()
        model_id = new_model_id(body)
        lora = body.get("lora_config") or {}
        spec = LoraSpec(**{"seed": body["model_seq_id"],  # a rerun draws the same adapter
                           **{k: lora[k] for k in ("rank", "seed", "train_attn", "train_mlp",
                                                    "train_unembed") if lora.get(k) is not None}})
        return future(requests.submit(lambda: service.create_model(
            model_id, body.get("base_model"), spec, body.get("user_metadata"))),
            model_id=model_id)

    # the REST client's listing (runs.py): answered at once, from the checkpoint directory
    @app.get(api + "/training_runs")
    async def training_runs(limit: int = 20, offset: int = 0) -> dict:
        return service.runs.runs(limit, offset)

    @app.get(api + "/training_runs/{model_id}")
    async def training_run(model_id: str) -> dict:
        return service.runs.run(model_id)

    @app.get(api + "/training_runs/{model_id}/checkpoints")
    async def checkpoints(model_id: str) -> dict:
        service.runs.run(model_id)  # a KeyError for a run that is not here
        return {"checkpoints": service.runs.checkpoints_of(model_id), "cursor": None}

    @app.delete(api + "/training_runs/{model_id}/checkpoints/{checkpoint_id:path}")
    async def delete_checkpoint(model_id: str, checkpoint_id: str) -> dict:
        service.runs.delete(model_id, checkpoint_id)
        return {}

    @app.post(api + "/weights_info")
    async def weights_info(request: HttpRequest) -> dict:
        return service.runs.weights_info((await request.json())["tinker_path"])

    @app.post(api + "/get_info")
    async def get_info(request: HttpRequest) -> dict:
        return service.info((await request.json())["model_id"])

    @app.post(api + "/forward_backward")
    async def forward_backward(request: HttpRequest) -> dict:
        if request.headers.get("content-encoding"):
            raise wire.WireError("compressed bodies are not taken (client/config says so)")
        fb = wire.parse_forward_backward(await request.body())

        def run() -> bytes:
            logprobs, metrics = service.pool.forward_backward(
                fb.model_id, fb.data(), fb.loss_fn, fb.config, fb.forward_only)
            return wire.forward_backward_output(logprobs, metrics)
        return future(requests.submit_ordered(fb.model_id, fb.seq_id, run))

    @app.post(api + "/optim_step")
    async def optim_step(request: HttpRequest) -> dict:
        body = await request.json()
        params, model_id = body.get("adam_params"), body["model_id"]

        def run() -> dict:
            if params is None:  # refused in its turn: the client's next requests still run
                raise BadRequest("this server's optimizer is AdamW (adam_params)")
            return {"metrics": service.pool.optim_step(model_id, **params),
                    "type": "optim_step"}
        return future(requests.submit_ordered(model_id, body["seq_id"], run))

    @app.post(api + "/save_weights_for_sampler")
    async def save_for_sampler(request: HttpRequest) -> dict:
        body = await request.json()
        model_id = body["model_id"]
        if body.get("path"):
            run = lambda: service.save(model_id, "sampler_weights", body["path"])  # noqa: E731
        else:
            run = lambda: {"sampling_session_id": service.snapshot(model_id)}  # noqa: E731
        return future(requests.submit_ordered(model_id, body["seq_id"], run))

    @app.post(api + "/save_weights")
    async def save_weights(request: HttpRequest) -> dict:
        body = await request.json()
        model_id = body["model_id"]
        return future(requests.submit_ordered(model_id, body["seq_id"], lambda: service.save(
            model_id, "weights", body["path"], overwrite=body.get("overwrite", True))))

    @app.post(api + "/load_weights")
    async def load_weights(request: HttpRequest) -> dict:
        body = await request.json()
        if "model_id" in body:  # a training client's load_state
            model_id = body["model_id"]
            return future(requests.submit_ordered(model_id, body["seq_id"], lambda: service.load(
                model_id, body["path"], bool(body.get("optimizer")))))
        model_id = new_model_id(body)
        return future(requests.submit(lambda: service.load(
            model_id, body["path"], bool(body.get("optimizer")), session_model=True,
            base_model=body.get("base_model"))), model_id=model_id)

    @app.post(api + "/create_sampling_session")
    async def create_sampling_session(request: HttpRequest) -> dict:
        body = await request.json()
        session = service.sampling_session(body.get("model_path"), body.get("base_model"))
        return {"sampling_session_id": session, "type": "create_sampling_session"}

    @app.get(api + "/samplers/{session}")
    async def sampler(session: str) -> dict:
        if session not in service.samplers:
            raise KeyError(f"no sampling session {session!r}")
        return {"sampler_id": session, "base_model": service.name,
                "model_path": service.samplers[session]}

    @app.post(api + "/asample")
    async def asample(request: HttpRequest) -> dict:
        body = await request.json()
        prompt = [t for chunk in body["prompt"]["chunks"] for t in chunk.get("tokens", [])]
        if any(chunk.get("type", "encoded_text") != "encoded_text"
               for chunk in body["prompt"]["chunks"]):
            raise wire.WireError("this server samples from text prompts")
        n = int(body.get("num_samples", 1))
        request = SampleRequest(body["sampling_session_id"], prompt, n, service.sampling(
            len(prompt), body.get("sampling_params") or {}), Asked.of(body, len(prompt)))
        rid = requests.submit_batched(request, sample_all)
        return future(rid, sample_sequence_ids=[f"{rid}-{i}" for i in range(n)])

    @app.post(api + "/retrieve_future")
    async def retrieve_future(request: HttpRequest) -> Response:
        rid = (await request.json())["request_id"]
        if rid not in requests.results:
            return JSONResponse({"detail": f"no request {rid!r}"}, status_code=404)
        try:
            result = await asyncio.wait_for(asyncio.shield(
                asyncio.wrap_future(requests.results[rid])), POLL_S)
        except asyncio.TimeoutError:
            return JSONResponse({"type": "try_again", "request_id": rid,
                                 "queue_state": "active"})
        except Exception as exc:
            result = {"error": f"{type(exc).__name__}: {exc}",
                      "category": "user" if isinstance(exc, USER_ERRORS) else "server"}
        # fetched: kept a while for a client that polls again after a transport error
        asyncio.get_running_loop().call_later(FETCHED_KEPT_S, requests.results.pop, rid, None)
        if isinstance(result, bytes):
            return Response(result, media_type="application/x-protobuf")
        return JSONResponse(result)

    app.state.requests = requests
    return app

