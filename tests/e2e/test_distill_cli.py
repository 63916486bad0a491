"""The distillation stages through the CLI: offline KD from a live teacher and from stored
logits, multi-teacher on-policy distillation routed by domain, and self-distillation."""

import json
import shutil

import pytest
import torch
from safetensors.torch import load_file
from typer.testing import CliRunner

from posttrain.cli.app import app
from posttrain.models import build_tiny, load_model, load_tokenizer, save_model

runner = CliRunner()
SMALL = ["model.preset=nano", "eval.num_problems=4", "task.ops=[+, '-']"]


def teacher(path, seed):
    """A nano model with the student's tokenizer (seed 0) and other weights."""
    model = load_model(build_tiny(path, "nano", seed=0))
    other = load_model(build_tiny(path.with_name(path.name + "-w"), "nano", seed=seed))
    model.load_state_dict(other.state_dict())
    save_model(model, load_tokenizer(path), path)
    return path


def rows(out, stage):
    return [r for line in open(out / "metrics.jsonl") if (r := json.loads(line))["stage"] == stage]


def test_offline_distillation_from_a_teacher_and_from_its_stored_logits(tmp_path):
    teacher_dir = teacher(tmp_path / "teacher", 3)
    common = [*SMALL, "stages=[distill]", "distill.steps=2", "distill.batch_size=4",
              "distill.num_examples=12", "distill.divergence.name=jsd",
              "distill.divergence.beta=0.9"]
    live = runner.invoke(app, ["train", "configs/quickstart.yaml", f"out_dir={tmp_path / 'a'}",
                               f"distill.teacher={teacher_dir}", *common])
    assert live.exit_code == 0, live.output
    assert "after KD" in live.output and len(rows(tmp_path / "a", "distill")) == 2
    stored = tmp_path / "logits" / "teacher.safetensors"
    wrote = runner.invoke(app, ["teacher-logits", "configs/quickstart.yaml", "--out",
                                str(stored), "--topk", "16", f"distill.teacher={teacher_dir}",
                                *common])
    assert wrote.exit_code == 0, wrote.output and stored.is_file()
    run = runner.invoke(app, ["train", "configs/quickstart.yaml", f"out_dir={tmp_path / 'b'}",
                              f"distill.logits={stored}", *common])
    assert run.exit_code == 0, run.output
    assert (tmp_path / "b" / "distill_model" / "model.safetensors").is_file()
    other = runner.invoke(app, ["train", "configs/quickstart.yaml", f"out_dir={tmp_path / 'c'}",
                                f"distill.logits={stored}", *common, "distill.num_examples=13"])
    assert other.exit_code == 2 and "other data" in " ".join(other.output.split())


def test_distill_stage_needs_one_teacher_source(tmp_path):
    result = runner.invoke(app, ["train", "configs/quickstart.yaml", "stages=[distill]"])
    assert result.exit_code == 2
    assert "exactly one of distill.teacher" in " ".join(result.output.split())


def test_multi_teacher_opd_routes_by_domain_and_reports_each(tmp_path):
    add, sub = teacher(tmp_path / "add", 3), teacher(tmp_path / "sub", 4)
    out = tmp_path / "run"
    result = runner.invoke(app, [
        "train", "configs/opd.yaml", f"out_dir={out}", "model.path=null", *SMALL,
        "opd.steps=2", "opd.prompts_per_step=4", "opd.group_size=2", "opd.eval_every=2",
        f"opd.teachers=[{{path: {add}, domains: [addition]}}, "
        f"{{path: {sub}, domains: [subtraction]}}]"])
    assert result.exit_code == 0, result.output
    last = rows(out, "opd")[-1]
    assert last["step"] == 2 and last["divergence"] > 0
    summary = json.loads((out / "summary.json").read_text())
    assert {"accuracy/addition", "accuracy/subtraction"} <= set(summary["eval_after_opd"])
    assert "after OPD" in result.output


