"""Config that explains itself: every key has a description (family members' keys too),
``config explain`` prints it beside each value and, with ``--unused``, marks the keys no stage
of the run reads; docs/config.md's key reference is current (tools/config_keys.py)."""

import importlib.util
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from posttrain.cli.app import app
from posttrain.cli.output import console
from posttrain.config import ConfigError, load_config
from posttrain.config.keys import describe, keys
from posttrain.config.rules import note, noting, unread
from posttrain.config.section import OptimConfig

TOOL = Path(__file__).resolve().parents[2] / "tools" / "config_keys.py"
spec = importlib.util.spec_from_file_location("config_keys", TOOL)
config_keys = importlib.util.module_from_spec(spec)
spec.loader.exec_module(config_keys)

runner = CliRunner()


def explain(*args: str) -> dict:
    result = runner.invoke(app, ["config", "explain", "configs/quickstart.yaml", *args, "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)["config"]


def test_every_key_has_a_description():
    found = list(keys())
    missing = [f"{k.name} ({k.member})" if k.member else k.name
               for k in found if not (k.field.description or "").strip()]
    assert not missing, f"keys without Field(description=...): {', '.join(missing)}"
    members = {k.member.split("=", 1)[0] for k in found if k.member}
    assert members == {"engine.name", "task.name", "reward.judges.<name>.kind"}
    assert {"task.ops", "engine.kv_cache_gib", "reward.judges.<name>.rubric",
            "agent.compaction.ratio", "task.submissions.penalty"} <= {k.name for k in found}


def test_the_key_reference_in_the_docs_is_current():
    assert config_keys.doc_block() == config_keys.reference(), (
        "run `python tools/config_keys.py` to regenerate docs/config.md's key reference")


def test_explain_prints_a_description_beside_every_key(monkeypatch):
    monkeypatch.setattr(console, "width", 400)  # fixed when it was made, from $COLUMNS then
    config = explain()
    assert len(config) > 200
    assert not [k for k, entry in config.items() if not entry["description"]]
    assert config["rl.optim.lr"]["description"].startswith("peak learning rate")
    assert config["reward.parts.correct.weight"]["description"] == \
        "the part's weight in the summed reward"
    # the table too: each row holds the key, its value and its description
    result = runner.invoke(app, ["config", "explain", "configs/quickstart.yaml"])
    assert result.exit_code == 0, result.output
    rows = {line.split()[0]: line for line in result.output.splitlines() if "│" in line}
    assert all(entry["description"] in rows[key] for key, entry in config.items())


def test_a_catalogue_hyperparameter_names_the_function_that_takes_it():
    cfg = load_config("configs/quickstart.yaml", ["stages=[pref]", "pref.loss.name=ipo"])
    assert describe(cfg, "pref.loss.tau").startswith("a hyperparameter of the preference loss ipo")
    assert describe(cfg, "pref.loss.name").startswith("the preference loss")


def test_unused_marks_the_keys_no_stage_reads():
    config = explain("--unused")
    unused = {k: e["unused"] for k, e in config.items() if e["unused"]}
    assert unused["pref.loss.name"] == "'pref' is not in stages ['sft', 'rl']"
    assert "rm.steps" in unused and "distill.teacher" in unused and "opd.loss" in unused
    assert "single-turn" in unused["agent.max_turns"]  # the arithmetic task has no tools
    assert "algo.kl.coef is 0" in unused["algo.kl.estimator"]
    assert "schedule is constant" in unused["rl.optim.min_lr_ratio"]
    read = ("rl.steps", "sft.optim.lr", "algo.kl.coef", "agent.tools", "critic.enabled",
            "algo.dynamic_sampling.enabled", "eval.samples", "seed")
    assert not [k for k in read if k in unused]
    assert not [k for k in config if k.startswith("pref.") and k in
                {k for k, e in explain("--unused", "stages=[sft, pref, rl]").items()
                 if e["unused"]}]


@pytest.mark.parametrize("override", ["pref.steps=7", "algo.kl.estimator=k1",
                                      "rl.token_stats=2", "agent.max_turns=5",
                                      "critic.optim.lr=0.01", "agent.compaction.ratio=0.5"])
def test_a_key_marked_unused_is_one_the_rules_refuse_when_set(override):
    key = override.split("=")[0]
    assert explain("--unused")[key]["unused"]
    with pytest.raises(ConfigError):
        load_config("configs/quickstart.yaml", [override])


def test_rules_note_the_keys_they_name_only_while_noting():
    optim = OptimConfig()
    unread(optim, "x.optim", ["min_lr_ratio"], "why")  # at its default: no error, no record
    with noting() as noted:
        unread(optim, "x.optim", ["min_lr_ratio"], "why")
        note(["x.optim.min_lr_ratio", "y"], "another reason")
    assert noted == {"x.optim.min_lr_ratio": "why", "y": "another reason"}
