"""Two runs of one config in separate processes train the same numbers, bit for bit, with
two threads each: the CPU uses torch's deterministic kernels (before, ``configs/curio.yaml``'s
SFT ``grad_norm`` differed in the 6th digit within 8 steps, whose rows share a prompt)."""

import json
import subprocess
import sys

import pytest

SHORT = ["sft.steps=8", "sft.log_every=1", "rl.steps=2", "rl.prompts_per_step=4",
         "eval.num_problems=8", "threads=2"]


@pytest.mark.slow
def test_two_processes_train_the_same_numbers(tmp_path):
    runs = [subprocess.Popen([sys.executable, "-m", "posttrain.cli.app", "train",
                              "configs/curio.yaml", *SHORT, "--out", str(tmp_path / str(i))],
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
            for i in range(2)]  # side by side, as the load that once told them apart
    for run in runs:
        assert run.wait(timeout=900) == 0, run.stderr.read()[-2000:]
    metrics = [[json.loads(line) for line in (tmp_path / str(i) / "metrics.jsonl").open()]
               for i in range(2)]
    trained = ("loss", "grad_norm", "entropy", "reward")
    assert [{k: row[k] for k in trained if k in row} for row in metrics[0]] == \
        [{k: row[k] for k in trained if k in row} for row in metrics[1]]
    assert sum("grad_norm" in row for row in metrics[0]) == 10  # 8 SFT and 2 RL steps
    weights = [(tmp_path / str(i) / "rl_model" / "model.safetensors").read_bytes()
               for i in range(2)]
    assert weights[0] == weights[1]
