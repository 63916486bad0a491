"""``posttrain view`` over a run as it is written, line by line: every kind of bad line in
``metrics.jsonl`` or ``episodes.jsonl`` (a huge integer, deep nesting, a reward that is no
float, broken JSON, a value that is no object, bytes that are not UTF-8, a line not finished
yet) is skipped with a warning and a count, never a 500 answer, and the good lines written
after it in the same read are all served, the episodes at their right indices; a run folder
that has no metrics yet (only its config, or nothing) opens and waits for them."""

import json
import logging

import pytest
from fastapi.testclient import TestClient

from posttrain.types import Episode, Segment
from posttrain.viewer import create_viewer_app, runs_under

LOCAL = "http://127.0.0.1"
HUGE = "7" * 5000  # past Python's 4,300 digits of int parsing: json.loads raises ValueError
PAST_FLOAT = "1" + "0" * 400  # 1e400 as an integer literal: float() raises OverflowError


def episode_line(tokenizer, reward, step=1, **meta) -> bytes:
    """One ``episodes.jsonl`` line: "What is 1+1?" answered "2", its reward's JSON text
    ``reward`` (any text: it is written as given), ``meta.step`` ``step`` and ``meta``."""
    prompt = tokenizer.encode("What is 1+1?", add_special_tokens=False)
    answer = tokenizer.encode("2", add_special_tokens=False)
    n, m = len(prompt), len(answer)
    episode = Episode([Segment(prompt + answer, [0] * n + [1] * m, [0.0] * n + [-0.5] * m,
                               [-1] * n + [0] * m)], meta={"step": step, **meta})
    return (json.dumps({**episode.to_dict(), "reward": "@"}, separators=(",", ":"))
            .replace('"@"', reward) + "\n").encode()


def bad_episode_lines(tokenizer) -> dict[str, bytes]:
    """What a crash, an edit or another program can leave in ``episodes.jsonl``."""
    return {"a huge integer": episode_line(tokenizer, HUGE),
            "deep nesting": b"[" * 100_000 + b"\n",
            "a reward that is not a number": episode_line(tokenizer, '"high"'),
            "a reward past a float's range": episode_line(tokenizer, PAST_FLOAT),
            "a reward that is NaN": episode_line(tokenizer, "NaN"),
            "a step that is not an integer": episode_line(tokenizer, "0.5", step="two"),
            "a meta nested too deep to show": episode_line(tokenizer, "0.5", deep="@deep")
            .replace(b'"@deep"', b"[" * 300 + b"]" * 300),
            "invalid JSON": b"{oops\n",
            "a JSON value that is not an object": b"[1, 2]\n",
            "bytes that are not UTF-8": b"\xff\xfe{}\n"}


BAD_METRIC_LINES = {"a huge integer": b'{"stage": "rl", "step": ' + HUGE.encode() + b"}\n",
                    "deep nesting": b"[" * 100_000 + b"\n",
                    "invalid JSON": b"{oops\n",
                    "a JSON value that is not an object": b"42\n",
                    "bytes that are not UTF-8": b"\xff\xfe{}\n",
                    "a stage that is not a text": b'{"stage": ["rl"], "step": 1}\n',
                    "a step that is not a number": b'{"stage": "rl", "step": "one"}\n'}


def viewer_of(*runs) -> TestClient:
    """A client of a viewer of ``runs`` that gets a server error as a browser does: a 500."""
    return TestClient(create_viewer_app(runs), base_url=LOCAL, raise_server_exceptions=False)


def append(path, data: bytes) -> None:
    with open(path, "ab") as f:
        f.write(data)


def ok(response) -> dict:
    assert response.status_code == 200, response.text[:300]
    return response.json()


@pytest.fixture
def live(tmp_path, tiny_dir):
    """A run folder being written: its config (which names the model: episodes decode) only."""
    run = tmp_path / "live"
    run.mkdir()
    (run / "config.yaml").write_text(f"model: {{path: {tiny_dir}}}\n")
    return run


