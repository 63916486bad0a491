"""A small recorded run the viewer tests share: two RL steps, episodes saved."""

from pathlib import Path

from typer.testing import CliRunner

from posttrain.cli.app import app

RUN = ["train", "configs/quickstart.yaml", "model.preset=nano", "stages=[rl]", "threads=1",
       "rl.steps=2", "rl.prompts_per_step=2", "rl.group_size=3", "rl.max_new_tokens=6",
       "rl.eval_every=1", "eval.num_problems=2", "eval.max_new_tokens=4",
       "rl.save_episodes=true", "reward.parts.correct.verifier=format"]


def recorded_run(path, *overrides: str):
    """Train the small run (with ``overrides``) into ``path``; returns ``path``."""
    result = CliRunner().invoke(app, [*RUN, f"out_dir={path}", *overrides])
    assert result.exit_code == 0, result.output
    return path


def odd_length(completion: str) -> float:
    """A reward function the tiny model earns about half the time (``ODD_LENGTH``: its
    ``reward.parts.correct.verifier``): a run's groups then have reward spread."""
    return float(len(completion) % 2)


ODD_LENGTH = f"reward.parts.correct.verifier={Path(__file__).resolve()}:odd_length"
