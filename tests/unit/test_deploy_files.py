"""The cluster files of docs/scaling.md: the Slurm script starts a Ray head on the job's first
node, a node on each other one, and one run against them; the KubeRay RayJob's run fits its
cluster. Each run's command line is a valid config (``load_config``). The Slurm script runs
here with ``srun``, ``scontrol``, ``ray`` and ``posttrain`` replaced by recorders."""

import json
import os
import shlex
import subprocess
from pathlib import Path

import yaml

from posttrain.config import load_config

ROOT = Path(__file__).resolve().parents[2]
SHIMS = {
    "scontrol": 'printf "gpu-a\\ngpu-b\\n"',
    "srun": 'node=""; while [[ $1 == -* ]]; do if [[ $1 == -w ]]; then node=$2; shift 2; '
            'else shift; fi; done; echo "srun $node $*" >> "$LOG"; '
            'if [[ $1 == hostname ]]; then echo 10.1.2.3; else "$@"; fi',
    "ray": 'echo "ray $*" >> "$LOG"',
    "posttrain": 'python -c "import json, sys; print(json.dumps(sys.argv[1:]))" "$@" > "$RUN"',
}


def valid_run(argv: list[str]):
    """The config of a ``posttrain train CONFIG [KEY=VALUE ...] [--out DIR]`` command line."""
    assert argv[:1] == ["train"], argv
    overrides = [a for a in argv[2:] if "=" in a and not a.startswith("--")]
    return load_config(ROOT / argv[1], overrides)


def test_the_slurm_script_starts_a_head_then_the_nodes_then_the_run(tmp_path):
    for name, body in SHIMS.items():
        (tmp_path / name).write_text(f"#!/usr/bin/env bash\n{body}\n")
        (tmp_path / name).chmod(0o755)
    env = {**os.environ, "PATH": f"{tmp_path}:{os.environ['PATH']}", "LOG": str(tmp_path / "log"),
           "RUN": str(tmp_path / "run.json"), "SLURM_JOB_NODELIST": "gpu-[a-b]",
           "SLURM_JOB_NUM_NODES": "2", "SLURM_CPUS_PER_TASK": "8", "RAY_START_WAIT": "1"}
    subprocess.run(["bash", str(ROOT / "deploy" / "slurm.sh"), "configs/quickstart.yaml",
                    "--out", "runs/x"], check=True, env=env, cwd=ROOT, timeout=60)
    log = (tmp_path / "log").read_text().splitlines()
    head = next(line for line in log if "--head" in line)
    assert head.startswith("srun gpu-a ray start --head --node-ip-address=10.1.2.3 --port=6379")
    assert any(line.startswith("srun gpu-b ray start --address=10.1.2.3:6379") for line in log)
    assert log.index(head) < next(i for i, line in enumerate(log) if "--address" in line)
    cfg = valid_run(json.loads((tmp_path / "run.json").read_text()))
    assert (cfg.dist.address, cfg.dist.engines, cfg.dist.cpus_per_engine) == \
        ("10.1.2.3:6379", 2, 4.0)  # one engine a node, half of its CPUs


def test_the_rayjob_runs_a_valid_config_that_fits_its_cluster():
    job = yaml.safe_load((ROOT / "deploy" / "rayjob.yaml").read_text())
    assert (job["apiVersion"], job["kind"]) == ("ray.io/v1", "RayJob")
    argv = shlex.split(job["spec"]["entrypoint"])
    assert argv[0] == "posttrain"
    cfg = valid_run(argv[1:])
    assert cfg.dist.backend == "ray" and cfg.dist.address is None  # the job's RAY_ADDRESS
    cluster = job["spec"]["rayClusterSpec"]
    assert cluster["headGroupSpec"]["rayStartParams"]["num-cpus"] == "0"  # the driver's
    workers = cluster["workerGroupSpecs"]
    cpus = sum(w["replicas"] * float(w["rayStartParams"]["num-cpus"]) for w in workers)
    assert cfg.dist.engines * cfg.dist.cpus_per_engine <= cpus
    for group in [cluster["headGroupSpec"], *workers]:
        (container,) = group["template"]["spec"]["containers"]
        assert container["image"] and container["resources"]["limits"]["cpu"]
