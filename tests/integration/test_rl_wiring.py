"""The RL loop wires the catalogue: KL in the reward, multi-reward estimators, dynamic sampling,
the adaptive entropy bonus."""

import copy
import json
import math
import random

import pytest
import torch

from posttrain.algos import get
from posttrain.config import (
    ActorConfig,
    AlgoConfig,
    ConfigError,
    EvalConfig,
    KLConfig,
    OptimConfig,
    RLConfig,
    load_config,
)
from posttrain.engines import TorchEngine
from posttrain.envs import ArithmeticTasks
from posttrain.recipes import run_rl
from posttrain.recipes.sampling_loop import RLRun
from posttrain.reporting import Reporter
from posttrain.rewards import VERIFIERS, RewardFunction
from posttrain.rollout import informative
from posttrain.train import Trainer
from posttrain.train.rl_update import compute_advantages, estimator_options
from posttrain.types import Batch, Episode, SamplingParams, Segment

TASKS = ArithmeticTasks(("+",), 1)


def episodes(rewards, parts=None, groups=None):
    out = []
    for i, r in enumerate(rewards):
        seg = Segment.from_prompt_completion([1, 2], [3, 4], [-0.5, -0.5])
        out.append(Episode([seg], rewards=(parts or [{"a": r}])[i % len(parts or [1])],
                           reward=r, group_id=str((groups or [0] * len(rewards))[i])))
    return out


def test_kl_in_reward_lowers_each_reward_by_the_sequence_kl():
    eps = episodes([1.0, 0.0, 1.0, 0.0])
    b = Batch.from_episodes(eps, 0)
    old = torch.zeros(b.input_ids.shape)
    ref = old - 0.25 * b.loss_mask  # k1 = 0.25 on each of the 2 completion tokens
    b = b.replace(old_logprobs=old, ref_logprobs=ref)
    algo = AlgoConfig(adv_estimator="dr_grpo", kl=KLConfig(coef=2.0, estimator="k1",
                                                           placement="in_reward"))
    adv = compute_advantages(b, eps, algo, {"a": 1.0})
    plain = compute_advantages(b, eps, AlgoConfig(adv_estimator="dr_grpo"), {"a": 1.0})
    # the same KL everywhere: centring removes it (dyadic values throughout: exact)
    torch.testing.assert_close(adv, plain, atol=0, rtol=0)
    ref[0] = old[0] - 1.0 * b.loss_mask[0]  # row 0 drifted further: its reward drops by 2*2*1
    adv = compute_advantages(b.replace(ref_logprobs=ref), eps, algo, {"a": 1.0})
    rewards = torch.tensor([1.0 - 4.0, 0.0 - 1.0, 1.0 - 1.0, 0.0 - 1.0])
    expected = get("advantage", "dr_grpo")(rewards=rewards, group_ids=b.group_index,
                                           mask=b.loss_mask)
    torch.testing.assert_close(adv, expected.to(adv.dtype), atol=0, rtol=0)  # dyadic: exact


def test_multi_reward_estimator_uses_the_named_parts_and_weights():
    parts = [{"c": 1.0, "f": 1.0}, {"c": 1.0, "f": 0.0}, {"c": 0.0, "f": 1.0}, {"c": 0.0, "f": 0.0}]
    eps = episodes([2.0, 1.0, 1.0, 0.0], parts=parts)
    b = Batch.from_episodes(eps, 0)
    adv = compute_advantages(b, eps, AlgoConfig(adv_estimator="gdpo"), {"c": 1.0, "f": 1.0})
    # 1.2247 is sqrt(1.5) to 5 figures (rounding 4e-5 relative); the zeros are float32
    # cancellations of O(1) terms (a few eps32)
    torch.testing.assert_close(adv[:, -1], torch.tensor([1.2247, 0.0, 0.0, -1.2247]),
                               rtol=1e-4, atol=1e-6)


