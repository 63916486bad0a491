"""Many sessions at once against one server: requests are batched into shared engine calls,
and still every session gets exactly the completions it gets alone, and every session's
recording holds its own conversation only and replays."""

import threading

import openai

from posttrain.engines import TorchEngine
from posttrain.harness import episode_problems
from posttrain.serve import Completer, Sessions, create_app, running

SESSIONS, TURNS = 16, 4


def converse(url: str, key: str) -> list[str]:
    """A session's conversation (its own seeds), returning the replies."""
    client = openai.OpenAI(base_url=url, api_key=key, max_retries=0)
    messages, replies = [], []
    for turn in range(TURNS):
        messages.append({"role": "user", "content": f"{key} turn {turn}"})
        reply = client.chat.completions.create(
            model="tiny", messages=messages, max_tokens=6,
            seed=1000 * int(key.split("-")[1]) + turn).choices[0].message.content
        replies.append(reply)
        messages.append({"role": "assistant", "content": reply})
    return replies


def serve_all(model, tokenizer, concurrent: bool):
    engine = TorchEngine(model, tokenizer.pad_token_id, tokenizer.eos_token_id)
    sessions = Sessions()
    # concurrently, a batch closes when it holds a request of every session (max_rows), as it
    # does at every turn: a session's next request waits for its reply, which its turn's batch
    # brings to all. The window only keeps a lost request from hanging the test.
    completer = Completer(engine, tokenizer, 512, 6, batch_window_s=60 if concurrent else 0.005)
    if concurrent:
        completer.batcher.max_rows = SESSIONS  # before create_app: its threads, one a request
    keys = [f"session-{i}" for i in range(SESSIONS)]
    replies: dict[str, list[str]] = {}
    with running(create_app(completer, sessions, "tiny")) as url:
        if concurrent:
            threads = [threading.Thread(target=lambda k=k: replies.__setitem__(
                k, converse(url, k)), daemon=True) for k in keys]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
        else:
            replies = {k: converse(url, k) for k in keys}
    return replies, sessions, completer.batcher


def test_concurrent_sessions_are_batched_and_each_gets_its_own_answers(model, tokenizer):
    alone, _, one_by_one = serve_all(model, tokenizer, concurrent=False)
    together, sessions, batched = serve_all(model, tokenizer, concurrent=True)
    assert one_by_one.most_rows == 1 and one_by_one.engine_calls == SESSIONS * TURNS
    assert batched.engine_calls == TURNS and batched.most_rows == SESSIONS  # a call a turn
    assert batched.rows == one_by_one.rows == SESSIONS * TURNS
    assert together == alone  # a request's sample depends on its seed, not on its batch
    for i in range(SESSIONS):
        key = f"session-{i}"
        episode = sessions.episode(key)
        assert episode.meta["calls"] == TURNS and episode_problems(episode, tokenizer) == []
        text = "".join(tokenizer.decode(s.token_ids) for s in episode.segments)
        assert f"{key} turn {TURNS - 1}" in text
        assert all(f"session-{j} " not in text for j in range(SESSIONS) if j != i)
