"""The run's metrics as pictures: ``curves.png`` (the run at a glance: a panel a stage) and
``curves_<stage>.png`` (each stage in detail: a panel a quantity)."""

from __future__ import annotations

import json
from pathlib import Path


def _rows(metrics_path: str | Path) -> list[dict]:
    return [json.loads(line) for line in Path(metrics_path).read_text().splitlines() if line]


def _pyplot():
    """matplotlib's pyplot, drawing to files only."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _draw(ax, panel: dict, **plot) -> None:
    """``panel``'s series on ``ax`` (``plot``: options of each line), titled, labelled."""
    for label, x, y, style in panel["series"]:
        ax.plot(x, y, style, label=label, **plot)
    ax.set(title=panel["title"], xlabel="step", ylabel=panel["ylabel"])


def _save(plt, fig, path: str | Path) -> Path:
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return Path(path)


SAMPLED = ("rl", "opd")  # stages that log reward and accuracy of their own samples
YLABEL = {"sft": "loss (assistant tokens)", "pref": "loss", "distill": "divergence",
          "rl": "reward / accuracy", "opd": "reward / accuracy"}


def curve_panels(rows: list[dict], evals: dict, stages: list[str]) -> list[dict]:
    """One panel a stage that logged rows (in the run's order): ``title``, ``ylabel`` and
    ``series`` ``(label, steps, values, style)``. A sampling stage's panel shows the train
    reward and accuracy and the held-out accuracy: where the stage started (after the previous
    stage, or before training), its in-loop evaluations and where it ended; the accuracy before
    any training is a dotted line."""
    panels = []
    for k, stage in enumerate(s for s in stages if any(r["stage"] == s for r in rows)):
        mine = [r for r in rows if r["stage"] == stage]
        steps = [r["step"] for r in mine]
        if stage not in SAMPLED:
            key = "loss" if "loss" in mine[0] else "divergence"
            series = [(key, steps, [r[key] for r in mine], "-")]
        else:
            series = [(f"{m} (train)", steps, [r[m] for r in mine], "-")
                      for m in ("reward", "accuracy")]
            i = stages.index(stage)
            start = evals.get(f"eval_after_{stages[i - 1]}" if i else "eval_before")
            end = evals.get(f"eval_after_{stage}")
            held = ([(0, start["accuracy"])] if start else []) + [
                (r["step"], r["eval/accuracy"]) for r in mine if "eval/accuracy" in r] + (
                [(steps[-1], end["accuracy"])] if end else [])
            if held:
                series.append(("accuracy (held-out)", [h[0] for h in held],
                               [h[1] for h in held], "o-"))
            if "eval_before" in evals and (i or k):
                before = evals["eval_before"]["accuracy"]
                series.append(("held-out before training", [0, steps[-1]], [before, before], ":"))
        panels.append({"title": stage.upper(), "ylabel": YLABEL.get(stage, "value"),
                       "series": series})
    return panels


def plot_curves(metrics_path: str | Path, out_path: str | Path, evals: dict | None = None,
                stages: list[str] | None = None) -> Path:
    """``curve_panels`` of the run's ``metrics.jsonl`` as one PNG, the legends beside the axes."""
    plt, rows = _pyplot(), _rows(metrics_path)
    order = stages or list(dict.fromkeys(r["stage"] for r in rows))
    panels = curve_panels(rows, evals or {}, order)
    fig, axes = plt.subplots(1, max(len(panels), 1), figsize=(6.5 * max(len(panels), 1), 4),
                             squeeze=False)
    for ax, panel in zip(axes[0], panels):
        _draw(ax, panel)
        if len(panel["series"]) > 1:
            ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize="small")
    return _save(plt, fig, out_path)