def test_informative_keeps_groups_with_reward_spread():
    eps = episodes([1, 1, 0, 1, 0, 0], groups=[0, 0, 1, 1, 2, 2])
    assert [e.group_id for e in informative(eps)] == ["1", "1"]
    assert informative([]) == []


def run_dynamic(model, tokenizer, tmp_path, mode):
    cfg = RLConfig(steps=2, prompts_per_step=6, group_size=2, max_new_tokens=5, eval_every=0,
                   optim=OptimConfig(lr=1e-3))
    algo = AlgoConfig(dynamic_sampling={"enabled": True, "mode": mode, "max_rounds": 2})
    engine = TorchEngine(model, tokenizer.pad_token_id, tokenizer.eos_token_id)
    run_rl(RLRun(Trainer(model, cfg.optim, 2), tokenizer, TASKS, [],
                 RewardFunction({"len": ("length_mod2", 1.0)}), EvalConfig(), "len",
                 Reporter(tmp_path / mode, quiet=True), cfg=cfg, algo=algo,
                 actor=ActorConfig()), engine)
    lines = (tmp_path / mode / "metrics.jsonl").read_text().splitlines()
    return [json.loads(line) for line in lines]


def test_dynamic_sampling_drops_or_refills_groups_without_signal(model, tokenizer, tmp_path,
                                                                 monkeypatch):
    # the untrained model never answers correctly; a length-based reward gives some spread
    monkeypatch.setitem(VERIFIERS, "length_mod2", lambda text, ref: len(text) % 2)
    drop = run_dynamic(copy.deepcopy(model), tokenizer, tmp_path, "drop")
    refill = run_dynamic(copy.deepcopy(model), tokenizer, tmp_path, "resample")
    assert [r["extra_generations"] for r in drop] == [0.0, 0.0]
    assert drop[0]["kept_groups"] < 6  # the first round lacked signal in some group
    assert refill[0]["extra_generations"] > 0 and refill[0]["extra_generations"] % 2 == 0
    assert refill[0]["kept_groups"] > drop[0]["kept_groups"]  # same first round, then refilled
    assert all(r["kept_groups"] <= 6 for r in drop + refill)


def test_config_rejects_combinations_that_cannot_take_effect():
    with pytest.raises(ConfigError, match="combines several reward.parts"):
        load_config(None, ["algo.adv_estimator=gdpo",
                           "reward.parts={correct: {verifier: numeric}}"])
    with pytest.raises(ConfigError, match="in_reward applies to one scalar reward"):
        load_config(None, ["algo.adv_estimator=gdpo", "algo.kl.coef=0.1",
                           "algo.kl.placement=in_reward"])
    with pytest.raises(ConfigError, match="offpolicy.correction is null"):
        load_config(None, ["algo.offpolicy.bounds=[0.5, 2]"])
    with pytest.raises(ConfigError, match="is_k3"):
        load_config(None, ["algo.kl.estimator=is_k3", "algo.kl.placement=in_reward"])


def test_critic_fits_returns(tiny_dir):
    from posttrain.config import CriticConfig, TrainerConfig
    from posttrain.models import load_value_model
    from posttrain.train import critic_step, critic_values

    torch.manual_seed(0)
    critic = Trainer(load_value_model(tiny_dir), OptimConfig(lr=1e-3), 20,
                     TrainerConfig(micro_batch_size=2))
    b = Batch.from_episodes(episodes([1.0, 0.0, 1.0]), 0)
    values = critic_values(critic, b)
    assert values.shape == b.input_ids.shape and torch.all(values[b.loss_mask == 0] == 0)
    with pytest.raises(ValueError, match="old_values"):
        critic_step(critic, b, 0.2, "token_mean")
    returns = b.rewards[:, None] * b.loss_mask
    losses = []
    for _ in range(8):
        b = b.replace(old_values=critic_values(critic, b), returns=returns)
        losses.append(critic_step(critic, b, CriticConfig().cliprange_value, "token_mean")
                      ["critic/loss"])
    assert losses[-1] < 0.5 * losses[0]


