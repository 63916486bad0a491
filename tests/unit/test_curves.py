"""``curves.png``: a panel per stage that logged rows, each with a y-label; the RL panel
carries the held-out accuracy where RL started (after SFT), its evaluations and where it
ended, with the accuracy before training as a reference line."""

import json

from PIL import Image

from posttrain.reporting import curve_panels, plot_curves, plot_stages
from posttrain.reporting.curves import stage_panels

ROWS = [{"stage": "sft", "step": 1, "loss": 2.0}, {"stage": "sft", "step": 2, "loss": 1.5},
        {"stage": "rl", "step": 1, "reward": 0.1, "accuracy": 0.1},
        {"stage": "rl", "step": 2, "reward": 0.4, "accuracy": 0.3, "eval/accuracy": 0.5},
        {"stage": "rl", "step": 3, "reward": 0.8, "accuracy": 0.7}]
EVALS = {"eval_before": {"accuracy": 0.0}, "eval_after_sft": {"accuracy": 0.3},
         "eval_after_rl": {"accuracy": 0.9}}


def test_each_stage_gets_a_labelled_panel_with_its_held_out_points():
    sft, rl = curve_panels(ROWS, EVALS, ["sft", "rl"])
    assert sft["ylabel"] and rl["ylabel"]
    assert [s[0] for s in sft["series"]] == ["loss"]
    series = {label: (x, y) for label, x, y, _ in rl["series"]}
    assert series["accuracy (held-out)"] == ([0, 2, 3], [0.3, 0.5, 0.9])
    assert series["held-out before training"] == ([0, 3], [0.0, 0.0])
    assert series["reward (train)"] == ([1, 2, 3], [0.1, 0.4, 0.8])


def test_a_stage_without_rows_gets_no_panel(tmp_path):
    rows = [r for r in ROWS if r["stage"] == "sft"]
    assert [p["title"] for p in curve_panels(rows, EVALS, ["sft", "rl"])] == ["SFT"]
    metrics = tmp_path / "metrics.jsonl"
    metrics.write_text("".join(f'{{"stage": "sft", "step": {r["step"]}, "loss": {r["loss"]}}}\n'
                               for r in rows))
    with Image.open(plot_curves(metrics, tmp_path / "curves.png", EVALS, ["sft", "rl"])) as im:
        assert im.width == 650  # one panel of 6.5 inches at 100 dpi


def test_each_stage_in_detail_draws_what_it_logged_with_held_out_points_marked(tmp_path):
    rows = [*ROWS, {"stage": "pref", "step": 1, "loss": 0.7, "reward_accuracy": 0.5},
            {"stage": "pref", "step": 2, "loss": 0.6, "reward_accuracy": 0.6,
             "eval/loss": 0.65, "eval/reward_accuracy": 0.55},
            {"stage": "mine", "step": 1, "a": 1.0, "b": 2.0}]
    rl = stage_panels(rows, "rl")
    assert [p["title"] for p in rl] == ["RL: reward and accuracy"]  # nothing else was logged
    series = {label: (x, y, style) for label, x, y, style in rl[0]["series"]}
    assert series["accuracy (held-out)"] == ([2], [0.5], "o-")
    assert series["reward (train samples)"] == ([1, 2, 3], [0.1, 0.4, 0.8], "-")
    loss, ranking = stage_panels(rows, "pref")
    assert [s[0] for s in loss["series"]] == ["train", "held-out"]
    assert ranking["ylabel"] == "share of pairs with chosen > rejected"
    assert [p["title"] for p in stage_panels(rows, "mine")] == ["MINE: a", "MINE: b"]
    metrics = tmp_path / "metrics.jsonl"
    metrics.write_text("".join(json.dumps(r) + "\n" for r in rows))
    written = plot_stages(metrics, tmp_path)
    assert [p.name for p in written] == ["curves_sft.png", "curves_rl.png", "curves_pref.png",
                                         "curves_mine.png"]
    with Image.open(tmp_path / "curves_pref.png") as im:  # two panels of 5.5 inches
        assert im.width == 1100
