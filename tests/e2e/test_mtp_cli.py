"""``trainer.mtp`` through the CLI: the MTP head learns during SFT and RL with its loss logged,
is saved beside each stage's model (which still loads), resumes exactly from a checkpoint,
and drafts for ``engine.draft_tokens`` in ``posttrain eval`` with the same greedy answers."""

import json
import shutil

import pytest
import torch
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM
from typer.testing import CliRunner

from posttrain.cli.app import app
from posttrain.config import ConfigError, load_config

runner = CliRunner()
BASE = ["train", "configs/quickstart.yaml", "model.preset=nano", "threads=1",
        "trainer.mtp={lr: 0.003}", "eval.num_problems=4", "checkpoint_every=2"]
COMMON = [*BASE, "sft.steps=4", "sft.batch_size=8", "sft.log_every=1"]
RL = ["rl.steps=2", "rl.prompts_per_step=2", "rl.group_size=2"]


def rows(out):
    return [json.loads(line) for line in open(out / "metrics.jsonl")]


def test_the_head_learns_in_sft_and_rl_and_is_saved_beside_each_model(tmp_path, recwarn):
    out = tmp_path / "run"
    result = runner.invoke(app, [*COMMON, *RL, f"out_dir={out}", "stages=[sft, rl]"])
    assert not [w for w in recwarn if "mtp/training" in w.filename]  # a float of a graph
    assert result.exit_code == 0, result.output
    logged = {r["stage"]: r for r in rows(out) if "mtp_loss" in r}
    assert set(logged) == {"sft", "rl"} and all(r["mtp_loss"] > 0 for r in logged.values())
    heads = [load_file(out / f"{s}_model" / "mtp_head.safetensors") for s in ("sft", "rl")]
    assert any(not torch.equal(heads[0][k], heads[1][k]) for k in heads[0])  # RL trained it
    AutoModelForCausalLM.from_pretrained(out / "rl_model")  # the head is beside, not inside


