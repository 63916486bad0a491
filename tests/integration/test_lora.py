"""LoRA through peft: only the adapters train, the base stays frozen, and what leaves the
trainer (engine weights, saved models) is the merged model, equal to the adapted one; a run
resumed from a checkpoint continues exactly; SFT, DPO and RL all run through the CLI."""

import copy
import json
import random
import shutil
import warnings

import pytest
import torch
from typer.testing import CliRunner

from posttrain.cli.app import app
from posttrain.config import LoraConfig, OptimConfig, TrainerConfig
from posttrain.data.conversations import conversation_segment
from posttrain.engines import TorchEngine
from posttrain.envs import ArithmeticTasks
from posttrain.models import load_model, save_model, sequence_logprobs
from posttrain.models.lora import base_name
from posttrain.train import Trainer, sft_step
from posttrain.types import Batch, Episode

TASKS = ArithmeticTasks(("+",), 2)
LORA = TrainerConfig(lora=LoraConfig(r=4, alpha=8))


def batch(tokenizer, n=8, seed=0):
    rng = random.Random(seed)
    convs = [TASKS.sft_conversation(p, 0.0, rng) for p in TASKS.sample(n, rng)]
    return Batch.from_episodes([Episode([conversation_segment(tokenizer, c)]) for c in convs],
                               tokenizer.pad_token_id)


def test_only_adapters_train_and_the_merged_model_is_the_adapted_one(model, tokenizer,
                                                                      tmp_path):
    base = {n: p.detach().clone() for n, p in model.named_parameters()}
    with warnings.catch_warnings():  # peft's FutureWarning from transformers (add_lora)
        warnings.simplefilter("error", FutureWarning)
        trainer = Trainer(model, OptimConfig(lr=1e-2), 3, LORA)
    trainable = [n for n, p in trainer.model.named_parameters() if p.requires_grad]
    assert trainable and all("lora_" in n for n in trainable)
    for _ in range(3):
        sft_step(trainer, batch(tokenizer))
    merged = dict(trainer.named_weights())
    assert set(merged) == set(base)  # the plain model's names
    frozen = {base_name(n): p for n, p in model.named_parameters() if "lora_" not in n}
    assert all(torch.equal(frozen[n], base[n]) for n in base)  # base untouched in place
    assert any(not torch.equal(merged[n], base[n]) for n in base)
    plain = trainer.export_model()
    assert type(plain).__name__ == "LlamaForCausalLM"
    b = batch(tokenizer, 4, seed=1)
    with torch.no_grad():
        want = sequence_logprobs(trainer.model, b.input_ids, b.attention_mask)[0]
        got = sequence_logprobs(plain, b.input_ids, b.attention_mask)[0]
    # W x + B A x s and (W + B A s) x are two float32 computations of the same log-probs:
    # within 16 eps32 of the largest (~8 chained float32 reductions, ~2 eps32 each)
    eps32 = torch.finfo(torch.float32).eps
    torch.testing.assert_close(got, want, atol=16 * eps32 * float(want.abs().max()), rtol=0)
    engine = TorchEngine(load_model_from(plain, tokenizer, tmp_path), tokenizer.pad_token_id)
    reference = TorchEngine(copy.deepcopy(plain), tokenizer.pad_token_id)
    engine.update_weights(trainer.named_weights(), 3)
    assert engine.weights_checksum() == reference.weights_checksum()


def load_model_from(model, tokenizer, tmp_path):
    save_model(model, tokenizer, tmp_path / "merged")
    return load_model(tmp_path / "merged")


def test_adapter_state_resumes_exactly(model, tokenizer):
    torch.manual_seed(0)  # the adapters' random initialisation
    straight = Trainer(copy.deepcopy(model), OptimConfig(lr=1e-2), 4, LORA)
    for k in range(4):
        sft_step(straight, batch(tokenizer, seed=k))
    torch.manual_seed(0)
    first = Trainer(copy.deepcopy(model), OptimConfig(lr=1e-2), 4, LORA)
    for k in range(2):
        sft_step(first, batch(tokenizer, seed=k))
    state = first.state_dict()
    resumed = Trainer(copy.deepcopy(model), OptimConfig(lr=1e-2), 4, LORA)
    resumed.load_state_dict(state)
    for k in range(2, 4):
        sft_step(resumed, batch(tokenizer, seed=k))
    a, b = dict(straight.named_weights()), dict(resumed.named_weights())
    assert all(torch.equal(a[n], b[n]) for n in a)


@pytest.mark.parametrize("stages,extra", [
    ("[sft, pref]", ["pref.steps=2", "pref.batch_size=4", "pref.num_pairs=8",
                     "pref.eval_pairs=4", "pref.eval_every=0"]),
    ("[sft, rl]", ["rl.steps=2", "rl.prompts_per_step=2", "rl.group_size=2"]),
])
def test_lora_stages_through_the_cli_save_merged_models(stages, extra, tmp_path):
    out = tmp_path / "run"
    result = CliRunner().invoke(app, [
        "train", "configs/quickstart.yaml", f"out_dir={out}", "model.preset=nano",
        f"stages={stages}", "sft.steps=2", "sft.batch_size=4", "sft.num_examples=8",
        "eval.num_problems=2", "trainer.lora={r: 4, alpha: 8}", *extra])
    assert result.exit_code == 0, result.output
    for stage in stages.strip("[]").split(", "):
        config = json.loads((out / f"{stage}_model" / "config.json").read_text())
        assert config["architectures"] == ["LlamaForCausalLM"]  # merged, no adapter files
        assert not (out / f"{stage}_model" / "adapter_config.json").exists()


def test_a_lora_run_resumed_through_the_cli_ends_where_the_straight_run_does(tmp_path):
    """The checkpoint holds the merged model and the adapter: resuming rebuilds the stage's
    starting model, reloads the adapter and continues exactly."""
    common = ["train", "configs/quickstart.yaml", "model.preset=nano", "stages=[sft]",
              "sft.steps=4", "sft.batch_size=4", "sft.num_examples=8", "eval.num_problems=2",
              "trainer.lora={r: 4, alpha: 8}", "checkpoint_every=2"]
    runner = CliRunner()
    a, b = tmp_path / "a", tmp_path / "b"
    for out in (a, b):
        assert runner.invoke(app, [*common, f"out_dir={out}"]).exit_code == 0
    shutil.rmtree(b / "checkpoints" / "sft-000004")  # as if stopped after step 2
    (b / "checkpoints" / "latest").write_text(json.dumps({"tag": "sft-000002"}))
    shutil.rmtree(b / "sft_model")
    (b / "summary.json").unlink()  # a stopped run has none (a complete one says so)
    resumed = runner.invoke(app, [*common, f"out_dir={b}", "--resume"])
    assert resumed.exit_code == 0 and "resuming from sft-000002" in resumed.output
    wa, wb = (load_model(out / "sft_model").state_dict() for out in (a, b))
    assert all(torch.equal(wa[k], wb[k]) for k in wa)