def test_self_distillation_preset_runs(tmp_path):
    out = tmp_path / "run"
    result = runner.invoke(app, [
        "train", "configs/quickstart.yaml", f"out_dir={out}", *SMALL, "stages=[opd]",
        "opd.self_distill=opsd", "opd.loss=opd_sampled", "opd.steps=2",
        "opd.prompts_per_step=4", "opd.group_size=2", "opd.eval_every=0"])
    assert result.exit_code == 0, result.output
    assert len(rows(out, "opd")) == 2 and "sampled_rkl" in rows(out, "opd")[0]


def test_a_missing_teacher_is_a_clear_error(tmp_path):
    result = runner.invoke(app, [
        "train", "configs/opd.yaml", f"out_dir={tmp_path / 'run'}", "model.path=null", *SMALL,
        f"opd.teachers=[{{path: {tmp_path / 'nowhere'}}}]"])
    assert result.exit_code == 2 and "does not exist" in " ".join(result.output.split())


@pytest.mark.slow
@pytest.mark.ray
def test_teachers_as_ray_actors_train_like_in_process_teachers(tmp_path):
    pytest.importorskip("ray")
    add, sub = teacher(tmp_path / "add", 3), teacher(tmp_path / "sub", 4)
    common = ["train", "configs/opd.yaml", "model.path=null", *SMALL, "opd.loss=opd_sampled",
              "opd.steps=2", "opd.prompts_per_step=4", "opd.group_size=2", "opd.eval_every=0",
              f"opd.teachers=[{{path: {add}, domains: [addition]}}, "
              f"{{path: {sub}, domains: [subtraction]}}]"]
    weights = []
    for name, extra in (("local", []), ("ray", ["dist.backend=ray",
                                                 "opd.teacher_placement=ray"])):
        result = runner.invoke(app, [*common, f"out_dir={tmp_path / name}", *extra])
        assert result.exit_code == 0, result.output
        weights.append(load_file(tmp_path / name / "opd_model" / "model.safetensors"))
    # float32 through the CLI (no float64 model): an actor scores the student's samples in
    # another process and batching, so the teachers' log-probs differ by float32 rounding,
    # which 2 Adam steps (lr 1e-4) amplify by up to lr / eps_adam on near-zero gradients;
    # measured <= 8.3e-7 with AVX-512, AVX2 and scalar kernels, the tolerance keeps > 10x
    for key in weights[0]:
        torch.testing.assert_close(weights[1][key], weights[0][key], atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("stage", ["distill", "opd"])
def test_a_resumed_distillation_run_ends_where_the_straight_run_does(stage, tmp_path):
    source = teacher(tmp_path / "teacher", 3)
    settings = {"distill": [f"distill.teacher={source}", "distill.steps=4",
                            "distill.batch_size=4", "distill.num_examples=16",
                            "distill.lam=0.5"],
                "opd": [f"opd.teachers=[{{path: {source}}}]", "opd.steps=4",
                        "opd.prompts_per_step=2", "opd.group_size=2", "opd.eval_every=0"]}
    common = ["train", "configs/quickstart.yaml", *SMALL, f"stages=[{stage}]",
              "checkpoint_every=2", *settings[stage]]
    a, b = tmp_path / "a", tmp_path / "b"
    for out in (a, b):
        result = runner.invoke(app, [*common, f"out_dir={out}"])
        assert result.exit_code == 0, result.output
    shutil.rmtree(b / "checkpoints" / f"{stage}-000004")  # as if stopped after step 2
    (b / "checkpoints" / "latest").write_text(json.dumps({"tag": f"{stage}-000002"}))
    shutil.rmtree(b / f"{stage}_model")
    (b / "summary.json").unlink()  # a stopped run has none (a complete one says so)
    resumed = runner.invoke(app, [*common, f"out_dir={b}", "--resume"])
    assert resumed.exit_code == 0 and f"resuming from {stage}-000002" in resumed.output
    wa, wb = (load_file(out / f"{stage}_model" / "model.safetensors") for out in (a, b))
    assert all(torch.equal(wa[k], wb[k]) for k in wa)
