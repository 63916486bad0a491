"""Routing replay (R3) on a mixture-of-experts model: the engine records the experts of every
token it processes, the trainer scores each token through them."""

import copy
import random

import pytest
import torch

from posttrain.config import OptimConfig, TrainerConfig
from posttrain.engines import TorchEngine
from posttrain.envs import ArithmeticTasks
from posttrain.models import build_tiny, load_model, load_tokenizer
from posttrain.models.routing import capture, routers
from posttrain.rewards import RewardFunction
from posttrain.rollout import rollout
from posttrain.train import Trainer
from posttrain.types import Batch, Episode, SamplingParams, Segment


@pytest.fixture(scope="module")
def moe(tmp_path_factory):
    d = build_tiny(tmp_path_factory.mktemp("moe") / "m", "nano", seed=0, architecture="qwen3_moe")
    return load_tokenizer(d), load_model(d)


def tilted_routers(model):
    """A copy of ``model`` whose routers are perturbed by 3 % noise (as another kernel or
    precision would tip near ties)."""
    tilted = copy.deepcopy(model)
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for r in routers(tilted):
            r.weight.add_(3e-2 * r.weight.abs().mean() * torch.randn(r.weight.shape,
                                                                      generator=g))
    return tilted


def rollout_batch(engine, tokenizer, n=24):
    prompts = [tokenizer.encode(f"What is {i}+{i + 3}?") for i in range(n)]
    outs = engine.generate(prompts, SamplingParams(max_new_tokens=16, seed=1))
    segs = [Segment.from_prompt_completion(o.prompt_ids, o.token_ids, o.logprobs,
                                           routing=o.routing) for o in outs]
    return outs, Batch.from_episodes([Episode([s]) for s in segs], tokenizer.pad_token_id)


def gaps(model, batch, replay):
    trainer = Trainer(copy.deepcopy(model), OptimConfig(), 1,
                      TrainerConfig(routing_replay=replay))
    m = batch.loss_mask > 0
    return (trainer.compute_logprobs(batch)[m] - batch.behaviour_logprobs[m]).abs()


def test_the_engine_records_the_experts_of_every_processed_token(moe):
    """Prompt tokens and every sampled token but the last carry the experts their own forward
    pass chose (checked against the model run on the whole sequence); the last was never fed."""
    tokenizer, model = moe
    engine = TorchEngine(model, tokenizer.pad_token_id, tokenizer.eos_token_id,
                         record_routing=True)
    outs, _ = rollout_batch(engine, tokenizer, n=3)
    layers, k = len(routers(model)), model.config.num_experts_per_tok
    for o in outs:
        seq = o.prompt_ids + o.token_ids
        assert o.routing.shape == (len(seq), layers, k)
        assert bool((o.routing[-1] == -1).all()) and bool((o.routing[:-1] >= 0).all())
        with torch.no_grad(), capture(model) as rec:
            model(input_ids=torch.tensor([seq]))
        whole = rec.take()
        assert torch.equal(whole[:-1].sort(-1).values, o.routing[:-1].sort(-1).values)
    task = ArithmeticTasks(("+",), 1).sample(2, random.Random(0))
    episodes = rollout(engine, tokenizer, task, RewardFunction({"c": ("numeric", 1.0)}),
                       SamplingParams(max_new_tokens=4, seed=0), 2)
    batch = Batch.from_episodes(episodes, tokenizer.pad_token_id)  # what the update builds
    assert batch.routing is not None and batch.routing.shape[2:] == (layers, k)


def test_replay_reproduces_the_engines_routing_and_only_that(moe):
    """With the trainer's own routing equal to the engine's, replay changes nothing but
    rounding (its gates are the router's softmax over the chosen experts, as Qwen3-MoE's
    normalised top-k). With the engine's routers perturbed (3 % noise, as a different kernel
    or precision would tip them) near ties flip: without replay those tokens' log-probs move far
    more than with it."""
    tokenizer, model = moe
    engine = TorchEngine(model, tokenizer.pad_token_id, tokenizer.eos_token_id,
                         record_routing=True)
    _, batch = rollout_batch(engine, tokenizer)
    same, replayed = gaps(model, batch, False), gaps(model, batch, True)
    assert float(same.max()) < 1e-5 and float(replayed.max()) < 1e-5

    tilted = tilted_routers(model)
    engine = TorchEngine(tilted, tokenizer.pad_token_id, tokenizer.eos_token_id,
                         record_routing=True)
    _, batch = rollout_batch(engine, tokenizer)
    without, with_replay = gaps(model, batch, False), gaps(model, batch, True)
    assert float(without.max()) > 10 * float(with_replay.max())
    assert float(without.mean()) > 5 * float(with_replay.mean())


