"""Tinker's protobuf messages (the SDK's own generated ``tinker_public_pb2``) to and from
tensors: a ``ForwardBackwardRequest`` in, a ``ForwardBackwardOutput`` or a ``SampleResponse``
out. Arrays travel as little-endian raw bytes; a ``BatchedTensor`` concatenates its datums'
arrays, ``offsets`` the byte offset of each (``num_datums + 1`` of them)."""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import torch

from posttrain.tinker_api.scoring import Scores

DTYPES = {1: np.float32, 2: np.int64, 3: np.int32}  # tinker_public.DType


def _pb():
    from tinker.proto import tinker_public_pb2

    return tinker_public_pb2


class WireError(ValueError):
    """A request the protocol cannot carry (an unknown dtype, an image chunk, ...)."""


@dataclass
class Datum:
    tokens: list[int]  # the model input, text chunks joined
    inputs: dict[str, torch.Tensor]  # loss_fn_inputs


@dataclass
class ForwardBackward:
    """A parsed request; ``data()`` converts its datums (a ``WireError`` for what this server
    does not take: raised in the request's turn, so the client's next requests still run)."""

    model_id: str
    seq_id: int
    loss_fn: str
    config: dict[str, float | str]
    forward_only: bool
    message: object  # the ForwardBackwardRequest

    def data(self) -> list[Datum]:
        return [Datum(_tokens(d.model_input),
                      {k: _tensor(v) for k, v in d.loss_fn_inputs.items()})
                for d in self.message.data]


def _tensor(t) -> torch.Tensor:
    if t.dtype not in DTYPES:
        raise WireError(f"tensor dtype {t.dtype} is not supported (float32, int64, int32)")
    dtype, shape = DTYPES[t.dtype], tuple(t.shape)
    if t.WhichOneof("encoding") == "sparse_csr":
        csr = t.sparse_csr
        values = torch.from_numpy(np.frombuffer(csr.values, dtype).copy())
        crow = torch.from_numpy(np.frombuffer(csr.crow_indices, np.int64).copy())
        col = torch.from_numpy(np.frombuffer(csr.col_indices, np.int64).copy())
        return torch.sparse_csr_tensor(crow, col, values, size=shape).to_dense()
    return torch.from_numpy(np.frombuffer(t.dense, dtype).copy()).reshape(shape)


def _tokens(chunks) -> list[int]:
    out: list[int] = []
    for chunk in chunks:
        if chunk.WhichOneof("chunk") != "encoded_text":
            raise WireError(f"a {chunk.WhichOneof('chunk')} chunk: this server takes text")
        out += np.frombuffer(chunk.encoded_text.tokens, np.int32).tolist()
    return out


def parse_forward_backward(body: bytes) -> ForwardBackward:
    from google.protobuf.message import DecodeError

    request = _pb().ForwardBackwardRequest()
    try:
        request.ParseFromString(body)
    except DecodeError as exc:
        raise WireError(f"not a ForwardBackwardRequest: {exc}") from None
    config: dict[str, float | str] = dict(request.loss_fn_config)
    for key, value in request.loss_fn_config_v2.items():
        config[key] = getattr(value, value.WhichOneof("value") or "number")
    return ForwardBackward(request.model_id, request.seq_id, request.loss_fn, config,
                           request.forward_only, request)


def forward_backward_output(logprobs: Sequence[torch.Tensor],
                            metrics: Mapping[str, float]) -> bytes:
    """Each datum's ``logprobs`` (float32 ``[T]``, or ``[T, K]`` for K targets a position):
    one ``ArrayRecord`` per run of datums of one trailing shape, in order."""
    pb = _pb()
    arrays = [lp.detach().to("cpu", torch.float32).numpy() for lp in logprobs]
    records = []
    for trailing, run in itertools.groupby(arrays, key=lambda a: a.shape[1:]):
        run = list(run)
        offsets = np.cumsum([0] + [a.nbytes for a in run], dtype=np.int64)
        record = pb.ArrayRecord(type_tag="ArrayRecord", num_datums=len(run))
        record.fields["logprobs"].CopyFrom(pb.BatchedTensor(
            data=b"".join(a.tobytes() for a in run), offsets=offsets.tobytes(),
            dtype=pb.DTYPE_FLOAT32, trailing_shape=list(trailing)))
        records.append(record)
    out = pb.ForwardBackwardOutput(loss_fn_output_type="ArrayRecord", loss_fn_outputs=records)
    for key, value in metrics.items():
        out.metrics[key] = float(value)
    return out.SerializeToString()


def sample_response(sequences: Sequence[tuple[list[int], list[float], bool]],
                    scores: Scores) -> bytes:
    """``sequences``: ``(tokens, logprobs, stopped)`` (``stopped`` False: the length limit);
    ``scores``: what the request asked besides (``scoring``)."""
    pb = _pb()

    def topk(rows) -> object:
        ids, lps = rows
        return pb.TopkLogprobs(token_ids=np.ascontiguousarray(ids, np.int32).tobytes(),
                               logprobs=np.ascontiguousarray(lps, np.float32).tobytes(),
                               k=ids.shape[1], length=ids.shape[0])

    out = pb.SampleResponse(sequences=[pb.SampledSequence(
        stop_reason=pb.STOP_REASON_STOP if stopped else pb.STOP_REASON_LENGTH,
        tokens=np.asarray(tokens, np.int32).tobytes(),
        logprobs=np.asarray(logprobs, np.float32).tobytes())
        for tokens, logprobs, stopped in sequences])
    for sequence, rows in zip(out.sequences, scores.topk_samples or ()):
        sequence.topk_sampled_logprobs.CopyFrom(topk(rows))
    if scores.prompt_logprobs is not None:
        out.prompt_logprobs = np.asarray(scores.prompt_logprobs, np.float32).tobytes()
    if scores.topk_prompt is not None:
        out.topk_prompt_logprobs.CopyFrom(topk(scores.topk_prompt))
    if scores.targets is not None:
        out.target_prompt_logprobs.CopyFrom(dense(scores.targets, np.float32))
    if scores.alt_tokens is not None:
        tokens, logprobs = scores.alt_tokens
        out.prompt_alt_tokens.tokens.CopyFrom(dense(tokens, np.int64))
        out.prompt_alt_tokens.logprobs.CopyFrom(dense(logprobs, np.float32))
    return out.SerializeToString()


def dense(array: np.ndarray, dtype) -> object:
    """A dense ``Tensor`` message of ``array`` (float32 or int64)."""
    pb = _pb()
    return pb.Tensor(dense=np.ascontiguousarray(array, dtype).tobytes(), shape=list(array.shape),
                     dtype=pb.DTYPE_FLOAT32 if dtype == np.float32 else pb.DTYPE_INT64)
