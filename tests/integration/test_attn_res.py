"""Attention Residuals (ALGORITHMS.md §14 ``attn_res``): the depth attention against hand
numbers, §14's two checks (zero ``w`` is the uniform mean; blocks of one layer are ``full``)
on the model's own layers, a cached decode equal to full forwards, and the config's
refusals."""

import math

import pytest
import torch

from posttrain.config import ConfigError, load_config
from posttrain.engines import TorchEngine
from posttrain.models import build_tiny, load_model
from posttrain.models.architectures.attn_res import AttnResConfig, AttnResForCausalLM, DepthSources
from posttrain.types import SamplingParams

EPS32 = torch.finfo(torch.float32).eps


def test_the_depth_attention_by_hand():
    v0, f1 = torch.tensor([1.0, 0.0]), torch.tensor([0.0, 2.0])
    full = DepthSources(v0, block=None)
    full.add(f1)
    assert torch.equal(full.read(torch.zeros(2), eps=0.0), torch.tensor([0.5, 1.0]))
    # RMSNorm keys: [sqrt 2, 0] and [0, sqrt 2]; w = [1, 0] weighs v0 by e^sqrt2 against 1
    a = math.exp(math.sqrt(2)) / (math.exp(math.sqrt(2)) + 1)
    got = full.read(torch.tensor([1.0, 0.0]), eps=0.0)
    torch.testing.assert_close(got, torch.tensor([a, 2 * (1 - a)]), atol=4 * EPS32, rtol=0)


def test_blocks_sum_their_layers_and_read_the_partial_block():
    v0 = torch.tensor([3.0])
    blocks = DepthSources(v0, block=2)
    for f in (1.0, 2.0, 4.0):
        blocks.add(torch.tensor([f]))
    assert [float(x) for x in blocks.done] == [3.0, 3.0] and float(blocks.partial) == 4.0
    assert float(blocks.read(torch.zeros(1), eps=0.0)) == pytest.approx((3 + 3 + 4) / 3)


def tiny(variant: str, block: int = 2, layers: int = 4) -> AttnResForCausalLM:
    torch.manual_seed(0)
    cfg = AttnResConfig(attn_res=variant, attn_res_block=block, vocab_size=40, hidden_size=16,
                        intermediate_size=32, num_hidden_layers=layers, num_attention_heads=2,
                        num_key_value_heads=2)
    return AttnResForCausalLM(cfg).eval()


def recorded(model, ids):
    """Each layer's input and output, and the final norm's input, as the forward ran."""
    seen = {"in": [], "out": []}
    hooks = [layer.register_forward_pre_hook(lambda m, a: seen["in"].append(a[0]))
             for layer in model.model.layers]
    hooks += [layer.register_forward_hook(
        lambda m, a, o: seen["out"].append(o[0] if isinstance(o, tuple) else o))
        for layer in model.model.layers]
    hooks.append(model.model.norm.register_forward_pre_hook(
        lambda m, a: seen.__setitem__("final", a[0])))
    with torch.no_grad():
        logits = model(input_ids=ids).logits
    for h in hooks:
        h.remove()
    return seen, logits


def test_zero_queries_give_every_layer_the_uniform_mean_of_its_sources():
    model = tiny("full")
    assert float(model.depth_queries.abs().sum()) == 0.0  # zero at the start
    ids = torch.randint(40, (2, 6))
    seen, _ = recorded(model, ids)
    sources = [model.model.embed_tokens(ids).detach()]
    assert torch.equal(seen["in"][0], sources[0])
    for i in range(4):
        sources.append(seen["out"][i] - seen["in"][i])
        want = torch.stack(sources).mean(dim=0)
        got = seen["in"][i + 1] if i < 3 else seen["final"]
        # a softmax of zeros (exactly uniform up to 1 ulp) times sources, summed: a few eps32
        # of the sources' size
        bound = 8 * EPS32 * float(torch.stack(sources).abs().max())
        torch.testing.assert_close(got, want, atol=bound, rtol=0)


def test_blocks_of_one_layer_are_full_and_larger_blocks_differ():
    ids = torch.randint(40, (2, 6))
    with torch.no_grad():
        full, one, two = (tiny(v, b)(input_ids=ids).logits
                          for v, b in (("full", 2), ("block", 1), ("block", 2)))
    assert torch.equal(full, one)
    assert not torch.allclose(full, two)


def test_embeddings_given_directly_start_the_sources_too():
    model = tiny("full")
    ids = torch.randint(40, (2, 6))
    with torch.no_grad():
        by_ids = model(input_ids=ids).logits
        by_embeds = model(inputs_embeds=model.model.embed_tokens(ids)).logits
    assert torch.equal(by_ids, by_embeds)


def test_the_queries_learn_and_change_the_output():
    model = tiny("block", 2).train()
    ids = torch.randint(40, (2, 6))
    model(input_ids=ids, labels=ids).loss.backward()
    assert float(model.depth_queries.grad.abs().sum()) > 0
    before = model(input_ids=ids).logits.detach()
    with torch.no_grad():
        model.depth_queries.normal_()
    assert not torch.allclose(model(input_ids=ids).logits, before)


def test_a_built_preset_loads_and_decodes_with_its_cache_as_full_forwards(tmp_path):
    d = build_tiny(tmp_path / "ar", "nano", attn_res="block", attn_res_block=2)
    model = load_model(d)
    assert type(model).__name__ == "AttnResForCausalLM" and model.config.attn_res == "block"
    with torch.no_grad():
        model.depth_queries.normal_()  # not the uniform start
    engine = TorchEngine(model, pad_token_id=0)
    prompt = [5, 9, 13, 2]
    out = engine.generate([prompt], SamplingParams(temperature=0.0, max_new_tokens=8))[0]
    seq = prompt + out.token_ids
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([seq])).logits[0]
    # each greedy token is the full forward's argmax where the lead is beyond rounding
    for t, token in enumerate(out.token_ids):
        row = logits[len(prompt) - 1 + t]
        top2 = row.topk(2).values
        if float(top2[0] - top2[1]) > 1e-4:
            assert int(row.argmax()) == token


@pytest.mark.parametrize("overrides,message", [
    (["model.attn_res=full", "model.path=m", "model.preset=null"], "tiny llama preset"),
    (["model.attn_res=full", "model.architecture=qwen3"], "tiny llama preset"),
    (["model.attn_res=full", "model.attn_res_block=3"], "attn_res_block is set"),
    (["model.attn_res=full", "critic.enabled=true", "algo.adv_estimator=gae"],
     "critic.enabled cannot load it"),
    (["model.attn_res=block", "engine.name=vllm"], "engine.name=vllm cannot load it"),
    (["model.attn_res=full", "engine.draft_tokens=2"],
     "engine.draft_tokens cannot work with it: speculative decoding runs the fast decoder"),
])
def test_what_cannot_load_the_architecture_is_refused(overrides, message):
    with pytest.raises(ConfigError, match=message):
        load_config("configs/quickstart.yaml", overrides)


def test_a_scalar_head_reward_model_is_refused(tmp_path):
    from typer.testing import CliRunner

    from posttrain.cli.app import app

    result = CliRunner().invoke(app, ["reward-model", "configs/quickstart.yaml",
                                      "model.attn_res=full", f"out_dir={tmp_path}"])
    assert result.exit_code != 0 and "scalar head cannot load it" in result.output