def test_gae_and_critic_go_together():
    load_config(None, ["algo.adv_estimator=gae", "critic.enabled=true", "algo.lam=0.9"])
    with pytest.raises(ConfigError, match="gae and critic.enabled go together"):
        load_config(None, ["algo.adv_estimator=gae"])
    with pytest.raises(ConfigError, match="gae and critic.enabled go together"):
        load_config(None, ["critic.enabled=true"])
    with pytest.raises(ConfigError, match="algo.gamma only acts with adv_estimator in"):
        load_config(None, ["algo.gamma=0.9"])


@pytest.mark.parametrize("placement", ["in_loss", "in_reward"])
def test_adaptive_kl_controller_steers_the_coefficient(model, tokenizer, tmp_path, placement):
    cfg = RLConfig(steps=3, prompts_per_step=2, group_size=2, max_new_tokens=4, eval_every=0,
                   optim=OptimConfig(lr=1e-4))
    algo = AlgoConfig(kl={"coef": 0.1, "estimator": "k1", "placement": placement,
                          "controller": "adaptive", "target": 10.0})
    trainer = Trainer(model, cfg.optim, 3, ref_model=copy.deepcopy(model))
    engine = TorchEngine(model, tokenizer.pad_token_id, tokenizer.eos_token_id)
    run_rl(RLRun(trainer, tokenizer, TASKS, [], RewardFunction({"c": ("numeric", 1.0)}),
                 EvalConfig(), "c", Reporter(tmp_path, quiet=True), cfg=cfg, algo=algo,
                 actor=ActorConfig()), engine)
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    # the measured KL stays far below the target: the coefficient halves every step
    assert [r["kl_coef"] for r in rows] == pytest.approx([0.1, 0.05, 0.025])
    assert trainer.state_dict()["objective_state"]["rl"]["kl_coef"] == pytest.approx(0.0125)
    with pytest.raises(ConfigError, match="adaptive and kl.target go together"):
        load_config(None, ["algo.kl.controller=adaptive"])


def test_reinforce_plus_plus_gets_outcome_rewards_and_the_token_kl_once():
    """Per-token returns of ``r_t = -beta k1_t + 1[t = T] R`` (the KL counted once, not also
    taken off the episode reward), whitened over the batch's tokens; by hand in float64."""
    eps = episodes([1.0, 0.0, 1.0, 0.0])
    b = Batch.from_episodes(eps, 0)
    old = torch.zeros(b.input_ids.shape)
    ref = old - 0.25 * b.loss_mask
    ref[0] = old[0] - 1.0 * b.loss_mask[0]  # row 0 drifted further
    b = b.replace(old_logprobs=old, ref_logprobs=ref)
    algo = AlgoConfig(adv_estimator="reinforce_plus_plus",
                      kl=KLConfig(coef=2.0, estimator="k1", placement="in_reward"))
    adv = compute_advantages(b, eps, algo, {"a": 1.0})
    returns = []  # two completion tokens a row: G_0 = r_0 + r_1, G_1 = r_1
    for reward, k1 in zip([1.0, 0.0, 1.0, 0.0], [1.0, 0.25, 0.25, 0.25]):
        r0, r1 = -2.0 * k1, -2.0 * k1 + reward
        returns += [r0 + r1, r1]
    mean = sum(returns) / len(returns)
    var = sum((g - mean) ** 2 for g in returns) / (len(returns) - 1)  # unbiased, as the spec
    expected = [(g - mean) / (var + 1e-8) ** 0.5 for g in returns]
    got = adv[b.loss_mask.bool()].tolist()
    assert got == pytest.approx(expected, rel=1e-6)  # float32 of float64 arithmetic
    cfg = load_config(None, ["stages=[rl]", "algo.adv_estimator=reinforce_plus_plus",
                             "rl.group_size=1", "algo.gamma=0.9"])
    assert estimator_options(cfg.algo) == {"gamma": 0.9}
    with pytest.raises(ConfigError, match="is an agent task"):
        load_config(None, ["task.name=calculator", "algo.adv_estimator=reinforce_plus_plus"])


