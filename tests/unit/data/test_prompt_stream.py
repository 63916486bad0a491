"""Prompts streamed from a dataset larger than memory (``task.data.streaming``): one epoch is
the rows the in-memory path holds, in an order drawn from the seed; epochs follow one another
in new orders; bad rows are skipped and reported as in memory; rows are read as they are
drawn, never loaded whole; the step number is the data cursor, so a resumed run draws what an
uninterrupted one did."""

import glob

import datasets
import pytest
from bad_data import write_bad_case, write_jsonl

from posttrain.config.sections.data import DatasetConfig
from posttrain.data.prompt_stream import StreamedDatasetTasks, buffer_shuffled
from posttrain.data.prompt_tasks import DatasetTasks
from posttrain.rollout.async_source import step_groups
from posttrain.rollout.single_turn import seek_step
from posttrain.types.errors import DataError

ROWS = [{"question": f"What is {i}+1?", "answer": i + 1} for i in range(40)]
BAD = [{"question": "", "answer": 0}, {"question": "What is 5+5?", "answer": None}]


def data_cfg(path, **keys):
    keys = {"prompt": "question", "streaming": True, "eval_path": str(path),
            "shuffle_buffer": 8, **keys}
    return DatasetConfig(path=str(path), **keys)


def streamed(path, seed=0, **keys):
    return StreamedDatasetTasks(data_cfg(path, **keys), seed)


def answers(tasks):
    return [int(t.reference) for t in tasks]


def test_one_epoch_is_the_rows_in_memory(tmp_path):
    rows = ROWS[:10] + BAD[:1] + ROWS[10:30] + BAD[1:] + ROWS[30:]
    path = write_jsonl(tmp_path / "d.jsonl", rows)
    stream = streamed(path)
    in_memory = DatasetTasks(data_cfg(path, streaming=False, shuffle_buffer=10_000), 0)
    epoch = stream.sample(40, None)
    def by_answer(tasks):
        return sorted(tasks, key=lambda t: int(t.reference))

    assert by_answer(epoch) == by_answer(in_memory.splits["train"])
    assert sorted(answers(epoch)) == list(range(1, 41))
    assert stream.skipped["train"] == in_memory.skipped["train"] == [
        (10, "the prompt is empty"),
        (31, "its 'answer' cell is empty (the answer column; task.data.answer=null reads no "
             "reference)")]
    assert isinstance(stream.rows, datasets.IterableDataset)


def test_save_to_disk_folders_and_parquet_stream_the_same_rows(tmp_path):
    ds = datasets.Dataset.from_list(ROWS)
    ds.save_to_disk(str(tmp_path / "saved"))
    ds.to_parquet(str(tmp_path / "d.parquet"))
    reference = streamed(write_jsonl(tmp_path / "d.jsonl", ROWS)).sample(60, None)
    for source in ("saved", "d.parquet"):
        got = streamed(tmp_path / source)
        assert isinstance(got.rows, datasets.IterableDataset)
        assert got.sample(60, None) == reference, source


def test_the_order_follows_the_seed(tmp_path):
    path = write_jsonl(tmp_path / "d.jsonl", ROWS)
    seed0 = answers(streamed(path, seed=0).sample(40, None))
    assert seed0 == answers(streamed(path, seed=0).sample(40, None))
    assert seed0 != answers(streamed(path, seed=1).sample(40, None))
    assert seed0 != list(range(1, 41))
    assert answers(streamed(path, shuffle=False, shuffle_buffer=10_000).sample(40, None)) == \
        list(range(1, 41))


def test_the_shuffle_buffer_keeps_every_item_once():
    import random

    out = list(buffer_shuffled(range(100), random.Random(0), 8))
    assert sorted(out) == list(range(100)) and out != list(range(100))
    # an item comes out at most about one buffer earlier than it went in
    assert all(i >= item - 8 for i, item in enumerate(out))


def test_epochs_follow_one_another_in_new_orders(tmp_path):
    path = write_jsonl(tmp_path / "d.jsonl", ROWS[:10] + BAD[:1] + ROWS[10:])
    stream = streamed(path)
    reported = []
    stream.stream.on_first_pass = reported.append
    drawn = answers(stream.sample(100, None))  # two and a half epochs
    epochs = [drawn[:40], drawn[40:80], drawn[80:]]
    assert sorted(epochs[0]) == sorted(epochs[1]) == list(range(1, 41))
    assert epochs[0] != epochs[1] and len(set(epochs[2])) == 20
    assert stream.stream.epoch_length == 40
    assert reported == [[(10, "the prompt is empty")]]  # once, however many epochs
    assert stream.skipped["train"] == [(10, "the prompt is empty")]
    capped = answers(streamed(path, max_rows=12).sample(36, None))
    for e in range(3):  # the first 12 usable rows, in file order, shuffled anew each epoch
        assert sorted(capped[12 * e: 12 * (e + 1)]) == list(range(1, 13))
    assert capped[:12] != capped[12:24]


