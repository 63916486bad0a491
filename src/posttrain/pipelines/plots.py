"""``curves.png``: SFT loss, RL reward and accuracy against step, from ``metrics.jsonl``."""

from __future__ import annotations

import json
from pathlib import Path


def plot_curves(metrics_path: str | Path, out_path: str | Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [json.loads(line) for line in Path(metrics_path).read_text().splitlines() if line]
    sft = [r for r in rows if r["stage"] == "sft"]
    rl = [r for r in rows if r["stage"] == "rl"]
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4))
    ax1.plot([r["step"] for r in sft], [r["loss"] for r in sft], color="tab:blue")
    ax1.set(title="SFT", xlabel="step", ylabel="loss (assistant tokens)")
    ax2.plot([r["step"] for r in rl], [r["reward"] for r in rl], label="reward (train)")
    ax2.plot([r["step"] for r in rl], [r["accuracy"] for r in rl], label="accuracy (train)")
    ev = [r for r in rl if "eval/accuracy" in r]
    ax2.plot([r["step"] for r in ev], [r["eval/accuracy"] for r in ev], "o-",
             label="accuracy (held-out)")
    ax2.set(title="RL", xlabel="step", ylim=(0, 1.15))
    ax2.legend(loc="lower right")
    fig.tight_layout()
    fig.savefig(out_path, dpi=100)
    plt.close(fig)
    return Path(out_path)
