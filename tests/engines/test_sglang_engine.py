"""``SGLangEngine`` on a GPU machine (``gpu`` marker; never in CPU CI): greedy tokens agree
with ``TorchEngine``, prompt log-probs with the trainer, and a verified weight sync keeps
parity."""

import pytest
import torch

pytestmark = pytest.mark.gpu
sglang = pytest.importorskip("sglang")
if not torch.cuda.is_available():
    pytest.skip("SGLang needs a CUDA GPU", allow_module_level=True)

from posttrain.config import OptimConfig  # noqa: E402
from posttrain.engines import TorchEngine  # noqa: E402
from posttrain.engines.sglang_engine import SGLangEngine  # noqa: E402
from posttrain.models import build_tiny, load_model, load_tokenizer  # noqa: E402
from posttrain.recipes.sampling_loop import sync_weights  # noqa: E402
from posttrain.train import Trainer  # noqa: E402
from posttrain.types import SamplingParams  # noqa: E402


def test_sglang_matches_torch_and_the_trainer_across_a_sync(tmp_path):
    micro = build_tiny(tmp_path / "micro", "micro", seed=0)
    tokenizer = load_tokenizer(micro)
    engine = SGLangEngine(micro)
    prompts = [tokenizer.encode(t) for t in ("What is 12+34?", "hello")]
    greedy = SamplingParams(max_new_tokens=8, temperature=0.0)
    local = TorchEngine(load_model(micro), tokenizer.pad_token_id, tokenizer.eos_token_id)
    assert [o.token_ids for o in engine.generate(prompts, greedy)] == [
        o.token_ids for o in local.generate(prompts, greedy)]
    trainer = Trainer(load_model(micro), OptimConfig(), 1)
    with torch.no_grad():
        for p in trainer.model.parameters():
            p.add_(0.05 * torch.randn_like(p))
    report = sync_weights(trainer, engine, 1, [p + [5, 6, 7] for p in prompts])
    assert engine.version == 1 and report.mismatch < 1e-4


def test_a_sleeping_sglang_engine_frees_gpu_memory_and_wakes_with_the_sync(tmp_path):
    micro = build_tiny(tmp_path / "micro", "micro", seed=0)
    tokenizer = load_tokenizer(micro)
    engine = SGLangEngine(micro, sleep=True)
    prompts = [tokenizer.encode("What is 12+34?")]
    greedy = SamplingParams(max_new_tokens=8, temperature=0.0)
    before = [o.token_ids for o in engine.generate(prompts, greedy)]
    free_awake = torch.cuda.mem_get_info()[0]
    engine.sleep()
    assert torch.cuda.mem_get_info()[0] > free_awake  # its process gave memory back
    report = sync_weights(Trainer(load_model(micro), OptimConfig(), 1), engine, 1,
                          [p + [5, 6, 7] for p in prompts])
    assert report.mismatch < 1e-4
    assert [o.token_ids for o in engine.generate(prompts, greedy)] == before
