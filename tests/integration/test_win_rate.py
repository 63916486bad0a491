"""The reward-model win-rate monitor: the rate is a hand count of the policy's scores against
the reference's, warns above its threshold, keeps the reference's scores for a resumed run,
and in a run its reference is the RL stage's starting policy."""

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from posttrain.cli.app import app
from posttrain.config import ConfigError, load_config
from posttrain.recipes.win_rate import WinRateMonitor
from posttrain.types import Episode, Segment

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples/extensions/reverse.yaml"


def episodes(scores):
    segment = Segment.from_prompt_completion([1, 2], [3])
    return [Episode([segment], {"rm": s, "correct": 0.0}, s, "0") for s in scores]


def test_the_rate_is_a_hand_count_and_warns_above_its_threshold(tmp_path):
    warnings = []
    monitor = WinRateMonitor("rm", 0.65, tmp_path / "ref.json", warnings.append)
    monitor.set_reference(episodes([0.5, 0.5, 0.5, 0.5]))
    assert monitor(episodes([0.9, 0.1, 0.5, 0.7])) == {"rm_win_rate": (1 + 0 + 0.5 + 1) / 4}
    assert warnings == []  # 0.625 is under 0.65
    assert monitor(episodes([0.5] * 4)) == {"rm_win_rate": 0.5}  # the reference itself: ties
    assert warnings == []
    assert monitor(episodes([0.9, 0.9, 0.9, 0.1]))["rm_win_rate"] == 0.75
    assert len(warnings) == 1 and "0.750 > 0.65" in warnings[0]
    again = WinRateMonitor("rm", 0.65, tmp_path / "ref.json", warnings.append)
    assert again.reference == [0.5] * 4  # what a resumed run reads back


def test_without_reference_scores_it_refuses(tmp_path):
    with pytest.raises(RuntimeError, match="no reference scores"):
        WinRateMonitor("rm", 0.65, tmp_path / "none.json", print)(episodes([1.0]))


def test_saved_scores_of_another_part_or_count_are_refused(tmp_path):
    WinRateMonitor("rm", 0.65, tmp_path / "ref.json", print).set_reference(episodes([0.5] * 4))
    with pytest.raises(ValueError, match="under 'rm', not 'judge'"):
        WinRateMonitor("judge", 0.65, tmp_path / "ref.json", print)
    with pytest.raises(ValueError, match="has 3 episodes and the reference 4 scores"):
        WinRateMonitor("rm", 0.65, tmp_path / "ref.json", print)(episodes([0.5] * 3))


@pytest.mark.parametrize("overrides,message", [
    (["rl.rm_win_rate_monitor={}"], "needs a reward part with verifier judge"),
    (["reward.parts.q={verifier: judge}", "reward.judges.q={kind: comparison, model: m}",
      "rl.rm_win_rate_monitor={}"], "needs a reward part with verifier judge"),
    (["reward.parts.q={verifier: judge}", "reward.judges.q={kind: score, model: m}",
      "rl.rm_win_rate_monitor.part=correct"], "'correct' is not a part scored by a judge"),
    (["reward.parts.q={verifier: judge}", "reward.judges.q={kind: score, model: m}",
      "rl.rm_win_rate_monitor.warn_above=0.4"], "greater than 0.5"),
])
def test_a_monitor_with_nothing_to_read_is_refused(overrides, message):
    with pytest.raises(ConfigError, match=message):
        load_config("configs/quickstart.yaml", overrides)


def test_in_a_run_the_reference_is_the_starting_policy(tmp_path, monkeypatch):
    monkeypatch.chdir(ROOT)  # the example's file paths are relative to it
    out = tmp_path / "run"
    result = CliRunner().invoke(app, ["train", str(EXAMPLE), f"out_dir={out}",
                                      "rl.rm_win_rate_monitor.warn_above=0.51"])
    assert result.exit_code == 0, result.output
    reference = json.loads((out / "rm_reference_scores.json").read_text())
    assert reference["part"] == "brevity" and len(reference["scores"]) == 16
    summary = json.loads((out / "summary.json").read_text())
    before = summary["eval_before"]["brevity"]
    assert sum(reference["scores"]) / 16 == pytest.approx(before, abs=1e-12)
    rates = [m["eval/rm_win_rate"] for m in map(json.loads, open(out / "metrics.jsonl"))
             if "eval/rm_win_rate" in m]
    assert len(rates) == 2 and all(0 <= r <= 1 for r in rates)
