"""Families: the index is the source's, a member is validated without the other members (or
torch), and a user's section named by dotted path goes through the same selection."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from posttrain.config import ConfigError, load_config
from posttrain.config.family import INDEX, index, member_of, names, scan

ROOT = Path(__file__).resolve().parents[2]


def test_the_index_is_what_the_source_declares():
    assert json.loads(INDEX.read_text()) == scan(ROOT / "src"), \
        "stale: run python tools/families.py"


def test_every_member_is_declared_under_its_name_and_family():
    for family, members in index().items():
        for name in members:
            cls = member_of(family, name)
            assert (cls.FAMILY, cls.NAME) == (family, name)


def test_a_member_section_imports_no_heavy_library_nor_other_members():
    code = ("import sys\nfrom posttrain.config.family import member_of\n"
            "member_of('task', 'tau')\n"
            "print([m for m in ('torch', 'numpy', 'transformers', 'posttrain.envs.code') "
            "if m in sys.modules])")
    run = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                         check=True)
    assert run.stdout.strip() == "[]"


def test_switching_the_name_drops_the_other_members_keys_left_at_their_defaults():
    cfg = load_config("configs/quickstart.yaml", ["task.name=search"])  # it lists ops, digits
    assert cfg.task.name == "search" and "digits" not in cfg.task.model_dump()
    with pytest.raises(ConfigError, match=r"task.digits: applies to name in "
                                          r"\(arithmetic, calculator, task_builder\), not search"):
        load_config("configs/quickstart.yaml", ["task.name=search", "task.digits=3"])


def test_an_unknown_name_lists_the_built_in_members():
    with pytest.raises(ConfigError, match="unknown task 'serch'; built in: arithmetic, "
                                          "calculator, code, dataset, harbor, kernel, lookup"):
        load_config(None, ["task.name=serch"])
    assert "<dotted path>" not in names("task")


def test_a_users_own_section_class_is_selected_by_its_dotted_path():
    doubles = "task.name=examples/extensions/families.py:Doubles"
    cfg = load_config(None, [doubles, "task.digits=3"])
    assert type(cfg.task).__name__ == "Doubles" and cfg.single_turn
    assert cfg.model_dump()["task"] == {"name": doubles.split("=")[1], "rollout": None,
                                        "env": None, "eval_fraction": 0.1, "efforts": None,
                                        "curriculum": None, "digits": 3}
    problems = cfg.task.build(0, models=None).tasks.eval_set(20)
    assert {len(str(p.a)) for p in problems} == {3} and {p.op for p in problems} == {"+"}
    with pytest.raises(ConfigError, match=r"task.ops: applies to name in \(arithmetic"):
        load_config(None, [doubles, "task.ops=[-]"])
    with pytest.raises(ConfigError, match="too short for 6-digit sums"):  # its own rule
        load_config(None, [doubles, "task.digits=6", "rl.max_new_tokens=20"])