def test_gd2po_options_reach_the_estimator_from_config():
    """``snr`` keeps a row iff ``|sum c| / (sum |c| + eps) >= tau``: with tau 0.5 the mixed row
    (terms +w A_c, -w A_f of equal size) is dropped, and it decides the result."""
    parts = [{"c": 1.0, "f": 0.0}, {"c": 0.0, "f": 1.0}, {"c": 1.0, "f": 1.0},
             {"c": 0.0, "f": 0.0}]
    eps = episodes([1.0, 1.0, 2.0, 0.0], parts=parts)
    b = Batch.from_episodes(eps, 0)
    cfg = load_config(None, ["stages=[rl]", "algo.adv_estimator=gd2po", "reward.parts={}",
                             "reward.parts.c.verifier=exact", "reward.parts.f.verifier=format",
                             "reward.accuracy_part=c", "algo.conflict_filter=snr",
                             "algo.tau=0.5", "algo.query_weight=false"])
    assert estimator_options(cfg.algo) == {"filter": "snr", "tau": 0.5, "query_weight": False}
    adv = compute_advantages(b, eps, cfg.algo, {"c": 1.0, "f": 1.0})
    direct = get("advantage", "gd2po")(
        rewards=torch.tensor([[p["c"], p["f"]] for p in parts], dtype=torch.float64),
        group_ids=b.group_index, mask=torch.ones(4, 2), weights=[1.0, 1.0], filter="snr",
        tau=0.5, query_weight=False)
    torch.testing.assert_close(adv[:, -2:], direct[:, :2].to(adv.dtype) * b.loss_mask[:, -2:])
    hard = compute_advantages(b, eps, AlgoConfig(adv_estimator="gd2po"), {"c": 1.0, "f": 1.0})
    assert not torch.equal(adv, hard)  # the options changed the advantages
    with pytest.raises(ConfigError, match="algo.tau only acts with adv_estimator in"):
        load_config(None, ["algo.tau=0.5"])


def test_taco_from_config_scales_positive_advantages_of_tail_tokens():
    """The spec's example: p = .01, H = 1, alpha = 1, lam = .5 give w = .51359, so A = 2
    becomes 1.0272 on that token; a likely token (p = .5, r_tail < 0) keeps its A; negative
    advantages are never scaled."""
    eps = episodes([1.0, 0.0])  # grpo: A = +0.7071, -0.7071 on both completion tokens
    b = Batch.from_episodes(eps, 0)
    old = torch.zeros(b.input_ids.shape)
    old[:, 2], old[:, 3] = torch.log(torch.tensor(0.01)), torch.log(torch.tensor(0.5))
    b = b.replace(old_logprobs=old * b.loss_mask, old_entropy=torch.ones(b.input_ids.shape))
    cfg = load_config(None, ["stages=[rl]", "algo.taco.alpha=1", "algo.taco.lam=0.5"])
    adv = compute_advantages(b, eps, cfg.algo, {"a": 1.0})
    plain = compute_advantages(b, eps, AlgoConfig(), {"a": 1.0})
    w = 1 - 0.5 * (1 - torch.exp(-torch.tensor(-math.log(0.01) - 1.0)))
    assert float(w) == pytest.approx(0.51359, abs=1e-5)
    torch.testing.assert_close(adv[0, 2], w * plain[0, 2])
    assert adv[0, 3] == plain[0, 3] and torch.equal(adv[1], plain[1])
    with pytest.raises(ConfigError, match="lam"):
        load_config(None, ["stages=[rl]", "algo.taco.alpha=1"])


