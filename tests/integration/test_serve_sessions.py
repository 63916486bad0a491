"""Many sessions at once against one server: requests are batched into shared engine calls,
and still every session gets exactly the completions it gets alone, and every session's
recording holds its own conversation only and replays."""

import threading

import openai

from posttrain.engines import TorchEngine
from posttrain.harness import episode_problems
from posttrain.serve import Completer, Sessions, create_app, running

SESSIONS, TURNS = 16, 4


def converse(url: str, key: str, barrier: threading.Barrier | None) -> list[str]:
    """A session's conversation (its own seeds), returning the replies."""
    client = openai.OpenAI(base_url=url, api_key=key, max_retries=0)
    messages, replies = [], []
    for turn in range(TURNS):
        messages.append({"role": "user", "content": f"{key} turn {turn}"})
        if barrier is not None and turn == 0:
            barrier.wait()  # every session's first request at the same moment
        reply = client.chat.completions.create(
            model="tiny", messages=messages, max_tokens=6,
            seed=1000 * int(key.split("-")[1]) + turn).choices[0].message.content
        replies.append(reply)
        messages.append({"role": "assistant", "content": reply})
    return replies


def serve_all(model, tokenizer, concurrent: bool):
    engine = TorchEngine(model, tokenizer.pad_token_id, tokenizer.eos_token_id)
    sessions = Sessions()
    completer = Completer(engine, tokenizer, 512, 6, batch_window_s=0.05)
    keys = [f"session-{i}" for i in range(SESSIONS)]
    replies: dict[str, list[str]] = {}
    with running(create_app(completer, sessions, "tiny")) as url:
        if concurrent:
            barrier = threading.Barrier(SESSIONS)
            threads = [threading.Thread(target=lambda k=k: replies.__setitem__(
                k, converse(url, k, barrier))) for k in keys]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
        else:
            replies = {k: converse(url, k, None) for k in keys}
    return replies, sessions, completer.batcher


def test_concurrent_sessions_are_batched_and_each_gets_its_own_answers(model, tokenizer):
    alone, _, one_by_one = serve_all(model, tokenizer, concurrent=False)
    together, sessions, batched = serve_all(model, tokenizer, concurrent=True)
    assert one_by_one.most_rows == 1 and batched.most_rows > 1  # requests shared calls
    assert batched.rows == one_by_one.rows == SESSIONS * TURNS
    assert together == alone  # a request's sample depends on its seed, not on its batch
    for i in range(SESSIONS):
        key = f"session-{i}"
        episode = sessions.episode(key)
        assert episode.meta["calls"] == TURNS and episode_problems(episode, tokenizer) == []
        text = "".join(tokenizer.decode(s.token_ids) for s in episode.segments)
        assert f"{key} turn {TURNS - 1}" in text
        assert all(f"session-{j} " not in text for j in range(SESSIONS) if j != i)
