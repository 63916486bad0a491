"""Options that no code path of the configured run reads are errors naming the keys and why
(config/combinations.py); the same options where they take effect load."""

import pytest

from posttrain.config import ConfigError, load_config
from posttrain.rewards import RewardFunction

TEACHER = "opd.teachers=[{path: /t}]"
OPD = ["stages=[opd]", TEACHER]
RAY_TEACHERS = [*OPD, "opd.loss=opd_sampled", "opd.teacher_placement=ray", "dist.backend=ray"]
JUDGED = "reward.parts={correct: {verifier: numeric}, j: {verifier: judge, weight: 0.1}}"
TAU = ["stages=[rl]", "task.name=tau", "task.tau.domain=mock", "task.tau.solo=true",
       "reward.parts={tau: {verifier: env}}", "reward.accuracy_part=tau"]
TAU_USER = [*TAU[:3], "reward.parts={tau: {verifier: env}}", "reward.accuracy_part=tau"]
CALCULATOR = ["task.name=calculator"]
ASYNC = ["rl.mode=async"]
SHAPING = "reward.shaping=[{name: dapo_overlong, max_length: 32, cache_length: 8}]"


@pytest.mark.parametrize("overrides,message", [
    # on-policy distillation by full-vocabulary reverse KL reads neither actor nor rl
    ([*OPD, "actor.loss_agg_mode=seq_mean_token_sum"],
     "actor.loss_agg_mode is set but cannot take effect: opd.loss=full_vocab_rkl"),
    ([*OPD, "actor.policy_loss.eps_high=0.28", "actor.entropy_bonus.coef=0.01"],
     "actor.policy_loss, actor.entropy_bonus are set"),
    ([*OPD, "rl.top_p=0.9"], r"rl options are set \(rl.top_p\) but 'rl' is not in stages"),
    ([*OPD, "rl.top_k=5"], r"rl options are set \(rl.top_k\)"),
    ([*OPD, "opd.r_max=2"], r"opd.r_max applies to opd.loss in \('opd_clip',\), not full_vocab"),
    ([*OPD, "opd.loss=opd_clip", "opd.alpha=0.3"], r"opd.alpha applies to opd.loss in \('mopd',\)"),
    # what only some stages read
    (["stages=[sft]", SHAPING], "reward.shaping is set but cannot take effect: shaping rules"),
    (["stages=[sft]", "dist.backend=ray"], r"dist.backend is set .* put nothing on Ray"),
    ([*OPD, "dist.backend=ray"], "dist.backend is set"),
    ([*RAY_TEACHERS, "dist.engines=2"], "dist.engines is set .* put only the teachers on Ray"),
    ([*RAY_TEACHERS, "dist.trainer_actor=true"], "dist.trainer_actor is set"),
    # generated data, given data
    (["sft.data=x.jsonl", "sft.num_examples=10", "sft.error_rate=0.3"],
     "sft.num_examples, sft.error_rate are set .* sft.data is set"),
    (["stages=[distill]", "distill.teacher=/t", "distill.data=x.jsonl", "distill.num_examples=5"],
     "distill.num_examples is set"),
    (["stages=[pref]", "pref.data=p.jsonl", "pref.num_pairs=10"], "pref.num_pairs is set"),
    (["rm.data=p.jsonl", "rm.num_pairs=10"], "rm.num_pairs is set"),
    (["stages=[distill]", "distill.teacher=/t", "distill.max_new_tokens=64"],
     "distill.max_new_tokens is set .* distill.lam is 0"),
    (["stages=[pref]", "pref.loss.name=simpo", "pref.reference=on_the_fly"],
     "pref.reference is set .* simpo has no reference model"),
    ([*TAU, "task.eval_fraction=0.2"], "task.eval_fraction is set .* tau holds out its own"),
    # switches of the RL stage
    (["critic.cliprange_value=0.3"], "critic.cliprange_value is set .* critic.enabled is false"),
    (["critic.optim.lr=1e-3"], "critic.optim is set"),
    (["algo.kl.estimator=k1", "algo.kl.placement=in_reward"],
     "algo.kl.estimator, algo.kl.placement are set .* algo.kl.coef is 0"),
    (["actor.entropy_bonus.target=0.5"], "actor.entropy_bonus.target is set .*adaptive is false"),
    (["actor.entropy_bonus.adaptive=true", "actor.entropy_bonus.coef=0.01"],
     "actor.entropy_bonus.coef is set .*adaptive is true"),
    (["algo.dynamic_sampling.mode=drop"], "algo.dynamic_sampling.mode is set .*enabled is false"),
    (["algo.dynamic_sampling.max_rounds=5"], "algo.dynamic_sampling.max_rounds is set"),
    (["algo.dynamic_sampling.enabled=true", "algo.dynamic_sampling.mode=drop",
      "algo.dynamic_sampling.max_rounds=5"], "max_rounds is set .* mode=drop"),
    ([*ASYNC, "algo.dynamic_sampling.enabled=true", "algo.dynamic_sampling.mode=drop"],
     "algo.dynamic_sampling.mode is set .* rl.mode=async"),
    ([*ASYNC, "algo.dynamic_sampling.max_rounds=5"], "max_rounds is set .* none are dropped"),
    ([*ASYNC, "rl.mismatch_tolerance=0.1"], "rl.mismatch_tolerance is set"),
    (["rl.sync.probes=0", "rl.sync.tolerance=0.01"], "rl.sync.tolerance is set .*probes is 0"),
    (["rl.token_stats=8"], "rl.token_stats is set .* rl.save_episodes is false"),
    # modes of a schedule or a policy
    ([*OPD, "opd.optim.schedule=constant", "opd.optim.min_lr_ratio=0.5"],
     "opd.optim.min_lr_ratio is set .* schedule is constant"),
    (["sft.optim.schedule=constant", "sft.optim.min_lr_ratio=0.5"], "sft.optim.min_lr_ratio"),
    (["checkpoint_every=0", "keep_last=5"], "keep_last is set .* checkpoint_every is 0"),
    ([*CALCULATOR, "agent.compaction.ratio=0.5"],
     "agent.compaction.ratio applies to agent.compaction.strategy in .*, not none"),
    ([*CALCULATOR, "agent.compaction.strategy=summary", "agent.compaction.keep_last=2"],
     r"agent.compaction.keep_last applies to .* \('microcompact',\), not summary"),
    ([*CALCULATOR, "agent.compaction.strategy=microcompact", "agent.compaction.user_budget=9"],
     "agent.compaction.user_budget applies"),
    ([*CALCULATOR, "agent.compaction.strategy=microcompact",
      "agent.compaction.train_summary=false"], "agent.compaction.train_summary applies"),
    # judges and chat servers
    ([JUDGED, "reward.judges.j={kind: score, model: /m, budget_tokens: 10}"],
     "reward.judges.j.budget_tokens: applies to kind in .*, not score"),
    ([JUDGED, "reward.judges.j={kind: reward_model, model: /m, rubric: Grade it.}"],
     "reward.judges.j.rubric: applies"),
    ([JUDGED, "reward.judges.j={kind: comparison, model: /m, n_samples: 3}"],
     "reward.judges.j.n_samples: applies"),
    ([JUDGED, "reward.judges.j={kind: pairwise_model, model: /m, temperature: 0.5}"],
     "reward.judges.j.temperature: applies"),
    ([JUDGED, "reward.judges.j={kind: score, model: /m, endpoint_model: gpt}"],
     "reward.judges.j: endpoint_model is set .* served by no endpoint"),
    ([*TAU_USER, "task.tau.user={model: /u, api_key_env: KEY}"],
     "task.tau.user: api_key_env is set .* served by no endpoint"),
    ([*TAU, "task.tau.judge={model: /j, endpoint_model: gpt}"],
     "task.tau.judge: endpoint_model is set .* served by no endpoint"),
    (["actor.policy_loss.name=kl_cov"], "kl_cov .* trains exactly as ppo_clip"),
    (["actor.policy_loss.name=clip_cov", "trainer.micro_batch_size=1"],
     "clip_cov .* every covariance is 0"),
])
def test_an_option_that_cannot_take_effect_is_refused(overrides, message):
    with pytest.raises(ConfigError, match=message):
        load_config(None, overrides)