def test_old_token_stats_are_the_rollout_policys_log_probs_and_entropies(model, tokenizer):
    """One no-gradient pass gives taco's p_t and H_t: equal to the reference computation that
    materialises the full logits (float32 either way, a V-term sum: 1e-5)."""
    from posttrain.models.logprobs import naive_sequence_logprobs
    from posttrain.train.token_stats import old_token_stats

    seg = Segment.from_prompt_completion([5, 6, 7], [8, 9, 10, 11], [-1.0] * 4)
    b = Batch.from_episodes([Episode([seg], reward=1.0)], tokenizer.pad_token_id)
    logp, ent = old_token_stats(Trainer(model, OptimConfig(), 1), b, 0.8, 0, 1.0)
    ref_logp, ref_ent = naive_sequence_logprobs(model, b.input_ids, b.attention_mask, 0.8)
    m = b.loss_mask > 0
    torch.testing.assert_close(logp[m], ref_logp[m], atol=1e-5, rtol=0)
    torch.testing.assert_close(ent[m], ref_ent[m], atol=1e-5, rtol=0)


@pytest.mark.parametrize(("neutral", "acting"), [
    ({"taco": {"alpha": 1e6, "lam": 0.0}}, {"taco": {"alpha": 1e6, "lam": 0.5}}),
    ({"top_entropy": {"rho": 1.0}}, {"top_entropy": {"rho": 0.2}}),
])
def test_token_modifiers_reach_the_update(model, tokenizer, tmp_path, monkeypatch, neutral,
                                          acting):
    """One RL step: a modifier's neutral setting leaves the update as without it (taco's
    ``lam = 0``: w = 1; ``top_entropy``'s ``rho = 1``: every token kept); an acting one (taco
    with ``alpha`` so large that every token is a tail token; the top fifth of the tokens by
    entropy) moves the weights differently."""
    monkeypatch.setitem(VERIFIERS, "length_mod2", lambda text, ref: len(text) % 2)

    def step(algo):
        policy = copy.deepcopy(model)
        cfg = RLConfig(steps=1, prompts_per_step=4, group_size=4, max_new_tokens=5,
                       eval_every=0, optim=OptimConfig(lr=1e-2))
        engine = TorchEngine(policy, tokenizer.pad_token_id, tokenizer.eos_token_id)
        run_rl(RLRun(Trainer(policy, cfg.optim, 1), tokenizer, TASKS, [],
                     RewardFunction({"len": ("length_mod2", 1.0)}), EvalConfig(), "len",
                     Reporter(tmp_path / str(algo), quiet=True), cfg=cfg,
                     algo=AlgoConfig(**algo), actor=ActorConfig()), engine)
        return torch.cat([p.detach().flatten() for p in policy.parameters()])

    plain, same, changed = step({}), step(neutral), step(acting)
    start = torch.cat([p.detach().flatten() for p in model.parameters()])
    torch.testing.assert_close(same, plain, atol=1e-6, rtol=0)
    assert (changed - plain).abs().max() > 100 * (same - plain).abs().max() + 1e-6
    assert (plain - start).abs().max() > 1e-4


