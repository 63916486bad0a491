"""What the environment-library tests (verifiers, NeMo-Gym) share: a tiny model that
answers by a rule of the test's, through the rollout engine the library's agent is served."""

import json

from typer.testing import CliRunner

from posttrain.cli.app import app
from posttrain.engines import TorchEngine
from posttrain.engines.base import GenerationOutput
from posttrain.models import build_tiny, load_model, load_tokenizer


class Replier(TorchEngine):
    """A rollout engine whose completion of a prompt is ``reply(decoded prompt)`` (then eos),
    each token at log-prob 0: lets a test know what the policy says."""

    def __init__(self, model, tokenizer) -> None:
        super().__init__(model, tokenizer.pad_token_id, tokenizer.eos_token_id)
        self.tokenizer = tokenizer

    def reply(self, prompt: str) -> str:
        raise NotImplementedError

    def generate(self, prompts, sampling, seeds=None):
        outs = []
        for prompt in prompts:
            ids = self.tokenizer.encode(self.reply(self.tokenizer.decode(prompt)),
                                        add_special_tokens=False) + [self.tokenizer.eos_token_id]
            outs.append(GenerationOutput(list(prompt), ids, [0.0] * len(ids), "stop",
                                         self.version))
        return outs


def tiny_model(folder):
    """A nano model and its tokenizer, built into ``folder``."""
    d = build_tiny(folder, "nano")
    return load_model(d), load_tokenizer(d)


def rl_steps(config: str, python: str, out) -> list[dict]:
    """Two RL steps of the example ``config`` on a fresh nano model, its library run by
    ``python``, through the CLI: the metrics rows of the steps that report ``correct``."""
    result = CliRunner().invoke(app, [
        "train", config, "model.preset=nano", "model.path=null", "threads=1",
        f"task.python={python}", "rl.steps=2", "rl.prompts_per_step=2", "rl.group_size=2",
        "rl.max_new_tokens=8", "eval.num_problems=2", "eval.max_new_tokens=8",
        f"out_dir={out}"])
    assert result.exit_code == 0, result.output
    rows = [json.loads(line) for line in open(out / "metrics.jsonl")]
    return [r for r in rows if r.get("stage") == "rl" and "reward/correct" in r]
