"""``report_to``: a short SFT -> RL run logs to TensorBoard, Weights & Biases (offline),
Trackio and MLflow through the real libraries, and each one's local files read back hold the
same metrics, at the same steps, as ``metrics.jsonl``, and a samples table per evaluation.
The run is a subprocess: Trackio fixes its store (``TRACKIO_DIR``) when first imported."""

import glob
import json
import os
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

SHORT = ["stages=[sft, rl]", "model.preset=nano", "threads=1", "sft.steps=4", "sft.log_every=2",
         "sft.num_examples=40", "sft.batch_size=4", "rl.steps=3", "rl.prompts_per_step=2",
         "rl.group_size=2", "rl.max_new_tokens=4", "rl.eval_every=2", "eval.num_problems=3",
         "eval.max_new_tokens=4", "report_to=[tensorboard, wandb, trackio, mlflow]"]


def wandb_history(run_file: Path) -> list[dict]:
    """The history rows of a ``.wandb`` file (a LevelDB-style log of protobuf records:
    32 KiB blocks, each record a ``<crc32, length, kind>`` header and a chunk)."""
    from wandb.proto import wandb_internal_pb2 as pb

    data, pos, chunk, rows = run_file.read_bytes(), 7, b"", []
    assert data[:4] == b":W&B"
    while pos + 7 <= len(data):
        left = 32768 - pos % 32768
        _, length, kind = struct.unpack("<IHB", data[pos:pos + 7])
        if left < 7 or kind == 0:  # the block's padding
            pos += left
            continue
        chunk, pos = chunk + data[pos + 7:pos + 7 + length], pos + 7 + length
        if kind in (1, 4):  # a whole record, or its last chunk
            record = pb.Record()
            record.ParseFromString(chunk)
            chunk = b""
            if record.WhichOneof("record_type") == "history":
                rows.append({i.key or "/".join(i.nested_key): json.loads(i.value_json)
                             for i in record.history.item})
    return rows


def by_stage_step(rows: list[dict]) -> dict[tuple[str, int], float]:
    """``(stage/metric, step) -> value`` of tracker rows that carry ``<stage>/step``."""
    table = {}
    for row in rows:
        stage = next((k.removesuffix("/step") for k in row if k.endswith("/step")), None)
        for key, value in row.items() if stage else ():
            if key.startswith(f"{stage}/") and key != f"{stage}/step" \
                    and isinstance(value, int | float):
                table[(key, row[f"{stage}/step"])] = value
    return table


def expected(out: Path) -> dict[tuple[str, int], float]:
    """``(stage/metric, step) -> value`` of every number in ``metrics.jsonl`` (its ``time``
    is when the row was written, not a metric)."""
    table = {}
    for line in (out / "metrics.jsonl").read_text().splitlines():
        row = json.loads(line)
        for key, value in row.items():
            if key not in ("stage", "step", "time") and isinstance(value, int | float):
                table[(f"{row['stage']}/{key}", row["step"])] = float(value)
    return table


def test_each_tracker_holds_the_runs_metrics(tmp_path):
    out, env = tmp_path / "run", {**os.environ, "TRACKIO_DIR": str(tmp_path / "trackio")}
    for key in ("WANDB_MODE", "WANDB_API_KEY", "MLFLOW_TRACKING_URI"):
        env.pop(key, None)  # the defaults: W&B offline, MLflow in the run directory
    config = Path(__file__).resolve().parents[2] / "configs" / "quickstart.yaml"
    elsewhere = tmp_path / "cwd"  # the working directory: nothing may land in it
    elsewhere.mkdir()
    done = subprocess.run([shutil.which("posttrain"), "train", str(config), *SHORT,
                           f"out_dir={out}"], env=env, capture_output=True, text=True,
                          timeout=600, cwd=elsewhere)
    assert done.returncode == 0, done.stderr[-3000:]
    assert list(elsewhere.iterdir()) == []
    want = expected(out)
    assert ("rl/reward", 3) in want and ("sft/loss", 4) in want and ("rl/eval/accuracy", 2) in want
    # RL's last step is evaluated in its loop: that is the final model's table
    tables = {"eval_before", "eval_after_sft", "rl_step_2", "rl_step_3"}

    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    board = EventAccumulator(str(out / "tensorboard"), size_guidance={"scalars": 0})
    board.Reload()
    got = {(tag, e.step): e.value for tag in board.Tags()["scalars"]
           for e in board.Scalars(tag)}
    assert got == pytest.approx(want, rel=1e-6)  # event files store float32
    assert {t.removeprefix("samples/").removesuffix("/text_summary")
            for t in board.Tags()["tensors"] if t.startswith("samples/")} == tables

    (run_file,) = glob.glob(str(out / "wandb" / "offline-run-*" / "run-*.wandb"))
    got = by_stage_step(wandb_history(Path(run_file)))
    assert got == want
    logged = {k.removeprefix("samples/").removesuffix("/_type"): row[k.replace("_type", "nrows")]
              for row in wandb_history(Path(run_file)) for k in row
              if k.startswith("samples/") and k.endswith("/_type") and row[k] == "table-file"}
    assert logged == dict.fromkeys(tables, 3)  # a table of the 3 held-out samples each

    from mlflow.tracking import MlflowClient

    client = MlflowClient(f"sqlite:///{out / 'mlflow.db'}")
    (run,) = client.search_runs([client.get_experiment_by_name("posttrain").experiment_id])
    got = {(key, m.step): m.value for key in run.data.metrics
           for m in client.get_metric_history(run.info.run_id, key)}
    assert got == want
    artifacts = {a.path for a in client.list_artifacts(run.info.run_id, "samples")}
    assert artifacts == {f"samples/{t}.json" for t in tables}

    read = subprocess.run(
        [sys.executable, "-c", "import json; from trackio.sqlite_storage import SQLiteStorage; "
         "print(json.dumps(SQLiteStorage.get_logs('posttrain', 'run')))"],
        env=env, capture_output=True, text=True, timeout=120)
    assert read.returncode == 0, read.stderr
    assert by_stage_step(json.loads(read.stdout)) == want
