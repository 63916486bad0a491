#!/usr/bin/env bash
# posttrain on a Slurm allocation: a Ray cluster over the job's nodes (the first one the head),
# then one run whose rollout engines spread over them (docs/scaling.md). Submit with
#   sbatch deploy/slurm.sh configs/quickstart.yaml --out runs/cluster
# Every node sees the same checkout and out_dir (a shared filesystem), and the same Python
# environment with posttrain[ray] installed.
#SBATCH --job-name=posttrain
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=1
#SBATCH --cpus-per-task=8
#SBATCH --time=04:00:00
set -euo pipefail

CONFIG=${1:-configs/quickstart.yaml}
shift || true
PORT=6379
ENGINES=${ENGINES:-$SLURM_JOB_NUM_NODES}  # one engine a node
CPUS=${SLURM_CPUS_PER_TASK:-8}
WAIT=${RAY_START_WAIT:-15}  # seconds for a node's `ray start` to join

mapfile -t NODES < <(scontrol show hostnames "$SLURM_JOB_NODELIST")
HEAD=${NODES[0]}
HEAD_IP=$(srun --nodes=1 --ntasks=1 -w "$HEAD" hostname --ip-address | awk '{print $1}')
# `ray start` turns token authentication on: every node and the driver share one token
export RAY_AUTH_MODE=token RAY_AUTH_TOKEN=${RAY_AUTH_TOKEN:-$(python -c \
    'import secrets; print(secrets.token_hex(32))')}

srun --nodes=1 --ntasks=1 -w "$HEAD" \
    ray start --head --node-ip-address="$HEAD_IP" --port=$PORT --num-cpus="$CPUS" --block &
sleep "$WAIT"
for node in "${NODES[@]:1}"; do
    srun --nodes=1 --ntasks=1 -w "$node" \
        ray start --address="$HEAD_IP:$PORT" --num-cpus="$CPUS" --block &
done
sleep "$WAIT"

posttrain train "$CONFIG" rl.mode=async dist.backend=ray dist.address="$HEAD_IP:$PORT" \
    dist.engines="$ENGINES" dist.placement=disaggregated dist.engine_strategy=spread \
    dist.cpus_per_engine="$((CPUS / 2))" "$@"