def test_remax_baseline_is_the_reward_of_each_prompts_greedy_decode(model, tokenizer,
                                                                    monkeypatch):
    """GreedyBaseline adds one temperature-0 completion a prompt: its reward is every sampled
    episode's ``baseline_reward``, and ``remax`` from config gives ``R_i - R(y_greedy)`` on
    every trainable token."""
    from posttrain.rollout import GreedyBaseline, rollout

    monkeypatch.setitem(VERIFIERS, "length_mod2", lambda text, ref: len(text) % 2)
    engine = TorchEngine(model, tokenizer.pad_token_id, tokenizer.eos_token_id)
    reward = RewardFunction({"len": ("length_mod2", 1.0)})
    tasks = TASKS.sample(3, random.Random(0))
    sampling = RLConfig(max_new_tokens=6).params((tokenizer.eos_token_id,), 5)
    eps = GreedyBaseline()(engine, tokenizer, tasks, reward, sampling, 4, group_prefix="0-")
    greedy = rollout(engine, tokenizer, tasks, reward,
                     EvalConfig(max_new_tokens=6).params((tokenizer.eos_token_id,), 5), 1, "0-")
    assert len(eps) == 12
    assert [e.meta["baseline_reward"] for e in eps] == [g.reward for g in greedy
                                                        for _ in range(4)]
    plain = rollout(engine, tokenizer, tasks, reward, sampling, 4, "0-")  # sampled as without
    assert [e.segments for e in eps] == [e.segments for e in plain]
    cfg = load_config(None, ["stages=[rl]", "algo.adv_estimator=remax", "rl.group_size=1"])
    b = Batch.from_episodes(eps, tokenizer.pad_token_id)
    adv = compute_advantages(b, eps, cfg.algo, {"len": 1.0})
    expected = torch.tensor([e.reward - e.meta["baseline_reward"] for e in eps])
    torch.testing.assert_close(adv, expected[:, None] * b.loss_mask)


def test_remax_runs_through_the_rl_loop(model, tokenizer, tmp_path, monkeypatch):
    """The loop adds the greedy rollout for an estimator that asks for ``baseline_rewards``
    (without it the estimator has no input and the step fails), and the update trains on
    ReMax's ``A = R - R(y_greedy)``: recomputed here from the saved episodes' rewards and each
    prompt's greedy decode by the starting weights, against the advantages the update
    recorded (``rl.token_stats``)."""
    from posttrain.types import read_episodes

    # the reference's parity too: the prompts' greedy baselines differ (not all 0 or all 1)
    monkeypatch.setitem(VERIFIERS, "parity", lambda text, ref: (len(text) + int(ref)) % 2)
    start = copy.deepcopy(model)  # the weights that sampled step 0 (the update moves model's)
    cfg = RLConfig(steps=1, prompts_per_step=4, group_size=1, max_new_tokens=5, eval_every=0,
                   save_episodes=True, token_stats=4)
    engine = TorchEngine(model, tokenizer.pad_token_id, tokenizer.eos_token_id)
    run_rl(RLRun(Trainer(model, cfg.optim, 1), tokenizer, TASKS, [],
                 RewardFunction({"len": ("parity", 1.0)}), EvalConfig(), "len",
                 Reporter(tmp_path, quiet=True), cfg=cfg, algo=AlgoConfig(adv_estimator="remax"),
                 actor=ActorConfig()), engine)
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert len(rows) == 1 and math.isfinite(rows[0]["loss"])
    eps = list(read_episodes(tmp_path / "episodes.jsonl"))
    assert len(eps) == 4
    prompts = [e.segments[0].token_ids[:e.segments[0].first_sampled] for e in eps]
    greedy = TorchEngine(start, tokenizer.pad_token_id, tokenizer.eos_token_id).generate(
        prompts, SamplingParams(max_new_tokens=5, temperature=0.0,
                                stop_token_ids=(tokenizer.eos_token_id,)))
    # the verifier's rule on each greedy completion's text
    baselines = [(len(tokenizer.decode(g.token_ids, skip_special_tokens=True))
                  + int(e.meta["reference"])) % 2 for g, e in zip(greedy, eps)]
    assert [e.meta["baseline_reward"] for e in eps] == baselines
    for e, b in zip(eps, baselines):
        seg = e.segments[0]
        want = [(e.reward - b) * m for m in seg.loss_mask]
        # R and R(y_greedy) are 0 or 1: their difference is exact in float32
        assert e.meta["token_stats"]["advantage"] == [want]