@pytest.mark.parametrize("overrides", [
    [*OPD, "opd.loss=opd_clip", "opd.r_max=2", "actor.loss_agg_mode=seq_mean_token_sum"],
    [*OPD, "opd.loss=mopd", "opd.alpha=0.3", "actor.entropy_bonus.coef=0.01"],
    ["stages=[sft, opd, rl]", TEACHER, "actor.loss_agg_mode=seq_mean_token_sum"],
    [*RAY_TEACHERS, "dist.max_restarts=1"],
    [*ASYNC, "rl.async.stale=drop", "algo.dynamic_sampling.max_rounds=5"],
    ["agent.external_command=python a.py", *ASYNC, "rl.async.partial_rollout=true"],
    ["algo.dynamic_sampling.enabled=true", "algo.dynamic_sampling.max_rounds=5"],
    ["actor.policy_loss.name=kl_cov", "rl.mini_batches=2"],
    ["actor.policy_loss.name=clip_cov", "trainer.micro_batch_size=1", "algo.adv_estimator=gae",
     "critic.enabled=true"],
    ["algo.kl.coef=0.1", "algo.kl.estimator=k1", "algo.kl.controller=adaptive",
     "algo.kl.target=0.1"],
    ["actor.entropy_bonus.adaptive=true", "actor.entropy_bonus.target=0.5"],
    ["rl.mismatch_tolerance=0.1", "rl.sync.tolerance=0.01"],
    ["rl.top_p=0.9", "rl.top_k=5", "rl.mismatch_tolerance=0.1"],  # checked on the truncation
    ["sft.optim.min_lr_ratio=0.5", "checkpoint_every=10", "keep_last=5"],
    ["stages=[distill]", "distill.teacher=/t", "distill.lam=0.5", "distill.max_new_tokens=64",
     "distill.num_examples=5"],
    ["stages=[pref]", "pref.loss.name=kto", "pref.reference=on_the_fly", "pref.num_pairs=10"],
    [*CALCULATOR, "agent.compaction.strategy=codex_compact", "agent.compaction.user_budget=9",
     "agent.compaction.ratio=0.5", "agent.compaction.train_summary=false"],
    [JUDGED, "reward.judges.j={kind: comparison, endpoint: http://h/v1, endpoint_model: gpt, "
             "budget_tokens: 10, rubric: Grade it.}"],
    [JUDGED, "reward.judges.j={kind: pairwise_model, model: /m, budget_tokens: 10}"],
    [*TAU_USER, "task.tau.user={endpoint: http://h/v1, api_key_env: KEY}"],
    ["task.eval_fraction=0.2"],
])
def test_the_same_options_load_where_they_take_effect(overrides):
    load_config(None, overrides)


