import json

import pytest

from posttrain.data import generate_arithmetic_sft, load_chat_data
from posttrain.data.conversations import batch_indices
from posttrain.envs import ArithmeticTasks
from posttrain.types import DataError


def test_malformed_rows_are_skipped_and_reported(tmp_path):
    good = {"messages": [{"role": "user", "content": "hi"},
                         {"role": "assistant", "content": "yo"}]}
    rows = [good, {"messages": [{"role": "user"}]},
            {"messages": [{"role": "user", "content": "no answer"}]}, {"text": "x"}, good]
    path = tmp_path / "d.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    data = load_chat_data(path)
    assert len(data.conversations) == 2 and [i for i, _ in data.skipped] == [1, 2, 3]
    assert "needs string content" in data.skipped[0][1]
    assert "no assistant message" in data.skipped[1][1]


def test_unreadable_empty_or_missing_data_is_one_error(tmp_path):
    path = tmp_path / "d.jsonl"
    path.write_text("nope\n")
    with pytest.raises(DataError, match="cannot read SFT data .*d.jsonl.*row 0"):
        load_chat_data(path)
    path.write_text(json.dumps({"messages": [{"role": "user", "content": "x"}]}) + "\n")
    with pytest.raises(DataError, match="holds no usable row .*no assistant message"):
        load_chat_data(path)
    with pytest.raises(DataError, match="does not exist"):
        load_chat_data(tmp_path / "missing.jsonl")


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
