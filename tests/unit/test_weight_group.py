"""``WeightGroup``: weights broadcast bucket by bucket between two processes arrive bit for bit
(every dtype, scalars, a tensor larger than a bucket), and a peer that never joins or dies
mid-stream is a ``WeightSyncError`` naming the step, after the group's timeout, not a hang."""

import io
import multiprocessing

import pytest
import torch

from posttrain.cluster.processes import free_port
from posttrain.cluster.weight_group import WeightGroup
from posttrain.types.errors import WeightSyncError

SPAWN = multiprocessing.get_context("spawn")


def weights():
    g = torch.Generator().manual_seed(0)
    return [("embed", torch.randn(50, 8, generator=g)), ("scale", torch.tensor(2.5)),
            ("steps", torch.arange(5, dtype=torch.int64)),
            ("half", torch.randn(7, generator=g).to(torch.bfloat16)),
            ("big", torch.randn(300, generator=g)), ("flag", torch.tensor([True, False]))]


def receiver(port: int, queue, stop_after: int | None, device: str = "cpu") -> None:
    if device == "cuda":
        torch.cuda.set_device(1)  # NCCL: a device a rank
    group = WeightGroup("127.0.0.1", port, 1, device=device, timeout_s=60)
    got = []
    for name, tensor in group.receive():
        got.append((name, tensor.cpu().clone()))
        if stop_after is not None and len(got) == stop_after:
            return  # the process ends mid-stream
    buffer = io.BytesIO()  # bytes: a tensor in a queue would be shared memory of this process
    torch.save(got, buffer)
    queue.put(buffer.getvalue())


def peer(stop_after=None, device="cpu"):
    port, queue = free_port(), SPAWN.Queue()
    process = SPAWN.Process(target=receiver, args=(port, queue, stop_after, device))
    process.start()
    return port, queue, process


@pytest.mark.parametrize("bucket_bytes", [1, 256, 1 << 20], ids=["a-tensor-a-bucket",
                                                                  "a-few-a-bucket", "one-bucket"])
def test_weights_arrive_bit_for_bit_in_any_bucket_size(bucket_bytes):
    port, queue, process = peer()
    sent = WeightGroup("127.0.0.1", port, 0, timeout_s=60).send(weights(), bucket_bytes)
    got = torch.load(io.BytesIO(queue.get(timeout=30)))
    process.join(timeout=30)
    assert [n for n, _ in got] == [n for n, _ in weights()]
    for (_, a), (_, b) in zip(got, weights()):
        assert a.dtype == b.dtype and a.shape == b.shape and torch.equal(a, b)
    payload = sum(t.numel() * t.element_size() for _, t in weights())
    assert payload <= sent < payload + 64 * len(weights())  # data plus alignment padding


def test_a_peer_that_never_joins_is_an_error_after_the_timeout():
    with pytest.raises(WeightSyncError, match="did not form within 2 s"):
        WeightGroup("127.0.0.1", free_port(), 0, timeout_s=2)


def test_a_peer_that_dies_mid_stream_is_an_error_naming_the_step():
    port, _, process = peer(stop_after=1)
    group = WeightGroup("127.0.0.1", port, 0, timeout_s=60)  # a dead peer is seen at once
    big = [(f"w{i}", torch.zeros(1 << 18)) for i in range(8)]  # 1 MiB a bucket
    with pytest.raises(WeightSyncError, match=r"weight broadcast \((header|metadata|bucket)"):
        group.send(big, bucket_bytes=1)
    process.join(timeout=30)


@pytest.mark.gpu
@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="NCCL puts each rank on a GPU")
def test_weights_broadcast_over_nccl_arrive_bit_for_bit():
    port, queue, process = peer(device="cuda")
    torch.cuda.set_device(0)
    WeightGroup("127.0.0.1", port, 0, device="cuda", timeout_s=60).send(weights(), 256)
    got = torch.load(io.BytesIO(queue.get(timeout=60)))
    process.join(timeout=60)
    assert all(torch.equal(a, b) for (_, a), (_, b) in zip(got, weights()))