def test_a_held_out_fraction_is_refused_where_the_dataset_names_its_held_out_rows(tmp_path):
    rows = tmp_path / "rows.jsonl"
    rows.write_text('{"prompt": "1+1", "answer": "2"}\n')
    data = [f"task.data={{path: {rows}, eval_path: {rows}}}", "stages=[rl]", "task.name=dataset"]
    load_config(None, data)
    with pytest.raises(ConfigError, match="task.eval_fraction is set .* task.data.eval_path"):
        load_config(None, [*data, "task.eval_fraction=0.2"])


GRS = ["reward.parts={t: {verifier: exact}, s: {verifier: format}, b: {verifier: format}}",
       "reward.accuracy_part=t",
       "reward.synthesis.inputs={test_rewards: t, solution_scores: s, behaviour_scores: b}"]
GAR = ["algo.adv_estimator=gar", "algo.quality_part=q", "reward.accuracy_part=correct",
       "reward.parts={correct: {verifier: exact}, q: {verifier: format, weight: 0}}"]


@pytest.mark.parametrize("overrides,message", [
    (["algo.adv_estimator=remax", *CALCULATOR], "remax's baseline is a greedy single-turn"),
    (["algo.adv_estimator=remax", *ASYNC], "remax decodes each prompt greedily"),
    ([*GAR[:2], "reward.accuracy_part=correct"], "algo.quality_part 'q' is not one of"),
    ([*GAR[:3], "reward.parts={correct: {verifier: exact}, q: {verifier: format}}"],
     "'q' has weight 1.0: gar's reward must stay pass/fail"),
    ([*GRS, "algo.adv_estimator=gdpo"], "reward.synthesis is set but cannot take effect"),
    ([*GRS[:2], "reward.synthesis.inputs={test_rewards: t, solution_scores: s}"],
     r"takes the inputs \['behaviour_scores', 'solution_scores', 'test_rewards'\]"),
    ([*GRS[:2], "reward.synthesis.inputs={test_rewards: t, solution_scores: s, "
                "behaviour_scores: x}"], r"reward.synthesis.inputs name \['x'\]"),
    (["reward.parts={t: {verifier: exact, weight: 2}, s: {verifier: format}, "
      "b: {verifier: format}}", *GRS[1:]], r"reward.parts \['t'\] have weights"),
])
def test_what_an_estimator_reads_of_the_reward_must_be_there(overrides, message):
    with pytest.raises(ConfigError, match=message):
        load_config(None, overrides)


@pytest.mark.parametrize("overrides", [["algo.adv_estimator=remax"], GAR, GRS,
                                       [*GRS, "algo.adv_estimator=gar", "algo.quality_part=s"]])
def test_estimators_load_with_what_they_read(overrides):
    load_config(None, overrides)


def test_a_synthesised_reward_is_grs_of_its_parts():
    """The spec's example: 1 x .8 x .5 = 0.4; a failed test gives 0 whatever the scores."""
    fn = RewardFunction.of(load_config(None, GRS).reward)
    assert fn.total({"t": 1.0, "s": 0.8, "b": 0.5}) == pytest.approx(0.4, abs=1e-15)
    assert fn.total({"t": 0.0, "s": 0.8, "b": 0.5}) == 0.0
    plain = RewardFunction.of(load_config(None, GRS[:2]).reward)
    assert plain.total({"t": 1.0, "s": 0.8, "b": 0.5}) == pytest.approx(2.3)


@pytest.mark.parametrize("overrides,message", [
    (["engine.name=vllm"], "engine.name is vllm"),
    (ASYNC, "rl.mode is async"),
    (CALCULATOR, "task.name=calculator is an agent task"),
])
def test_routing_replay_needs_the_routing_recorded(overrides, message):
    moe = ["trainer.routing_replay=true", "model.architecture=qwen3_moe"]
    load_config(None, moe)
    with pytest.raises(ConfigError, match=f"routing_replay is set but cannot take effect: "
                                          f"{message}"):
        load_config(None, [*moe, *overrides])


@pytest.mark.parametrize("key", ["trainer.routing_replay=true", "actor.router_aux_coef=0.01"])
def test_router_options_need_experts(key):
    with pytest.raises(ConfigError, match="model.architecture=llama has no experts"):
        load_config(None, [key])
    load_config(None, [key, "model.architecture=qwen3_moe"])
