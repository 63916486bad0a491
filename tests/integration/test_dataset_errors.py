"""A user's dataset that does not fit the config fails when the config is validated (where the
data's head tells its columns) or at the start of the run, naming what the data has."""

import json

import datasets
import pytest

from posttrain.config import ConfigError, load_config
from posttrain.config.sections.data_columns import local_columns
from posttrain.recipes.build import RunParts

ROWS = [{"question": f"What is {i}+{i}?", "answer": 2 * i, "level": i % 3} for i in range(20)]


def write(tmp_path, fmt):
    """``ROWS`` as a file (or ``save_to_disk`` folder) of format ``fmt``."""
    ds = datasets.Dataset.from_list(ROWS)
    path = tmp_path / f"d.{fmt}"
    if fmt == "jsonl":
        path.write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    elif fmt == "saved":
        ds.save_to_disk(str(path))
    elif fmt == "arrow":
        with datasets.arrow_writer.ArrowWriter(path=str(path)) as writer:
            writer.write_table(ds.data.table)
            writer.finalize()
    else:
        getattr(ds, f"to_{fmt}")(str(path))
    return str(path)


def config(data, *overrides):
    return load_config("configs/quickstart.yaml", [
        "task.name=dataset", f"task.data.path={data}", "stages=[rl]", *overrides])


@pytest.mark.parametrize("fmt", ["jsonl", "csv", "parquet", "arrow", "saved"])
def test_a_column_the_data_lacks_is_a_config_error_naming_its_columns(tmp_path, fmt):
    data = write(tmp_path, fmt)
    assert local_columns(data) == ["question", "answer", "level"]
    with pytest.raises(ConfigError, match=r"has no column 'prompt' \(the prompt column: "
                                          r"task.data.prompt\); its columns: question, answer, "
                                          r"level"):
        config(data)
    assert config(data, "task.data.prompt=question").task.data.prompt == "question"


def test_held_out_rows_are_checked_too(tmp_path):
    data = write(tmp_path, "jsonl")
    other = tmp_path / "eval.jsonl"
    other.write_text(json.dumps({"q": "What is 1+1?", "answer": 2}) + "\n")
    with pytest.raises(ConfigError, match=r"eval_path .* has no column 'question'"):
        config(data, "task.data.prompt=question", f"task.data.eval_path={other}")


def test_what_reads_columns_by_name_reads_columns_the_data_has(tmp_path):
    data = write(tmp_path, "jsonl")
    (tmp_path / "mine.py").write_text(
        "def needs_difficulty(completion, difficulty):\n    return 1.0\n\n"
        "def by_level(completion, level, **row):\n    return float(level)\n")
    with pytest.raises(ConfigError, match=r"reward.parts.mine: .*needs_difficulty takes "
                                          r"difficulty, neither a sample field .* nor a column "
                                          r"of .* \(question, answer, level\)"):
        config(data, "task.data.prompt=question",
               f"reward.parts.mine.verifier={tmp_path / 'mine.py'}:needs_difficulty")
    config(data, "task.data.prompt=question",
           f"reward.parts.mine.verifier={tmp_path / 'mine.py'}:by_level")
    with pytest.raises(ConfigError, match=r"eval.group_by names difficulty, not a column of .* "
                                          r"\(question, answer, level\)"):
        config(data, "task.data.prompt=question", "eval.group_by=[level, difficulty]")


def test_a_group_by_column_no_held_out_task_has_is_an_error_at_the_start(tmp_path):
    """Where the columns are not known from the config (a built-in task), the held-out tasks
    tell them when the run starts."""
    cfg = load_config("configs/quickstart.yaml", ["eval.group_by=[level]", "stages=[rl]",
                                                  f"out_dir={tmp_path / 'run'}"])
    with pytest.raises(ConfigError, match=r"eval.group_by: no held-out task has level "
                                          r"\(columns: domain\)"):
        RunParts(cfg)


def test_a_json_array_file_is_checked_when_it_is_read(tmp_path):
    path = tmp_path / "d.json"
    path.write_text(json.dumps(ROWS))
    assert local_columns(path) is None