def test_a_resumed_run_ends_with_the_straight_runs_head(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    for out in (a, b):
        result = runner.invoke(app, [*COMMON, f"out_dir={out}", "stages=[sft]"])
        assert result.exit_code == 0, result.output
    shutil.rmtree(b / "checkpoints" / "sft-000004")  # as if stopped after step 2
    (b / "checkpoints" / "latest").write_text(json.dumps({"tag": "sft-000002"}))
    shutil.rmtree(b / "sft_model")
    (b / "summary.json").unlink()
    resumed = runner.invoke(app, [*COMMON, f"out_dir={b}", "stages=[sft]", "--resume"])
    assert resumed.exit_code == 0 and "resuming from sft-000002" in resumed.output
    ha, hb = (load_file(out / "sft_model" / "mtp_head.safetensors") for out in (a, b))
    assert all(torch.equal(ha[k], hb[k]) for k in ha)
    assert (b / "checkpoints" / "sft-000002" / "mtp_head.safetensors").is_file()


def test_an_rl_run_drafts_with_its_starting_models_head_and_resumes(tmp_path):
    sft = tmp_path / "sft"
    assert runner.invoke(app, [*COMMON, f"out_dir={sft}", "stages=[sft]"]).exit_code == 0
    rl = [*BASE, *RL, "rl.steps=4", f"model.path={sft / 'sft_model'}", "model.preset=null",
          "stages=[rl]", "engine.draft_tokens=2"]
    a, b = tmp_path / "a", tmp_path / "b"
    for out in (a, b):
        result = runner.invoke(app, [*rl, f"out_dir={out}"])
        assert result.exit_code == 0, result.output
    shutil.rmtree(b / "checkpoints" / "rl-000004")  # as if stopped after step 2
    (b / "checkpoints" / "latest").write_text(json.dumps({"tag": "rl-000002"}))
    shutil.rmtree(b / "rl_model")
    (b / "summary.json").unlink()
    resumed = runner.invoke(app, [*rl, f"out_dir={b}", "--resume"])  # its engine drafts from
    assert resumed.exit_code == 0, resumed.output                  # the checkpoint's head
    summary = json.loads((a / "summary.json").read_text())  # held-out evaluations report
    for key in ("eval_before", "eval_after_rl"):               # the acceptance of the drafts
        assert 0 <= summary[key]["spec/acceptance"] <= 1 and summary[key]["spec/drafted"] > 0
    assert any("eval/spec/acceptance" in r for r in rows(a))
    for name in ("model.safetensors", "mtp_head.safetensors"):
        wa, wb = (load_file(out / "rl_model" / name) for out in (a, b))
        assert all(torch.equal(wa[k], wb[k]) for k in wa)


def test_eval_drafts_with_the_saved_head_and_answers_the_same(tmp_path):
    out = tmp_path / "run"
    assert runner.invoke(app, [*COMMON, f"out_dir={out}", "stages=[sft]"]).exit_code == 0
    answers, printed = [], []
    for draft in (0, 2):
        result = runner.invoke(app, ["eval", str(out / "sft_model"), "--config",
                                     "configs/quickstart.yaml", "model.preset=nano",
                                     "eval.num_problems=8", f"engine.draft_tokens={draft}",
                                     "--out", str(tmp_path / f"eval{draft}")])
        assert result.exit_code == 0, result.output
        answers.append([json.loads(line)["completion"]
                        for line in open(tmp_path / f"eval{draft}" / "samples.jsonl")])
        printed.append(json.loads(result.stdout))
        assert json.loads((tmp_path / f"eval{draft}" / "summary.json").read_text()) \
            == printed[-1]
    assert answers[0] == answers[1]  # greedy: speculative decoding changes nothing
    plain, spec = printed
    assert not any(k.startswith("spec/") for k in plain)  # no drafts, no acceptance
    # the acceptance of the drafts: accepted / drafted, and per round of k = 2 drafts
    assert 0 < spec["spec/acceptance"] <= 1 and spec["spec/drafted"] > 0
    assert spec["spec/accepted_per_round"] == pytest.approx(2 * spec["spec/acceptance"])
    assert 1 < spec["spec/tokens_per_forward"] <= 3
    missing = runner.invoke(app, ["eval", str(out / "base_model"), "--config",
                                  "configs/quickstart.yaml", "model.preset=nano",
                                  "engine.draft_tokens=2"])
    assert missing.exit_code != 0 and "no MTP head" in missing.output


@pytest.mark.parametrize("setting,message", [
    ("trainer.lora={r: 4}", "trainer.lora"),
    ("sft.pack_tokens=64", "sft.pack_tokens"),
    ("dist.trainer_actor=true", "dist.trainer_actor"),
])
def test_settings_the_head_cannot_train_under_are_refused(setting, message):
    extra = ["dist.backend=ray"] if "actor" in setting else []
    with pytest.raises(ConfigError, match=f"trainer.mtp .*{message}"):
        load_config("configs/quickstart.yaml", ["trainer.mtp={}", setting, *extra])


def test_speculative_rollouts_do_not_record_routing():
    with pytest.raises(ConfigError, match="does not record routing"):
        load_config("configs/quickstart.yaml", ["engine.draft_tokens=2",
                                                "trainer.routing_replay=true",
                                                "model.architecture=qwen3_moe"])


def test_the_head_trains_under_bf16_autocast(tmp_path):
    out = tmp_path / "bf16"
    result = runner.invoke(app, [*COMMON, f"out_dir={out}", "stages=[sft]",
                                 "trainer.precision=bf16"])
    assert result.exit_code == 0, result.output
    losses = [r["mtp_loss"] for r in rows(out) if "mtp_loss" in r]
    assert len(losses) == 4 and all(0 < x < 10 for x in losses)
    assert losses[-1] < losses[0]  # four steps of lr 0.003 on the same model move it down
