"""``tinker_api.requests``: batched requests queued one after another run as one call, in
their turn among the others, and each gets its own outcome."""

import threading

import pytest

from posttrain.tinker_api.requests import Requests


def test_requests_queued_together_run_as_one_batch_in_their_turn():
    queue, ran = Requests(), []

    def run_all(items):
        ran.append(list(items))
        return [ValueError(f"no {i}") if i < 0 else i * 10 for i in items]
    gate = threading.Event()
    queue.submit(gate.wait)  # the worker is busy while the requests come in
    first = [queue.submit_batched(i, run_all) for i in (1, -2, 3)]
    between = queue.submit(lambda: ran.append("between"))
    after = [queue.submit_batched(i, run_all) for i in (4, 5)]
    gate.set()
    assert [queue.results[r].result(timeout=10) for r in (first[0], first[2], *after)] \
        == [10, 30, 40, 50]
    with pytest.raises(ValueError, match="no -2"):  # its own error, not its batch's
        queue.results[first[1]].result()
    queue.results[between].result()
    assert ran == [[1, -2, 3], "between", [4, 5]]  # the request between them splits them
    queue.close()
