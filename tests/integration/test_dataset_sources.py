"""Where a dataset's rows come from and what a broken one says: compressed files, lists and
globs of files, a row filter, a hub name (a hint to download it), an empty file, a broken line
found where it is (``datasets`` reads big files in chunks and names the row within its chunk),
an empty prompt cell said as such; the skipped rows reach ``summary.json``."""

import gzip
import json

import pytest

from posttrain.config import ConfigError
from posttrain.config.sections.data import DatasetConfig
from posttrain.data.prompt_tasks import DatasetTasks
from posttrain.types.errors import DataError

ROWS = [{"prompt": f"What is {i}+{i}?", "answer": 2 * i, "level": i % 3} for i in range(40)]


def lines(rows):
    return "".join(json.dumps(r) + "\n" for r in rows)


def test_compressed_files_a_list_a_glob_and_a_filter(tmp_path):
    for name, part in (("a", ROWS[:20]), ("b", ROWS[20:])):
        with gzip.open(tmp_path / f"{name}.jsonl.gz", "wt") as f:
            f.write(lines(part))
    listed = [str(tmp_path / "a.jsonl.gz"), str(tmp_path / "b.jsonl.gz")]
    for path in (listed, str(tmp_path / "*.jsonl.gz")):
        cfg = DatasetConfig(path=path, where={"level": [1, 2]}, shuffle=False)
        tasks = DatasetTasks(cfg, eval_fraction=0.25)
        kept = [t.row["level"] for split in tasks.splits.values() for t in split]
        assert len(kept) == sum(r["level"] != 0 for r in ROWS) and 0 not in kept
        assert tasks.skipped == {"train": []}  # left out, not malformed
    with pytest.raises(ValueError, match="task.data.where leaves no row"):
        DatasetTasks(DatasetConfig(path=listed, where={"level": 7}))


def test_a_source_that_is_not_one_says_why(tmp_path):
    (tmp_path / "a.jsonl").write_text(lines(ROWS))
    ROWS_CSV = "prompt,answer\nWhat is 1+1?,2\n"
    (tmp_path / "b.csv").write_text(ROWS_CSV)
    cases = [
        ([str(tmp_path / "a.jsonl"), str(tmp_path / "b.csv")], "mix formats"),
        (str(tmp_path / "none-*.jsonl"), "matches no file"),
        ("openai/gsm8k", r"does not exist \(looked for from .+\); a Hugging Face hub dataset "
                         r"is read from a local "
                         r"copy: download it first \(`hf download openai/gsm8k"),
        (str(tmp_path / "b.txt"), "does not exist"),
    ]
    for path, message in cases:
        with pytest.raises(ValueError, match=message):
            DatasetConfig(path=path)


def test_a_broken_line_is_found_where_it_is(tmp_path):
    """15 MB of rows: ``datasets`` parses the file in chunks and said "row 423" of a break at
    row 2500 (line 2501)."""
    rows = [json.dumps({"prompt": f"What is {i}+{i}? " + "x" * 5000, "answer": 2 * i})
            for i in range(3000)]
    rows[2500] = '{"prompt": "broken'
    path = tmp_path / "long.jsonl"
    path.write_text("\n".join(rows) + "\n")
    with pytest.raises(DataError, match=r"line 2,501 is not valid JSON \(.*; row 2,500 "
                                        r"counting from 0\)"):
        DatasetTasks(DatasetConfig(path=str(path)))


def test_an_empty_file_and_an_empty_cell_are_said_as_such(tmp_path):
    (tmp_path / "empty.jsonl").write_text("")
    with pytest.raises(DataError, match=r"it holds no rows \(the file is empty\)"):
        DatasetTasks(DatasetConfig(path=str(tmp_path / "empty.jsonl")))
    rows = [dict(r) for r in ROWS]
    del rows[3]["prompt"]
    rows[5]["answer"] = None
    (tmp_path / "holes.jsonl").write_text(lines(rows))
    tasks = DatasetTasks(DatasetConfig(path=str(tmp_path / "holes.jsonl"), shuffle=False))
    assert [(i, why) for split in tasks.skipped.values() for i, why in split] == [
        (3, "its 'prompt' cell is empty (the prompt column)"),
        (5, "its 'answer' cell is empty (the answer column; task.data.answer=null reads no "
            "reference)")]


def test_the_skipped_rows_reach_the_summary(tmp_path):
    from posttrain.config import load_config
    from posttrain.recipes.stages import Stages

    rows = [dict(r) for r in ROWS]
    rows[2]["prompt"] = ""
    (tmp_path / "d.jsonl").write_text(lines(rows))
    cfg = load_config("configs/quickstart.yaml", [
        "task.name=dataset", f"task.data.path={tmp_path / 'd.jsonl'}", "stages=[rl]",
        "model.preset=nano", "rl.steps=1", "rl.prompts_per_step=2", "rl.group_size=2",
        "rl.max_new_tokens=4", "eval.num_problems=2", "eval.max_new_tokens=4",
        "task.data.shuffle=false", f"out_dir={tmp_path / 'run'}"])
    summary = Stages(cfg).run()
    assert summary["skipped_rows"] == {"train prompt": {
        "count": 1, "rows": [2], "first_reason": "the prompt is empty"}}
    assert json.loads((tmp_path / "run" / "summary.json").read_text())["skipped_rows"] == \
        summary["skipped_rows"]
    with pytest.raises(ConfigError):
        load_config(None, ["task.name=dataset", f"task.data.path={tmp_path / 'd.jsonl'}",
                           "task.data.where={nope: 1}"])
