"""``engine.sleep``: a colocated engine frees its weights' memory for the update and gets them
back with the weight sync that follows; a run with it ends where a run without it does."""

import pytest
import torch

from posttrain.config import OptimConfig
from posttrain.engines import EngineAsleepError, TorchEngine
from posttrain.engines.sleep import held_bytes
from posttrain.recipes.sampling_loop import sync_weights
from posttrain.train import Trainer
from posttrain.types import SamplingParams

PROMPTS = [[1, 5, 9, 13], [4, 4, 8]]
SAMPLING = SamplingParams(max_new_tokens=6, seed=3)


@pytest.mark.parametrize("fast", [True, False], ids=["fused-decoder", "hf-decoder"])
def test_a_sleeping_engine_holds_no_weights_and_wakes_with_the_sync(model, tokenizer, fast):
    engine = TorchEngine(model, tokenizer.pad_token_id, tokenizer.eos_token_id, fast=fast)
    before = engine.generate(PROMPTS, SAMPLING)
    params = list(engine.model.parameters())
    full = held_bytes(params)
    assert full >= sum(p.numel() * p.element_size() for p in model.parameters())
    engine.sleep()
    assert held_bytes(params) == 0  # every storage released, fused projections included
    with pytest.raises(EngineAsleepError, match="asleep"):
        engine.generate(PROMPTS, SAMPLING)
    with pytest.raises(EngineAsleepError):
        engine.score(PROMPTS)
    report = sync_weights(Trainer(model, OptimConfig(), 1), engine, 1, PROMPTS)
    assert held_bytes(params) == full and engine.version == 1
    # the probes score through the restored weights: two float32 forwards in different orders
    # (docs/testing.md), within 16 eps32 of the largest |log-prob| (the mean of the per-token
    # differences is at most their largest)
    largest = max(abs(x) for row in engine.score(PROMPTS) for x in row)
    assert report.mismatch <= 16 * torch.finfo(torch.float32).eps * largest
    assert engine.generate(PROMPTS, SAMPLING) == [
        o.__class__(**{**o.__dict__, "version": 1}) for o in before]


def test_a_partial_update_after_sleep_leaves_the_engine_refusing(model, tokenizer):
    engine = TorchEngine(model, tokenizer.pad_token_id, tokenizer.eos_token_id)
    engine.sleep()
    first = next(iter(model.named_parameters()))
    engine.update_weights([(first[0], first[1].detach())], 1)
    with pytest.raises(EngineAsleepError, match="not every weight was sent"):
        engine.generate(PROMPTS, SAMPLING)
    engine.update_weights(((n, p.detach()) for n, p in model.named_parameters()), 2)
    assert len(engine.generate(PROMPTS, SAMPLING)) == 2


def test_sleep_twice_is_one_sleep(model, tokenizer):
    engine = TorchEngine(model, tokenizer.pad_token_id, tokenizer.eos_token_id)
    engine.sleep()
    engine.sleep()
    engine.update_weights(((n, p.detach()) for n, p in model.named_parameters()), 1)
    with torch.no_grad():
        assert engine.score(PROMPTS)[0][1] < 0


def test_an_engine_whose_checksum_was_taken_can_still_sleep(model, tokenizer):
    """(Hashing a tensor through numpy without a copy pins its storage's size.)"""
    engine = TorchEngine(model, tokenizer.pad_token_id, tokenizer.eos_token_id)
    engine.weights_checksum()
    engine.sleep()
    assert held_bytes(engine.model.parameters()) == 0
