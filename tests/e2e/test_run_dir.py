"""A run directory never loses data: a fresh run does not reuse a used directory, one live run
holds it, a resumed run cuts its records back to the checkpoint and trains what was trained,
checkpoints are pruned, and an interrupted run says how to continue."""

import json
import shlex

import pytest
import torch
import yaml
from typer.testing import CliRunner

from posttrain.cli.app import app
from posttrain.config import RunConfig
from posttrain.recipes.run_dir import RunDirError, claim_run_dir, config_changes
from posttrain.recipes.sampling_loop import LoopRun

runner = CliRunner()

SMALL = ["model.preset=nano", "stages=[rl]", "rl.steps=4", "rl.prompts_per_step=2",
         "rl.group_size=2", "rl.max_new_tokens=4", "rl.eval_every=0", "eval.num_problems=2",
         "eval.max_new_tokens=4", "threads=1"]


def train(out, *extra):
    result = runner.invoke(app, ["train", "configs/quickstart.yaml", *SMALL, "--out", str(out),
                                 *extra])
    return result, " ".join(result.output.split())


def rows(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_a_fresh_run_refuses_a_used_directory_and_overwrite_replaces_only_the_run(tmp_path):
    out = tmp_path / "run"
    first, _ = train(out)
    assert first.exit_code == 0, first.output
    (out / "notes.txt").write_text("mine")
    before = (out / "metrics.jsonl").read_bytes()
    again, text = train(out)
    assert again.exit_code == 2
    assert "already holds files" in text and "--resume" in text and "--overwrite" in text
    assert (out / "metrics.jsonl").read_bytes() == before
    replaced, _ = train(out, "--overwrite", "rl.steps=2")
    assert replaced.exit_code == 0, replaced.output
    assert [r["step"] for r in rows(out / "metrics.jsonl")] == [1, 2]
    assert (out / "notes.txt").read_text() == "mine"


def test_a_run_that_failed_before_writing_anything_does_not_block_its_rerun(tmp_path):
    """A run stopped by bad data at its start leaves only its config.yaml: the same command,
    mended, runs there (it said the directory held files)."""
    out = tmp_path / "run"
    claim_run_dir(out, {"a": 1}, resume=False, overwrite=False).close()  # as a failed start
    assert sorted(p.name for p in out.iterdir()) == [".lock", "config.yaml"]
    result, _ = train(out)
    assert result.exit_code == 0, result.output
    assert yaml.safe_load((out / "config.yaml").read_text())["stages"] == ["rl"]


@pytest.mark.parametrize("again", [[], ["--resume"]])
def test_a_start_that_failed_on_its_data_does_not_claim_its_directory(tmp_path, again):
    """Empty SFT data stops a run after it wrote its config and built its base model: the
    mended command, fresh or with --resume, runs there (it said "already holds files" and
    "nothing to resume")."""
    out, empty = tmp_path / "run", tmp_path / "empty.jsonl"
    empty.write_text("")
    failed, text = train(out, "stages=[sft,rl]", f"sft.data={empty}")
    assert failed.exit_code == 2 and "holds no rows" in text
    assert (out / "base_model" / "config.json").is_file()
    result, _ = train(out, *again)
    assert result.exit_code == 0, result.output
    assert yaml.safe_load((out / "config.yaml").read_text())["stages"] == ["rl"]


def test_what_a_failed_start_wrote_is_cleared_and_anything_else_is_a_run(tmp_path):
    """Its config, base model (built again: the mended config may ask another), empty records
    and folders go; a record with content, or a file no run writes, keeps the directory."""
    out = tmp_path / "run"
    (out / "base_model").mkdir(parents=True)
    (out / "base_model" / "config.json").write_text("{}")
    (out / "checkpoints").mkdir()
    (out / "metrics.jsonl").write_text("")
    (out / "config.yaml").write_text("stages: [sft]\n")
    claim_run_dir(out, {"a": 1}, resume=False, overwrite=False).close()
    assert sorted(p.name for p in out.iterdir()) == [".lock", "config.yaml"]
    (out / "metrics.jsonl").write_text('{"step": 1}\n')
    with pytest.raises(RunDirError, match=r"already holds files \(metrics.jsonl\)"):
        claim_run_dir(out, {"a": 1}, resume=False, overwrite=False)
    (out / "metrics.jsonl").unlink()
    (out / "notes.txt").write_text("")
    with pytest.raises(RunDirError, match=r"already holds files \(notes.txt\)"):
        claim_run_dir(out, {"a": 1}, resume=False, overwrite=False)


def test_one_live_run_holds_its_directory(tmp_path):
    out = tmp_path / "run"
    held = claim_run_dir(out, {}, resume=False, overwrite=False)
    try:
        result, text = train(out, "--overwrite")
        assert result.exit_code == 2 and "another posttrain run" in text
        assert not (out / "metrics.jsonl").exists()
    finally:
        held.close()
    result, _ = train(out, "--overwrite")
    assert result.exit_code == 0, result.output


def test_an_interrupted_run_says_how_to_resume_and_resumes_without_repeating_a_row(
        tmp_path, monkeypatch):
    out = tmp_path / "run"
    finish = LoopRun.finish_step

    def interrupted(self, step, metrics):
        finish(self, step, metrics)
        if step + 1 == 3:  # after step 3 is logged; the newest checkpoint is step 2's
            raise KeyboardInterrupt

    monkeypatch.setattr(LoopRun, "finish_step", interrupted)
    stopped, text = train(out, "checkpoint_every=2", "rl.save_episodes=true")
    assert stopped.exit_code == 130
    assert "Continue from checkpoint rl-000002" in text
    (command,) = [line for line in stopped.output.splitlines() if "posttrain train" in line]
    assert shlex.split(command) == ["posttrain", "train", "configs/quickstart.yaml", *SMALL,
                                    "checkpoint_every=2", "rl.save_episodes=true", "--out",
                                    str(out), "--resume"]
    monkeypatch.setattr(LoopRun, "finish_step", finish)
    resumed, text = train(out, "checkpoint_every=2", "rl.save_episodes=true", "--resume")
    assert resumed.exit_code == 0, resumed.output
    assert "RL: 2/4" in text
    assert [r["step"] for r in rows(out / "metrics.jsonl")] == [1, 2, 3, 4]
    assert len(rows(out / "episodes.jsonl")) == 4 * 2 * 2  # steps x prompts x group
    summary = json.loads((out / "summary.json").read_text())
    assert len(summary["process_seconds"]) == 2
    assert summary["wall_seconds"] == pytest.approx(sum(summary["process_seconds"]))
    # counted across the resume: 4 steps of 4 rows (one micro-batch each), the checkpoints
    # of steps 2 (before the interruption) and 4
    assert summary["counters"] == {"rl": {"optimizer_steps": 4, "micro_batches": 4,
                                          "checkpoints": 2}}


def test_resume_refuses_a_config_that_trains_something_else(tmp_path):
    out = tmp_path / "run"
    assert train(out, "checkpoint_every=2")[0].exit_code == 0
    changed, text = train(out, "checkpoint_every=2", "task.ops=[-]", "rl.optim.lr=0.5",
                          "--resume")
    assert changed.exit_code == 2
    assert ": rl.optim.lr, task.ops differ from its config.yaml" in text
    placed, text = train(out, "checkpoint_every=4", "threads=2", "rl.steps=6", "--resume")
    assert placed.exit_code == 0, placed.output
    assert "RL: 4/6" in text  # the progress goes on from the checkpoint (it said 0/6)
    assert [r["step"] for r in rows(out / "metrics.jsonl")] == [1, 2, 3, 4, 5, 6]


def test_resuming_a_complete_run_says_so_and_changes_nothing(tmp_path):
    """It re-ran the steps after the last checkpoint; with a stage's steps raised it goes on."""
    out = tmp_path / "run"
    assert train(out, "checkpoint_every=3")[0].exit_code == 0
    before = {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()}
    result, text = train(out, "checkpoint_every=3", "--resume")
    assert result.exit_code == 2 and "is complete (summary.json): nothing to resume" in text
    assert {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()} == before


def test_resume_without_a_checkpoint_refuses_instead_of_starting_over(tmp_path):
    out = tmp_path / "run"
    assert train(out, "checkpoint_every=0")[0].exit_code == 0
    before = (out / "metrics.jsonl").read_bytes()
    result, text = train(out, "checkpoint_every=0", "--resume")
    assert result.exit_code == 2 and "nothing to resume" in text
    assert "it ran with checkpoint_every=0" in text
    assert (out / "metrics.jsonl").read_bytes() == before
    (out / "config.yaml").write_text("checkpoint_every: 50\n")  # stopped before step 50
    assert "it stopped before its first checkpoint, due every 50 steps" in \
        train(out, "checkpoint_every=0", "--resume")[1]


def test_checkpoints_beyond_keep_last_are_removed(tmp_path):
    out = tmp_path / "run"
    assert train(out, "checkpoint_every=1", "keep_last=2")[0].exit_code == 0
    kept = sorted(p.name for p in (out / "checkpoints").iterdir() if p.is_dir())
    assert kept == ["rl-000003", "rl-000004"]
    assert json.loads((out / "checkpoints" / "latest").read_text())["tag"] == "rl-000004"


def test_the_default_recipe_writes_checkpoints(tmp_path):
    """The quickstart's own settings checkpoint, so ``quickstart --resume`` can resume."""
    out = tmp_path / "run"
    result = runner.invoke(app, ["train", "configs/quickstart.yaml", "model.preset=nano",
                                 "stages=[sft]", "sft.steps=50", "sft.batch_size=4",
                                 "sft.num_examples=100", "eval.num_problems=2", "threads=1",
                                 "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert (out / "checkpoints" / "sft-000050" / "model.safetensors").is_file()


def test_a_run_of_zero_steps_ends_cleanly(tmp_path):
    result, text = train(tmp_path / "run", "rl.steps=0")
    assert result.exit_code == 0, result.output
    assert "Traceback" not in text and "summary.json" in text


def test_a_key_the_saved_config_lacks_counts_only_away_from_its_default(tmp_path):
    """A run saved by a posttrain without ``keep_last`` resumes at its default; a new reward
    part is a change."""
    current = RunConfig().model_dump(mode="json")
    saved = tmp_path / "config.yaml"
    saved.write_text(yaml.safe_dump({k: v for k, v in current.items() if k != "keep_last"}))
    assert config_changes(saved, current) == []
    assert config_changes(saved, {**current, "stages": ["rl"]}) == ["stages"]
    more = RunConfig().model_dump(mode="json")
    more["reward"]["parts"]["extra"] = {"verifier": "format", "weight": 1.0}
    assert config_changes(saved, more) == ["reward.parts.extra"]


def test_a_run_an_older_posttrain_saved_resumes(tmp_path):
    """The config.yaml of a run started before task families and shown defaults (every task
    key under task, the engine's kv_cache_gib, null for the loss's own defaults) trains the
    same thing as today's config of that run."""
    current = RunConfig().model_dump(mode="json")
    older = yaml.safe_load(yaml.safe_dump(current))
    older["task"] |= {"submissions": {"max_submissions": 3, "penalty": 0.1}, "dataset": None,
                      "dataset_config": {}, "data": None}
    older["engine"]["kv_cache_gib"] = 1
    older["actor"]["policy_loss"] |= {"eps_low": None, "eps_high": None}
    saved = tmp_path / "config.yaml"
    saved.write_text(yaml.safe_dump(older))
    assert config_changes(saved, current) == []
    older["actor"]["policy_loss"]["eps_high"] = 0.28
    saved.write_text(yaml.safe_dump(older))
    assert config_changes(saved, current) == ["actor.policy_loss.eps_high"]


def test_a_checkpoint_without_record_lengths_leaves_the_records_as_they_are(tmp_path):
    """A checkpoint written before records were measured resumes without cutting them."""
    out = tmp_path / "run"
    assert train(out, "checkpoint_every=2")[0].exit_code == 0
    state_file = out / "checkpoints" / "rl-000004" / "trainer_state.pt"
    state = torch.load(state_file, weights_only=False)
    del state["cursor"]["records"]
    torch.save(state, state_file)
    (out / "summary.json").unlink()  # as a run stopped after its last checkpoint
    before = (out / "metrics.jsonl").read_bytes()
    resumed, _ = train(out, "checkpoint_every=2", "--resume")
    assert resumed.exit_code == 0, resumed.output
    assert (out / "metrics.jsonl").read_bytes() == before


def test_commands_beside_train_never_write_into_another_run(tmp_path):
    """``reward-model`` writes its model and records into its own run directory and refuses
    a used or live one (its metrics and curves went into the config's out_dir, a live run's
    too); ``eval --out`` refuses a run's directory (it replaced its summary.json)."""
    out = tmp_path / "run"
    first, _ = train(out)
    assert first.exit_code == 0, first.output
    before = {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()}
    rm = ["reward-model", "configs/quickstart.yaml", "model.preset=nano", "rm.steps=1",
          "rm.num_pairs=4", "rm.eval_pairs=2", "rm.batch_size=2"]
    result = runner.invoke(app, [*rm, "--out", str(out)])
    assert result.exit_code == 2 and "already holds files" in result.output
    held = claim_run_dir(tmp_path / "live", {}, resume=False, overwrite=False)
    try:
        result = runner.invoke(app, [*rm, "--out", str(tmp_path / "live"), "--overwrite"])
        assert result.exit_code == 2 and "another posttrain run" in result.output
    finally:
        held.close()
    result = runner.invoke(app, ["eval", str(out / "rl_model"), "--config",
                                 "configs/quickstart.yaml", "model.preset=nano",
                                 "eval.num_problems=2", "--out", str(out)])
    assert result.exit_code == 2 and "holds a training run (config.yaml)" in result.output
    assert {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()} == before


def test_the_python_entry_point_has_the_commands_safeguards(tmp_path):
    """``posttrain.recipes.train``: config.yaml, the lock, a used directory refused."""
    from posttrain.config import load_config
    from posttrain.recipes import train as run
    from posttrain.recipes.run_dir import RunDirError

    cfg = load_config("configs/quickstart.yaml", [*SMALL, "rl.steps=1",
                                                  f"out_dir={tmp_path / 'run'}"])
    summary = run(cfg)
    assert (tmp_path / "run" / "config.yaml").is_file() and "eval_after_rl" in summary
    metrics = (tmp_path / "run" / "metrics.jsonl").read_bytes()
    with pytest.raises(RunDirError, match="already holds files"):
        run(cfg)
    assert (tmp_path / "run" / "metrics.jsonl").read_bytes() == metrics
    assert run(cfg, overwrite=True)["eval_after_rl"] == summary["eval_after_rl"]