def test_held_out_rows_are_the_first_usable_ones(tmp_path):
    train = write_jsonl(tmp_path / "train.jsonl", ROWS)
    held = write_jsonl(tmp_path / "held.jsonl", BAD[:1] + ROWS[:30])
    tasks = streamed(train, eval_path=held)
    assert answers(tasks.eval_set(3)) == [1, 2, 3]
    assert tasks.skipped["eval"] == [(0, "the prompt is empty")]
    assert answers(tasks.eval_set(500)) == list(range(1, 31))  # all there are
    dd = datasets.DatasetDict({"train": datasets.Dataset.from_list(ROWS[:20]),
                               "test": datasets.Dataset.from_list(ROWS[20:])})
    dd.save_to_disk(str(tmp_path / "dd"))
    split = streamed(tmp_path / "dd", eval_path=None, eval_split="test")
    assert answers(split.eval_set(2)) == [21, 22]
    assert sorted(answers(split.sample(20, None))) == list(range(1, 21))


def test_streaming_config_errors(tmp_path):
    path = write_jsonl(tmp_path / "d.jsonl", ROWS)
    with pytest.raises(ValueError, match="streaming needs eval_split or eval_path"):
        DatasetConfig(path=path, prompt="question", streaming=True)
    with pytest.raises(ValueError, match="shuffle_buffer is set but cannot take effect"):
        DatasetConfig(path=path, prompt="question", shuffle_buffer=5)
    with pytest.raises(ValueError, match=r"stream \(streaming: true\) that is shuffled"):
        DatasetConfig(path=path, prompt="question", streaming=True, eval_path=path,
                      shuffle=False, shuffle_buffer=5)


@pytest.mark.parametrize("case, expected", [
    ("missing column", "no column 'question' (the prompt column: task.data.prompt); its "
                       "columns: text, answer"),  # the config's check: the head tells
    ("no usable row", "holds no usable row (2 skipped; row 0, counting from 0: the prompt is "
                      "empty)"),
    ("no rows", "it holds no rows (the file is empty)"),
    ("unknown split", "has no split 'test'; it has: train"),
])
def test_bad_data_is_one_error_when_the_stream_opens(tmp_path, case, expected):
    path = tmp_path / "d.jsonl"
    split = write_bad_case(path, case, ROWS)
    with pytest.raises(ValueError, match="d.jsonl") as e:  # a DataError, or the config's
        streamed(path, split=split, eval_path=write_jsonl(tmp_path / "e.jsonl", ROWS))
    assert expected in str(e.value)


def test_a_broken_line_far_into_the_data_is_an_error_when_reached(tmp_path):
    (tmp_path / "d").mkdir()
    write_jsonl(tmp_path / "d" / "train-00.jsonl", ROWS)
    (tmp_path / "d" / "train-01.jsonl").write_text('{"question": "a", "answer": 1}\nnot json\n')
    tasks = streamed(tmp_path / "d", eval_path=write_jsonl(tmp_path / "e.jsonl", ROWS))
    assert len(tasks.sample(30, None)) == 30  # the first file's rows
    with pytest.raises(DataError, match=r"cannot read dataset '.*d': JSON parse error"):
        tasks.sample(20, None)


def test_rows_are_read_as_drawn_never_loaded_whole(tmp_path, monkeypatch):
    cache = tmp_path / "hf_cache"
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", str(cache))
    many = [{"question": f"What is {i}+1?", "answer": i + 1} for i in range(20_000)]
    path = write_jsonl(tmp_path / "big.jsonl", many)
    tasks = streamed(path, eval_path=write_jsonl(tmp_path / "e.jsonl", ROWS))
    assert len(tasks.sample(5, None)) == 5
    assert tasks.stream.rows_read <= 1 + 5 + 8  # the first-row check, the draws, the buffer
    assert not glob.glob(f"{cache}/**/*.arrow", recursive=True)  # no Arrow copy was written
    DatasetTasks(data_cfg(path, streaming=False, shuffle_buffer=10_000), 0)
    assert glob.glob(f"{cache}/**/*.arrow", recursive=True)  # as the in-memory path does


def test_a_resumed_run_draws_what_an_uninterrupted_one_did(tmp_path):
    path = write_jsonl(tmp_path / "d.jsonl", ROWS[:10] + BAD[:1] + ROWS[10:])
    per_step = 6

    def steps(tasks, first, last):
        drawn = []
        for step in range(first, last):
            seek_step(tasks, step, per_step)
            drawn.append(answers(tasks.sample(per_step, None)))
            if step % 3 == 1:  # a resampled round reads ahead
                drawn[-1] += answers(tasks.sample(4, None))
        return drawn

    straight = steps(streamed(path), 0, 16)  # 96 prompts: over two epochs
    resumed = streamed(path)
    assert steps(resumed, 9, 16) == straight[9:]
    assert resumed.stream.epoch_length == 40
    assert straight[0] != straight[7]  # a new epoch is a new order
    # the asynchronous run's groups: prompt k of step n // B is group n's, resumed or not
    source = step_groups(streamed(path), 0, per_step, 2)
    groups = [source(n)[0] for n in range(60)]
    again = step_groups(streamed(path), 0, per_step, 2)
    assert [again(n)[0] for n in range(30, 60)] == groups[30:]
    assert answers(groups[:per_step]) == straight[0][:per_step]
