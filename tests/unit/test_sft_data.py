import json

import pytest

from posttrain.data import generate_arithmetic_sft, load_chat_jsonl
from posttrain.data.conversations import batch_indices
from posttrain.envs import ArithmeticTasks


def test_malformed_rows_are_skipped_and_reported(tmp_path):
    good = {"messages": [{"role": "user", "content": "hi"},
                         {"role": "assistant", "content": "yo"}]}
    rows = [json.dumps(good), "{not json", json.dumps({"messages": [{"role": "user"}]}),
            json.dumps({"messages": [{"role": "user", "content": "no answer"}]}), "",
            json.dumps({"text": "x"}), json.dumps(good)]
    path = tmp_path / "d.jsonl"
    path.write_text("\n".join(rows) + "\n")
    data = load_chat_jsonl(path)
    assert len(data.conversations) == 2 and data.skipped_lines == [2, 3, 4, 6]


def test_all_bad_or_missing_raises(tmp_path):
    path = tmp_path / "d.jsonl"
    path.write_text("nope\n")
    with pytest.raises(ValueError, match="no valid row"):
        load_chat_jsonl(path)
    with pytest.raises(FileNotFoundError):
        load_chat_jsonl(tmp_path / "missing.jsonl")


def test_batch_indices_cover_each_epoch_once():
    n, bs = 10, 4
    seen = [i for step in range(5) for i in batch_indices(step, bs, n, seed=1)]
    assert sorted(seen[:10]) == list(range(10)) and sorted(seen[10:20]) == list(range(10))
    assert batch_indices(3, bs, n, 1) == batch_indices(3, bs, n, 1)
    assert seen[:10] != seen[10:20]


def test_generated_sft_data_is_seeded():
    t = ArithmeticTasks(("+",), 2)
    assert generate_arithmetic_sft(t, 5, 0.5, 0).conversations == generate_arithmetic_sft(
        t, 5, 0.5, 0).conversations
