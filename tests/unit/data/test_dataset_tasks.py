"""Prompts from a user's dataset (``task.name: dataset``): every local format ``datasets``
reads gives the same tasks; column mapping, system prompts, held-out splits, seeded shuffling;
bad data is a ``DataError`` naming the file, column or row, and unusable rows are skipped with
their reasons."""

import re

import datasets
import pytest
from bad_data import write_bad_case, write_jsonl

from posttrain.config.sections.data import DatasetConfig
from posttrain.data.prompt_tasks import DatasetTasks
from posttrain.types.errors import DataError

ROWS = [{"question": f"What is {i}+1?", "answer": i + 1, "level": i % 3} for i in range(20)]


def tasks(path, seed=0, **keys):
    return DatasetTasks(DatasetConfig(path=str(path), prompt="question", **keys), seed, 0.25)


def test_every_local_format_gives_the_same_tasks(tmp_path):
    jsonl = write_jsonl(tmp_path / "d.jsonl", ROWS)
    ds = datasets.Dataset.from_list(ROWS)
    ds.to_parquet(str(tmp_path / "d.parquet"))
    ds.to_csv(str(tmp_path / "d.csv"), index=False)
    ds.save_to_disk(str(tmp_path / "saved"))
    (tmp_path / "folder").mkdir()
    ds.to_json(str(tmp_path / "folder" / "train.jsonl"))
    reference = tasks(jsonl).splits
    assert len(reference["train"]) == 15 and len(reference["eval"]) == 5
    for source in ("d.parquet", "d.csv", "saved", "folder"):
        assert tasks(tmp_path / source).splits == reference, source
    first = reference["train"][0]
    assert first.messages() == [{"role": "user", "content": first.row["question"]}]
    assert first.reference == str(first.row["answer"]) and "level" in first.row


def test_shuffling_follows_the_seed_and_can_be_off(tmp_path):
    path = write_jsonl(tmp_path / "d.jsonl", ROWS)
    in_order = [t.row["answer"] for t in tasks(path, shuffle=False).splits["train"]]
    assert in_order == list(range(1, 16))
    seed0 = [t.row["answer"] for t in tasks(path, seed=0).splits["train"]]
    assert seed0 == [t.row["answer"] for t in tasks(path, seed=0).splits["train"]]
    assert seed0 != [t.row["answer"] for t in tasks(path, seed=1).splits["train"]]
    assert sorted(seed0 + [t.row["answer"] for t in tasks(path).splits["eval"]]) == \
        list(range(1, 21))
    assert len(tasks(path, max_rows=8).splits["train"]) == 6  # 8 rows, a quarter held out


def test_chat_prompts_and_system_prompts(tmp_path):
    rows = [{"prompt": [{"role": "user", "content": "hi"}], "answer": "a", "sys": "be brief"},
            {"prompt": [{"role": "system", "content": "own"}, {"role": "user", "content": "yo"}],
             "answer": "b", "sys": "be brief"}]
    path = write_jsonl(tmp_path / "chat.jsonl", rows)
    cfg = DatasetConfig(path=path, system="sys", shuffle=False, eval_path=path)
    got = DatasetTasks(cfg).splits["train"]
    assert got[0].messages() == [{"role": "system", "content": "be brief"},
                                 {"role": "user", "content": "hi"}]
    assert got[1].messages()[0] == {"role": "system", "content": "own"}  # the row's own wins
    cfg = DatasetConfig(path=path, system_prompt="think", shuffle=False, eval_path=path)
    assert DatasetTasks(cfg).splits["train"][0].messages()[0]["content"] == "think"


def test_held_out_rows_from_a_split_or_a_file(tmp_path):
    dd = datasets.DatasetDict({"train": datasets.Dataset.from_list(ROWS[:12]),
                               "test": datasets.Dataset.from_list(ROWS[12:])})
    dd.save_to_disk(str(tmp_path / "dd"))
    split = tasks(tmp_path / "dd", eval_split="test").splits
    assert (len(split["train"]), len(split["eval"])) == (12, 8)
    other = write_jsonl(tmp_path / "other.jsonl", ROWS[:3])
    split = tasks(tmp_path / "dd", eval_path=other).splits
    assert (len(split["train"]), len(split["eval"])) == (12, 3)
    assert len(DatasetTasks(DatasetConfig(path=other, prompt="question", eval_path=other))
               .eval_set(200)) == 3  # fewer held-out rows than eval.num_problems: all of them


def test_unusable_rows_are_skipped_with_their_reasons(tmp_path):
    rows = [{"question": "What is 1+1?", "answer": 2}, {"question": "", "answer": 3},
            {"question": "What is 2+2?", "answer": None}, {"question": "What is 3+3?", "answer": 6}]
    t = tasks(write_jsonl(tmp_path / "d.jsonl", rows), shuffle=False)
    assert [i for i, _ in t.skipped["train"]] == [1, 2]
    assert "empty" in t.skipped["train"][0][1]
    assert "its 'answer' cell is empty" in t.skipped["train"][1][1]


@pytest.mark.parametrize("case, expected", [
    ("missing column", "no column 'question' (the prompt column: task.data.prompt); its "
                       "columns: text, answer"),  # the config's check: the head tells
    ("no usable row", "holds no usable row (2 skipped; row 0, counting from 0: the prompt is "
                      "empty)"),
    ("not json", "cannot read dataset"),
    ("no rows", "cannot read dataset"),
    ("unknown split", "has no split 'test'; it has: train"),
])
def test_bad_data_is_one_error_naming_the_problem(tmp_path, case, expected):
    path = tmp_path / "d.jsonl"
    split = write_bad_case(path, case, ROWS)
    with pytest.raises(ValueError, match="d.jsonl") as e:  # a DataError, or the config's
        tasks(path, split=split)
    assert expected in str(e.value)


def test_a_missing_column_the_head_cannot_tell_is_an_error_when_read(tmp_path):
    """A dataset folder of data files: its columns are known only when ``datasets`` reads
    it, which then names the column as the config's check would."""
    (tmp_path / "folder").mkdir()
    write_bad_case(tmp_path / "folder" / "train.jsonl", "missing column", ROWS)
    with pytest.raises(DataError, match=r"no column 'question' \(the prompt column\); its "
                                        r"columns: text, answer"):
        tasks(tmp_path / "folder")


def test_the_config_names_a_missing_or_unreadable_path(tmp_path, monkeypatch):
    with pytest.raises(ValueError, match=r"path: '.*none.jsonl' does not exist \["):
        DatasetConfig(path=str(tmp_path / "none.jsonl"))
    monkeypatch.chdir(tmp_path)  # a relative path: where it was looked for
    with pytest.raises(ValueError, match=re.escape(
            f"'data/none.jsonl' does not exist (looked for from {tmp_path})")):
        DatasetConfig(path="data/none.jsonl")
    (tmp_path / "d.txt").write_text("x")
    with pytest.raises(ValueError, match="is not a data file"):
        DatasetConfig(path=str(tmp_path / "d.txt"))