def test_bad_episode_lines_are_skipped_and_every_good_line_after_them_is_served(
        live, tokenizer, caplog):
    viewer = viewer_of(live)
    path = live / "episodes.jsonl"
    good = [0.0]  # the good episodes' rewards, in the order written
    append(path, episode_line(tokenizer, "0.0"))
    assert ok(viewer.get("/api/runs/0/episodes"))["total"] == 1
    bad = bad_episode_lines(tokenizer)
    with caplog.at_level(logging.WARNING, logger="posttrain.viewer"):
        for k, kind in enumerate(bad, start=1):  # each between two reads, a good line after it
            append(path, bad[kind] + episode_line(tokenizer, str(k)))
            good.append(float(k))
            page = ok(viewer.get("/api/runs/0/episodes?limit=500"))
            assert [(e["index"], e["reward"]) for e in page["episodes"]] == list(
                enumerate(good)), kind
            assert page["skipped"] == k and len(page["warnings"]) == k, kind
        # a line still being written is not yet a line: no warning, no episode; then it is one
        # (with "messages" that are not a conversation: no question, but an episode)
        whole = episode_line(tokenizer, "0.25", messages=5)
        append(path, whole[:40])
        page = ok(viewer.get("/api/runs/0/episodes?limit=500"))
        assert (page["total"], page["skipped"]) == (len(good), len(bad))
        append(path, whole[40:])
        good.append(0.25)
        page = ok(viewer.get("/api/runs/0/episodes?limit=500"))
    assert [e["reward"] for e in page["episodes"]] == good and page["skipped"] == len(bad)
    # the warnings name each bad line (line 1 is the first good one; a bad and a good a kind)
    assert [w.split(":")[0] for w in page["warnings"]] == [
        f"episodes.jsonl line {2 * k}" for k in range(1, len(bad) + 1)]
    assert "reward" in page["warnings"][2] and "step" in page["warnings"][5]
    logged = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert [m for m in logged if "episodes.jsonl line" in m] == [
        f"{live.name}: {w}" for w in page["warnings"]]
    # each row opens the episode written there (no index shifted past a bad line)
    for index, reward in enumerate(good):
        detail = ok(viewer.get(f"/api/runs/0/episodes/{index}"))
        assert (detail["index"], detail["reward"]) == (index, reward)
        assert "".join(t["text"] for s in detail["segments"] for t in s["tokens"]).endswith("2")


def test_bad_metric_lines_are_skipped_and_every_good_row_after_them_is_served(live):
    viewer = viewer_of(live)
    path = live / "metrics.jsonl"
    served = []
    for k, kind in enumerate(BAD_METRIC_LINES, start=1):
        row = {"stage": "rl", "step": k, "reward": k / 10}
        append(path, BAD_METRIC_LINES[kind] + (json.dumps(row) + "\n").encode())
        got = ok(viewer.get(f"/api/runs/0/metrics?after={len(served)}"))
        served += got["rows"]
        assert got["rows"] == [row] and got["next"] == k, kind
        assert got["skipped"] == k and got["warnings"][-1].startswith(
            f"metrics.jsonl line {2 * k - 1}: "), kind
        assert ok(viewer.get("/api/runs"))["runs"][0]["stages"] == ["rl"], kind
    # a row written with NaN or Infinity (Python's json.dumps writes them) keeps its place
    # and its other values; JSON has neither: they are served as null
    append(path, b'{"stage": "rl", "step": 99, "loss": NaN, "kl": -Infinity, "reward": 1}\n')
    got = ok(viewer.get(f"/api/runs/0/metrics?after={len(served)}"))
    assert got["rows"] == [{"stage": "rl", "step": 99, "loss": None, "kl": None,
                            "reward": 1}]


def test_a_run_folder_without_metrics_yet_opens_and_waits_for_them(tmp_path):
    """A run that has just started holds its config.yaml only (or nothing yet): it is a
    run, alone or among others, and its first metrics show when they land."""
    started, empty, runs = tmp_path / "runs" / "started", tmp_path / "empty", tmp_path / "runs"
    started.mkdir(parents=True)
    empty.mkdir()
    (started / "config.yaml").write_text("stages: [rl]\n")
    (runs / "done").mkdir()
    (runs / "done" / "metrics.jsonl").write_text('{"stage": "sft", "step": 1, "loss": 2.0}\n')
    (runs / "notes").mkdir()  # a folder with no run file in it is not a run among runs
    assert runs_under(runs) == [runs / "done", started]
    assert runs_under(started) == [started] and runs_under(empty) == [empty]
    assert runs_under(tmp_path / "none") == [] and runs_under(started / "config.yaml") == []
    viewer = viewer_of(started, empty)
    listed = ok(viewer.get("/api/runs"))["runs"]
    assert [(r["stages"], r["metrics"]) for r in listed] == [([], False), ([], False)]
    assert ok(viewer.get("/api/runs/1/metrics")) == {"rows": [], "next": 0, "warnings": [],
                                                    "skipped": 0}
    assert ok(viewer.get("/api/runs/1/episodes"))["count"] == 0
    (empty / "metrics.jsonl").write_text('{"stage": "rl", "step": 1, "reward": 0.5}\n')
    assert ok(viewer.get("/api/runs/1/metrics"))["rows"] == [
        {"stage": "rl", "step": 1, "reward": 0.5}]
    assert ok(viewer.get("/api/runs"))["runs"][1]["metrics"] is True