# stage -> its panels: (title, y-axis label, the metrics drawn, as ``metrics.jsonl`` names)
STAGE_PANELS: dict[str, list[tuple[str, str, tuple[str, ...]]]] = {
    "sft": [("loss", "cross-entropy per assistant token", ("loss",)),
            ("gradient norm", "‖g‖ before clipping", ("grad_norm",)),
            ("learning rate", "lr", ("lr",))],
    "pref": [("loss", "preference loss", ("loss", "eval/loss")),
             ("ranking accuracy", "share of pairs with chosen > rejected",
              ("reward_accuracy", "eval/reward_accuracy")),
             ("reward margin", "implicit reward, chosen - rejected",
              ("reward_margin", "eval/reward_margin"))],
    "reward_model": [("loss", "pairwise loss", ("loss", "eval/loss")),
                     ("ranking accuracy", "share of pairs with chosen > rejected",
                      ("reward_accuracy", "eval/reward_accuracy")),
                     ("score margin", "score, chosen - rejected",
                      ("reward_margin", "eval/reward_margin"))],
    "distill": [("divergence", "divergence per token", ("divergence",)),
                ("on-policy share", "share of the batch the student sampled", ("on_policy",)),
                ("gradient norm", "‖g‖ before clipping", ("grad_norm",))],
    "opd": [("reward and accuracy", "mean over samples",
             ("reward", "accuracy", "eval/accuracy")),
            ("distance to the teachers", "reverse KL per sampled token", ("sampled_rkl",)),
            ("loss", "loss", ("loss",))],
    "rl": [("reward and accuracy", "mean over samples", ("reward", "accuracy", "eval/accuracy")),
           ("response length", "tokens", ("response_length",)),
           ("policy entropy", "nats per token", ("entropy",)),
           ("KL and clipping", "value", ("approx_kl", "clip_frac")),
           ("train/inference mismatch", "mean |log-prob difference|",
            ("mismatch", "sync/mismatch")),
           ("staleness", "policy versions behind", ("staleness/mean", "staleness/max")),
           ("throughput", "sampled tokens per second", ("perf/sampled_tokens_per_s",)),
           ("gradient norm", "‖g‖ before clipping", ("grad_norm",))],
}
LABELS = {"loss": "train", "eval/loss": "held-out", "reward_accuracy": "train",
          "eval/reward_accuracy": "held-out", "reward_margin": "train",
          "eval/reward_margin": "held-out", "reward": "reward (train samples)",
          "accuracy": "accuracy (train samples)", "eval/accuracy": "accuracy (held-out)",
          "approx_kl": "approximate KL to the old policy", "clip_frac": "clipped share",
          "mismatch": "sampled tokens", "sync/mismatch": "probes after the sync",
          "staleness/mean": "mean", "staleness/max": "max"}


def stage_panels(rows: list[dict], stage: str) -> list[dict]:
    """``stage``'s panels (``STAGE_PANELS``, else one a metric) holding the metrics it logged:
    ``title``, ``ylabel`` and ``series`` ``(label, steps, values, style)``; a metric logged on
    only some steps (held-out ones) is drawn with markers."""
    mine = [r for r in rows if r["stage"] == stage]
    logged = {k for r in mine for k in r} - {"stage", "step"}
    layout = STAGE_PANELS.get(stage) or [(k, k, (k,)) for k in sorted(logged)]
    panels = []
    for title, ylabel, keys in layout:
        series = []
        for key in (k for k in keys if k in logged):
            points = [(r["step"], r[key]) for r in mine if isinstance(r.get(key), int | float)]
            series.append((LABELS.get(key, key), [p[0] for p in points], [p[1] for p in points],
                           "o-" if len(points) < len(mine) else "-"))
        if series:
            panels.append({"title": f"{stage.upper()}: {title}", "ylabel": ylabel,
                           "series": series})
    return panels


def plot_stages(metrics_path: str | Path, out_dir: str | Path) -> list[Path]:
    """``curves_<stage>.png`` for every stage in ``metrics.jsonl``: its ``stage_panels`` in a
    grid of up to three columns, a legend on each panel with more than one series."""
    plt, rows = _pyplot(), _rows(metrics_path)
    from matplotlib.ticker import MaxNLocator

    written = []
    for stage in dict.fromkeys(r["stage"] for r in rows):
        panels = stage_panels(rows, stage)
        if not panels:  # (it logged no number)
            continue
        cols = min(3, len(panels))
        lines = -(-len(panels) // cols)
        fig, axes = plt.subplots(lines, cols, figsize=(5.5 * cols, 3.8 * lines), squeeze=False)
        for ax, panel in zip(axes.flat, panels):
            _draw(ax, panel, markersize=4)
            ax.xaxis.set_major_locator(MaxNLocator(integer=True))  # steps are whole
            if len(panel["series"]) > 1:
                ax.legend(fontsize="small")
        for ax in list(axes.flat)[len(panels):]:
            ax.set_visible(False)
        written.append(_save(plt, fig, Path(out_dir) / f"curves_{stage}.png"))
    return written
