"""One CLI: every option explains itself, help lines are whole sentences, bad input is one
line (exit code 2), an unanticipated error is one line (exit code 1), and progress shows
without a terminal."""

import io
import json
import subprocess
import sys
from importlib.metadata import version

import pytest
import typer
from rich.console import Console
from typer.testing import CliRunner

from posttrain.cli import app as cli
from posttrain.reporting import StepProgress

runner = CliRunner()


def commands(group=None, path=()):
    group = group or typer.main.get_command(cli.app)
    for name, command in group.commands.items():
        if hasattr(command, "commands"):
            yield from commands(command, (*path, name))
        else:
            yield " ".join((*path, name)), command


@pytest.mark.parametrize("name,command", list(commands()), ids=lambda c: str(c))
def test_every_option_has_help_and_the_summary_is_one_line(name, command):
    undocumented = [p.name for p in command.params if not getattr(p, "help", None)]
    assert not undocumented, f"{name}: {undocumented}"
    assert "\n" not in command.help.split("\n\n")[0].strip(), name


def test_version():
    result = runner.invoke(cli.app, ["--version"])
    assert result.exit_code == 0 and result.output.strip() == f"posttrain {version('posttrain')}"


def test_python_dash_m_runs_the_same_command():
    """``python -m posttrain.cli.app`` where the script is not installed (as on the GPU)."""
    result = subprocess.run([sys.executable, "-m", "posttrain.cli.app", "--version"],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0 and result.stdout.strip() == f"posttrain {version('posttrain')}"


def test_algorithms_keep_brackets_and_list_sources():
    result = runner.invoke(cli.app, ["algorithms", "--kind", "advantage"],
                           env={"COLUMNS": "400"})
    assert result.exit_code == 0
    assert "1[t = T_i]" in result.output and "source" in result.output


def test_an_unknown_tau_domain_is_one_line(tmp_path):
    result = runner.invoke(cli.app, ["eval", str(tmp_path), "--mode", "tau", "--domain", "nope"])
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert result.exit_code == 2 and len(lines) == 1 and "--domain:" in lines[0]


def test_sft_runs_the_sft_stage_of_a_config_with_other_stages(tmp_path):
    """configs/dpo.yaml sets pref options: they are validated with its stages, not refused
    because the command runs only SFT."""
    result = runner.invoke(cli.app, ["sft", "configs/dpo.yaml", "model.preset=nano",
                                     "sft.steps=1", "eval.num_problems=2", "threads=1",
                                     "--out", str(tmp_path / "run")])
    assert result.exit_code == 0, result.output
    saved = (tmp_path / "run" / "config.yaml").read_text()
    assert "- sft\n" in saved and "- pref" not in saved


def test_sft_data_without_a_valid_row_is_one_line(tmp_path):
    data = tmp_path / "bad.jsonl"
    data.write_text('{"messages": []}\n{"messages": [{"role": "user", "content": "x"}]}\n')
    result = runner.invoke(cli.app, ["train", "configs/quickstart.yaml", "stages=[sft]",
                                     "model.preset=nano", f"sft.data={data}", "threads=1",
                                     "eval.num_problems=2", "--out", str(tmp_path / "run")])
    text = " ".join(result.output.split())
    assert result.exit_code == 2 and \
        "holds no usable row (2 skipped; row 0, counting from 0: messages must be" in text
    assert "Traceback" not in text


def test_sft_on_your_own_data_with_a_generated_task_evaluates_nothing_it_cannot(tmp_path):
    """SFT on tool traces with the config's arithmetic task printed that task's held-out
    table, which says nothing of the traces: it says why there is none instead."""
    data = tmp_path / "chats.jsonl"
    data.write_text("".join(json.dumps({"messages": [
        {"role": "user", "content": f"Hello {i}"},
        {"role": "assistant", "content": f"Hi {i}."}]}) + "\n" for i in range(8)))
    out = tmp_path / "run"
    result = runner.invoke(cli.app, ["sft", "configs/quickstart.yaml", "model.preset=nano",
                                     f"sft.data={data}", "sft.steps=2", "sft.batch_size=2",
                                     "threads=1", "--out", str(out)])
    assert result.exit_code == 0, result.output
    text = " ".join(result.output.split())
    assert "held-out evaluation: none: every stage trains on your own data (sft.data)" in text
    summary = json.loads((out / "summary.json").read_text())
    assert not any(k.startswith("eval_") for k in summary)
    assert summary["evaluation"].startswith("none: every stage trains on your own data")


def test_an_unanticipated_error_is_one_line_with_exit_code_1(monkeypatch, capsys):
    def broken(*args, **kwargs):
        raise RuntimeError("the disk is on fire")

    monkeypatch.setattr("posttrain.models.build_tiny", broken)
    monkeypatch.setattr(sys, "argv", ["posttrain", "build-tiny", "x"])
    with pytest.raises(SystemExit) as exit_:
        cli.main()
    err = " ".join(capsys.readouterr().err.split())
    assert exit_.value.code == 1
    assert err.startswith("error: RuntimeError: the disk is on fire")
    assert "Traceback" not in err


def test_progress_without_a_terminal_prints_lines():
    out = io.StringIO()
    reporter = StepProgress(Console(file=out, force_terminal=False), every_s=0)
    reporter.start("RL", 3)
    for step in range(1, 4):
        reporter.advance(step, f"reward {step / 10:.1f}")
    reporter.finish()
    lines = out.getvalue().splitlines()
    assert lines[0] == "RL: 0/3" and lines[-1].startswith("RL: 3/3")
    assert lines[-1].endswith("reward 0.3") and len(lines) == 4
    assert all(", ETA " in line for line in lines[1:3]) and "ETA" not in lines[-1]


def test_the_eta_is_the_pace_of_the_steps_timed_times_the_steps_left():
    """A stage resumed at step 10 of 50 that took 20 s for its next 10 steps has 30 left: 60 s
    (the 10 steps before the resume are not part of the pace)."""
    from posttrain.reporting.reporter import _Lines

    lines = _Lines("RL", 50, started=100.0, printed=100.0, done_at_start=10)
    assert lines.eta(20, now=120.0) == ", ETA 60 s"
    assert lines.eta(10, now=100.0) == lines.eta(50, now=180.0) == ""