def test_gar_from_config_takes_grader_quality_from_its_reward_part():
    """The spec's example: R = [1, 1, 1, 0], f = [1, .6, .4] on the passing rows give
    A' = [.375, .225, .150, -.750] (lambda = 1.5)."""
    parts = [{"c": 1.0, "q": 1.0}, {"c": 1.0, "q": 0.6}, {"c": 1.0, "q": 0.4},
             {"c": 0.0, "q": 0.0}]
    eps = episodes([1.0, 1.0, 1.0, 0.0], parts=parts)
    b = Batch.from_episodes(eps, 0)
    cfg = load_config(None, ["stages=[rl]", "algo.adv_estimator=gar", "algo.quality_part=q",
                             "reward.parts={}", "reward.parts.c.verifier=exact",
                             "reward.parts.q.verifier=format", "reward.parts.q.weight=0",
                             "reward.accuracy_part=c"])
    adv = compute_advantages(b, eps, cfg.algo, {"c": 1.0, "q": 0.0})
    expected = torch.tensor([0.375, 0.225, 0.150, -0.750])
    torch.testing.assert_close(adv[:, -2:], expected[:, None].expand(4, 2).to(adv.dtype))
    with pytest.raises(ConfigError, match="gar and algo.quality_part"):
        load_config(None, ["stages=[rl]", "algo.adv_estimator=gar"])


def test_behaviour_reg_reward_rule_from_config_penalises_long_successes():
    """c_long .5, l_thr 3, s_min .5 on a group with R = [1, 1, 1, 0] (success .75) and 5, 2,
    5, 5 trainable tokens: R' = [.5, 1, .5, 0]; dr_grpo then gives [0, .5, 0, -.5] (dyadic:
    exact). No step had a malformed call, so the token rule (up = down = 0) changes nothing."""
    eps = []
    for r, n in zip([1.0, 1.0, 1.0, 0.0], [5, 2, 5, 5]):
        seg = Segment.from_prompt_completion([1, 2], list(range(3, 3 + n)), [-0.5] * n)
        eps.append(Episode([seg], rewards={"a": r}, reward=r, group_id="0",
                           meta={"step_errors": [0] * len(seg.steps)}))
    b = Batch.from_episodes(eps, 0)
    cfg = load_config(None, ["stages=[rl]", "task.name=calculator", "algo.adv_estimator=dr_grpo",
                             "algo.behaviour_reg.k_err=2", "algo.behaviour_reg.c_long=0.5",
                             "algo.behaviour_reg.l_thr=3", "algo.behaviour_reg.s_min=0.5"])
    adv = compute_advantages(b, eps, cfg.algo, {"a": 1.0})
    expected = torch.tensor([0.0, 0.5, 0.0, -0.5])[:, None] * b.loss_mask
    torch.testing.assert_close(adv, expected, atol=0, rtol=0)
    with pytest.raises(ConfigError, match="c_long, l_thr and s_min together"):
        load_config(None, ["stages=[rl]", "task.name=calculator",
                           "algo.behaviour_reg.k_err=2", "algo.behaviour_reg.c_long=0.5"])