def test_replay_needs_an_moe_model_and_matching_layers(model, tokenizer):
    with pytest.raises(ValueError, match="needs a mixture-of-experts model"):
        TorchEngine(model, tokenizer.pad_token_id, record_routing=True)


def test_the_load_balancing_loss_enters_the_update(moe):
    """``actor.router_aux_coef``: the reported loss is the model's own auxiliary loss
    (Qwen3-MoE's ``aux_loss`` with ``output_router_logits=True``: transformers'
    ``load_balancing_loss_func`` over the real tokens) of the step's batch, rows of unequal
    length padded, and the step's gradient is the plain step's plus ``coef`` times that loss's
    gradient."""
    from posttrain.config import ActorConfig
    from posttrain.train.rl_update import PolicySteps, policy_steps

    tok, model = moe
    engine = TorchEngine(model, tok.pad_token_id, tok.eos_token_id)
    _, batch = rollout_batch(engine, tok, n=12)  # "What is 9+12?" is longer: padded rows
    assert bool((batch.attention_mask == 0).any())
    batch = batch.replace(advantages=torch.ones(batch.loss_mask.shape) * batch.loss_mask)
    own = copy.deepcopy(model).train()  # as the trainer runs it
    out = own(input_ids=batch.input_ids, attention_mask=batch.attention_mask,
              output_router_logits=True)
    out.aux_loss.backward()
    aux_grad = {n: p.grad for n, p in own.named_parameters() if p.grad is not None}
    # no near tie that a rounding difference between the two forwards could tip: softmax keeps
    # the logits' order, each logit is good to 16 eps32 max|logit| (two float32 forwards in
    # different orders), so the k-th and (k+1)-th logits must be more than twice that apart
    k, real = model.config.num_experts_per_tok, batch.attention_mask.reshape(-1) > 0
    eps = torch.finfo(torch.float32).eps
    for logits in out.router_logits:
        top = logits.detach()[real].topk(k + 1, -1).values
        assert float((top[:, k - 1] - top[:, k]).min()) > 2 * 16 * eps * float(top.abs().max())

    def step(coef):
        trainer = Trainer(copy.deepcopy(model),
                          OptimConfig(lr=1e-2, warmup_steps=0, grad_clip=None), 1,
                          TrainerConfig(micro_batch_size=16, share_prefix=False))
        metrics = policy_steps(trainer, batch, PolicySteps(ActorConfig(router_aux_coef=coef)))
        return metrics, {n: p.grad for n, p in trainer.model.named_parameters()}

    coef = 0.5
    (with_aux, grad), (without, plain) = step(coef), step(0.0)
    # two float32 forwards in different orders (the trainer's decoder pass, the model's own)
    value = float(out.aux_loss.detach())
    assert with_aux["router_aux_loss"] == pytest.approx(value, abs=16 * eps * abs(value), rel=0)
    assert "router_aux_loss" not in without
    gates = [n for n in grad if n.endswith("mlp.gate.weight")]
    assert len(gates) == model.config.num_hidden_layers
    for n, g in grad.items():
        balancing = coef * aux_grad.get(n, torch.zeros_like(g))
        # gradients: 32 eps32 max|grad| for each of the three summed
        bound = 32 * eps * (float(g.abs().max()) + float(plain[n].abs().max())
                            + float(balancing.abs().max()))
        assert float((g - plain[n] - balancing).abs().max()) <= bound, n
        if n in gates:  # the balancing term reaches every router, far above the bound
            assert float(balancing.abs().max()) > 100 * bound, n


def test_the_sync_probes_go_through_the_engines_experts_when_the_trainer_replays(moe):
    """The weight sync's probes compare the trainer with the engine as the update does: an
    engine that records routing gives it to the probes (free routers tipped the other way on
    near ties made a bf16 MoE with replay fail the sync check at 0.0241 > 0.02 after 30 SFT
    steps). With the engine's routers perturbed as above, the routed probes differ far less."""
    from posttrain.recipes.sampling_loop import probe_mismatch

    tokenizer, model = moe
    tilted = tilted_routers(model)
    trainer = Trainer(copy.deepcopy(model), OptimConfig(), 1,
                      TrainerConfig(routing_replay=True))
    probes = [tokenizer.encode(f"What is {i}+{i + 3}? The answer is {2 * i + 3}.")
              for i in range(8)]
    recorded = TorchEngine(tilted, tokenizer.pad_token_id, record_routing=True)
    free = TorchEngine(tilted, tokenizer.pad_token_id)
    routed_gap, free_gap = probe_mismatch(trainer, recorded, probes), \
        probe_mismatch(trainer, free, probes)
    assert free_gap > 5 * routed_gap
    scores, routing = recorded.score_routed(probes)
    assert scores == free.score(probes)  # recording changes no number
    assert [tuple(r.shape[:1]) for r in routing] == [(len(p),) for p in probes]
