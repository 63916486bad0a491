"""A user's dataset that does not fit the config fails at the start of the run, naming what
the data has."""

import json

import pytest

from posttrain.config import ConfigError, load_config
from posttrain.recipes.build import RunParts


@pytest.fixture
def data(tmp_path):
    path = tmp_path / "d.jsonl"
    path.write_text("".join(json.dumps({"prompt": f"What is {i}+{i}?", "answer": 2 * i,
                                        "level": i % 3}) + "\n" for i in range(20)))
    return str(path)


def test_a_group_by_column_no_task_has_is_an_error_naming_the_columns(data, tmp_path):
    cfg = load_config("configs/quickstart.yaml", [
        "task.name=dataset", f"task.data.path={data}", "stages=[rl]",
        "eval.group_by=[level, difficulty]",
        f"out_dir={tmp_path / 'run'}"])
    with pytest.raises(ConfigError, match=r"eval.group_by: no held-out task has difficulty "
                                          r"\(columns: answer, level, prompt\)"):
        RunParts(cfg)
    ok = cfg.model_copy(update={"eval": cfg.eval.model_copy(update={"group_by": ["level"]})})
    assert RunParts(ok).eval_tasks