def test_auto_budgets_are_fixed_and_recorded_in_the_rl_loop(model, tokenizer, tmp_path,
                                                            monkeypatch):
    """A toggle rule with budget auto gets each prompt's budget from the run's PromptBudgets:
    one record a prompt, made the step the prompt was first drawn and kept when it is drawn
    again, its value ``B(x)`` the ``rho``-th percentile (linear) of the trainable lengths of
    that step's correct samples of ``x`` (None: infinite, none correct) — recomputed here from
    the saved episodes."""
    import numpy as np

    from posttrain.config import ShapingRule
    from posttrain.rollout.prompt_budgets import PromptBudgets, prompt_key
    from posttrain.types import read_episodes

    class TwoPrompts:
        """Two prompts drawn with replacement: a later step sees one an earlier step fixed."""

        problems = TASKS.sample(2, random.Random(0))

        def sample(self, n, rng, split="train"):
            return [rng.choice(self.problems) for _ in range(n)]

    # an accuracy part about half the samples pass, so budgets are numbers, not all infinite
    monkeypatch.setitem(VERIFIERS, "length_mod2", lambda text, ref: len(text) % 2)
    cfg = RLConfig(steps=3, prompts_per_step=2, group_size=4, max_new_tokens=8, eval_every=0,
                   save_episodes=True)
    budgets = PromptBudgets("c", tmp_path / "prompt_budgets.jsonl")
    engine = TorchEngine(model, tokenizer.pad_token_id, tokenizer.eos_token_id)
    run_rl(RLRun(Trainer(model, cfg.optim, 3), tokenizer, TwoPrompts(), [],
                 RewardFunction({"c": ("length_mod2", 1.0)}), EvalConfig(), "c",
                 Reporter(tmp_path, quiet=True), cfg=cfg, algo=AlgoConfig(),
                 actor=ActorConfig(), prompt_budgets=budgets,
                 shaping=[ShapingRule(name="toggle", budget="auto", m=1, lam=0.5, rho=25)]),
           engine)
    rows = [json.loads(line) for line in (tmp_path / "prompt_budgets.jsonl").read_text()
            .splitlines()]
    first: dict[tuple, tuple[int, list[int]]] = {}  # prompt -> (step, its correct lengths)
    drawn: dict[tuple, set[int]] = {}  # prompt -> the steps that drew it
    for e in read_episodes(tmp_path / "episodes.jsonl"):
        seg = e.segments[0]
        drawn.setdefault(tuple(seg.token_ids[:seg.first_sampled]), set()).add(e.meta["step"])
        step, lengths = first.setdefault(tuple(seg.token_ids[:seg.first_sampled]),
                                         (e.meta["step"] - 1, []))
        if step == e.meta["step"] - 1 and e.rewards["c"] == 1.0:  # unshaped part
            lengths.append(sum(seg.loss_mask))
    keys = {tuple(e.segments[0].token_ids[:e.segments[0].first_sampled]):
            f"25:{prompt_key(e)}" for e in read_episodes(tmp_path / "episodes.jsonl")}
    # exact: a linear percentile of a few small integers in float64 is a multiple of 1/4
    want = [{"key": keys[p], "step": step,
             "budget": float(np.percentile(lengths, 25)) if lengths else None}
            for p, (step, lengths) in first.items()]
    assert sorted(rows, key=lambda r: r["key"]) == sorted(want, key=lambda r: r["key"])
    assert max(map(len, drawn.values())) > 1  # a prompt came back (its budget stayed fixed)


def test_a_stage_whose_last_step_was_evaluated_is_not_evaluated_again(tmp_path, monkeypatch):
    """``rl.eval_every`` that divides the steps evaluates the final weights in the loop: that
    evaluation is the run's ``eval_after_rl`` (the same weights were evaluated twice)."""
    from posttrain.recipes import run_tasks, sampling_loop
    from posttrain.recipes.stages import Stages

    calls = []
    for module in (run_tasks, sampling_loop):
        real = module.evaluate
        monkeypatch.setattr(module, "evaluate",
                            lambda *a, real=real, **k: calls.append(1) or real(*a, **k))
    cfg = load_config("configs/quickstart.yaml", [
        "model.preset=nano", "stages=[rl]", "rl.steps=2", "rl.eval_every=2",
        "rl.prompts_per_step=2", "rl.group_size=2", "rl.max_new_tokens=8",
        "eval.num_problems=4", "eval.max_new_tokens=8", f"out_dir={tmp_path / 'run'}"])
    summary = Stages(cfg).run()
    assert len(calls) == 2  # before RL, and after its last step
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").open()]
    (last,) = [r for r in rows if "eval/accuracy" in r]
    assert last["step"] == 2
    assert summary["eval_after_rl"] == {k[5:]: v for k, v in last.items()
                                        if k.startswith("eval/")}
