import sys

import pytest

from posttrain.config import ConfigError, RunConfig, apply_override, build_config, load_config


def test_defaults_are_the_quickstart():
    cfg = load_config(None)
    assert cfg.stages == ["sft", "rl"] and cfg.model.preset == "micro"
    assert cfg.algo.adv_estimator == "grpo" and cfg.actor.policy_loss.name == "ppo_clip"


def test_shipped_quickstart_yaml_equals_defaults():
    assert load_config("configs/quickstart.yaml") == RunConfig()


def test_overrides_parse_yaml_values():
    cfg = load_config(None, ["rl.optim.lr=3e-4", "task.ops=[+, '-']", "model.preset=null",
                             "model.path=/x", "actor.policy_loss.dual_clip=3"])
    assert cfg.rl.optim.lr == 3e-4 and cfg.task.ops == ["+", "-"]
    assert cfg.model.path == "/x" and cfg.actor.policy_loss.dual_clip == 3.0


def test_an_override_fills_a_null_section():
    tree = {"task": {"name": "dataset", "data": None}}
    apply_override(tree, "task.data.path=d.jsonl")
    assert tree["task"]["data"] == {"path": "d.jsonl"}
    with pytest.raises(ConfigError, match="'name' is not a section"):
        apply_override(tree, "task.name.x=1")


@pytest.mark.parametrize(
    "overrides,key",
    [
        (["actor.policy_loss.eps_low=1.2"], "actor.policy_loss.eps_low"),
        (["algo.adv_estimator=magic"], "algo.adv_estimator"),
        (["algo.kl.estimator=k9"], "algo.kl.estimator"),
        (["sft.steps=-1"], "sft.steps"),
        (["rl.nope=1"], "rl.nope"),
        (["rl.group_size=1"], "rl.group_size"),
        (["model.path=/x", "model.preset=micro"], "model.path"),
        (["reward.accuracy_part=speed"], "reward.accuracy_part"),
        (["reward.parts.correct.verifier=psychic"], "reward.parts.correct.verifier"),
        (["stages=[rl]", "sft.data=x.jsonl"], "sft.data"),
        (["stages=[rl]", "sft.pack_tokens=64"], "sft.pack_tokens"),
        (["stages=[sft]", "rl.steps=3"], "rl.steps"),
        (["stages=[sft]", "algo.adv_estimator=rloo"], "algo.adv_estimator"),
        (["stages=[sft]", "critic.enabled=true"], "critic.enabled"),
        (["stages=[sft]", "actor.loss_agg_mode=seq_mean_token_sum"], "actor.loss_agg_mode"),
        (["agent.max_turns=2"], "agent options act on agent episodes"),
        (["engine.name=sglang", "engine.kv_cache_gib=4"], "engine.kv_cache_gib"),
        (["actor.policy_loss.dual_clip=0.5"], "actor.policy_loss.dual_clip"),
        (["trainer.offload=true"], "trainer.shard=true"),
        (["checkpoint_format=sharded", "trainer.lora={r: 4}"], "checkpoint_format=whole"),
        (["checkpoint_format=tensors"], "checkpoint_format"),
        (["engine.sleep=true", "rl.mode=async"], "engine.sleep"),
        (["dist.backend=ray", "rl.mode=async", "dist.cpus_per_engine=2"],
         "dist.cpus_per_engine places engines in a placement group"),
        (["dist.engine_strategy=spread"], "dist.engine_strategy applies to dist.backend=ray"),
        (["agent.external=examples/external_agent/agent.py:solve",
          "agent.external_command=python a.py"], "agent: external and external_command"),
        (["task.name=calculator", "rl.mode=async"], "rl.mode=async"),
        (["agent.external_command=python a.py", "rl.mode=async", "rl.async.chunk_tokens=4"],
         "rl.async.chunk_tokens"),
        (["rl.mode=async", "rl.async.partial_rollout=true"], "rl.async.partial_rollout"),
        (["agent.external=examples/external_agent/agent.py:nope"], "agent.external"),
        (["engine.sleep=true", "stages=[sft]"], "engine.sleep"),
    ],
)
def test_errors_name_the_key(overrides, key):
    with pytest.raises(ConfigError) as e:
        load_config(None, overrides)
    assert key in str(e.value)


@pytest.mark.parametrize("override", ["sft.batch_size=true", "rl.steps=false",
                                      "rl.optim.lr=true", "threads=true",
                                      "rl.optim.grad_clip=false"])
def test_a_boolean_is_not_a_number(override):
    key, value = override.split("=")
    with pytest.raises(ConfigError, match=f"{key}: a number is expected, not {value}"):
        load_config(None, [override])


def test_booleans_still_set_switches():
    cfg = load_config(None, ["rl.save_episodes=true", "trainer.share_prefix=false"])
    assert cfg.rl.save_episodes is True and cfg.trainer.share_prefix is False


def test_kl_estimator_with_coef_is_fine():
    assert load_config(None, ["algo.kl.estimator=k1", "algo.kl.coef=0.01"]).algo.kl.coef


def test_bad_override_syntax_and_files(tmp_path):
    with pytest.raises(ConfigError, match="dotted.key=value"):
        apply_override({}, "rl.steps")
    with pytest.raises(ConfigError, match="not a section"):
        apply_override({"rl": 3}, "rl.steps=2")
    with pytest.raises(ConfigError, match="does not exist"):
        load_config(tmp_path / "none.yaml")
    (tmp_path / "list.yaml").write_text("- 1\n")
    with pytest.raises(ConfigError, match="mapping"):
        load_config(tmp_path / "list.yaml")
    assert build_config({"seed": 3}).seed == 3


def test_algorithm_names_accept_framework_spellings_and_store_canonical_ones():
    cfg = load_config(None, ["algo.kl.estimator=low_var_kl", "actor.loss_agg_mode=token-mean",
                             "algo.adv_estimator=group_norm"])
    assert (cfg.algo.kl.estimator, cfg.actor.loss_agg_mode, cfg.algo.adv_estimator) == (
        "k3", "token_mean", "grpo")


def test_estimator_the_rl_pipeline_cannot_feed_is_rejected():
    with pytest.raises(ConfigError, match="algo.adv_estimator.*opd.*cannot be used here"):
        load_config(None, ["algo.adv_estimator=opd"])


def test_policy_loss_hyperparameters_are_checked_against_the_loss():
    cfg = load_config(None, ["actor.policy_loss.name=cispo", "actor.policy_loss.r_max=2"])
    assert cfg.actor.policy_loss.hyperparameters() == {"r_min": 0.0, "r_max": 2}
    assert load_config(None).actor.policy_loss.hyperparameters() == {"eps_low": 0.2,
                                                                     "eps_high": 0.2}
    with pytest.raises(ConfigError, match="cispo.*does not take eps_low"):
        load_config(None, ["actor.policy_loss.name=cispo", "actor.policy_loss.eps_low=0.1"])
    with pytest.raises(ConfigError, match="kimi_k25.*needs alpha, beta, tau"):
        load_config(None, ["actor.policy_loss.name=kimi_k25"])
    with pytest.raises(ConfigError, match="value_clip.*cannot be used here"):
        load_config(None, ["actor.policy_loss.name=value_clip"])
    with pytest.raises(ConfigError, match="gspo.*seq_mean_token_mean"):
        load_config(None, ["actor.policy_loss.name=gspo"])


def test_a_catalogue_functions_defaults_are_shown_and_follow_its_name():
    """The values a loss uses appear in the config; naming another loss moves every value the
    user left unset (null in quickstart.yaml) to that loss's own defaults."""
    quick = load_config("configs/quickstart.yaml")
    assert quick.model_dump()["actor"]["policy_loss"] == {
        "name": "ppo_clip", "eps_low": 0.2, "eps_high": 0.2, "dual_clip": None}
    assert quick.model_dump()["pref"]["loss"] == {"name": "dpo", "beta": 0.1}
    gspo = load_config("configs/quickstart.yaml", [
        "actor.policy_loss.name=gspo", "actor.loss_agg_mode=seq_mean_token_mean"])
    assert (gspo.actor.policy_loss.eps_low, gspo.actor.policy_loss.eps_high) == (3e-4, 4e-4)
    mine = load_config("configs/quickstart.yaml", ["actor.policy_loss.eps_high=0.28"])
    assert mine.actor.policy_loss.hyperparameters() == {"eps_low": 0.2, "eps_high": 0.28}
    ipo = load_config("configs/quickstart.yaml", ["stages=[pref]", "pref.loss.name=ipo"])
    assert ipo.pref.loss.hyperparameters() == {"tau": 0.1}  # dpo's beta was filled, not set
    renamed = mine.actor.policy_loss.model_copy()
    renamed.name = "gspo"  # eps_high was set, eps_low was not
    assert (renamed.eps_low, renamed.eps_high) == (3e-4, 0.28)


GSPO_AT_PPO_VALUES = ["actor.policy_loss.name=gspo", "actor.policy_loss.eps_low=0.2",
                      "actor.policy_loss.eps_high=0.28", "actor.loss_agg_mode=seq_mean_token_mean",
                      "algo.offpolicy.correction=icepop", "algo.offpolicy.bounds=[0, 2]"]


def test_a_value_set_equal_to_another_functions_default_is_kept(tmp_path):
    """0.2 is ppo_clip's eps_low and (0, 2) tis_*'s bounds; set for gspo and icepop they are
    the user's, through validation, the CLI's overrides, the saved config.yaml and a resume."""
    from posttrain.config.sections.trainer import PolicyLossConfig
    from posttrain.recipes.run_dir import config_changes

    direct = PolicyLossConfig(name="gspo", eps_low=0.2, eps_high=0.28)
    assert (direct.eps_low, direct.eps_high) == (0.2, 0.28)
    cfg = load_config("configs/quickstart.yaml", GSPO_AT_PPO_VALUES)
    assert cfg.actor.policy_loss.hyperparameters() == {"eps_low": 0.2, "eps_high": 0.28,
                                                       "token_level": False}
    assert cfg.algo.offpolicy.weight_options() == {"c_lo": 0.0, "c_hi": 2.0}
    saved = tmp_path / "config.yaml"
    saved.write_text(__import__("yaml").safe_dump(cfg.model_dump(mode="json", by_alias=True)))
    assert load_config(saved) == cfg
    assert config_changes(saved, cfg.model_dump(mode="json")) == []


def test_off_policy_bounds_are_shown_and_follow_the_correction():
    """Null bounds take the correction's own defaults (tis_*: C_min, C_max = 0, 2; mis_*: C_lo,
    C_hi = 0.5, 5) and follow a change of correction; bounds of the user's own stay, and
    without a correction they are an error."""
    tis = load_config(None, ["algo.offpolicy.correction=tis_token"])
    assert tis.algo.offpolicy.weight_options() == {"c_min": 0.0, "c_max": 2.0}
    assert load_config(None, ["algo.offpolicy.correction=icepop"]).algo.offpolicy \
        .weight_options() == {"c_lo": 0.5, "c_hi": 5.0}
    moved = tis.algo.offpolicy.model_copy()
    moved.correction = "icepop"
    assert moved.weight_options() == {"c_lo": 0.5, "c_hi": 5.0}
    mine = load_config(None, ["algo.offpolicy.correction=mis_seq",
                              "algo.offpolicy.bounds=[0.2, 3.0]"])
    assert mine.algo.offpolicy.weight_options() == {"c_lo": 0.2, "c_hi": 3.0}
    with pytest.raises(ConfigError, match="offpolicy.bounds is set but offpolicy.correction"):
        load_config(None, ["algo.offpolicy.bounds=[0.2, 3.0]"])


def test_a_null_left_to_another_setting_is_shown_resolved_where_it_is_read():
    quick = load_config("configs/quickstart.yaml")
    assert (quick.rl.sync.tolerance, quick.eval.ks) == (1e-3, [1])
    assert load_config(None, ["trainer.precision=bf16"]).rl.sync.tolerance == 2e-2
    gae = load_config(None, ["algo.adv_estimator=gae", "critic.enabled=true"])
    assert (gae.algo.gamma, gae.algo.lam, gae.algo.omega) == (1.0, 0.95, None)
    assert load_config(None, ["eval.samples=4", "eval.temperature=1"]).eval.ks == [1, 4]
    unread = load_config(None, ["stages=[sft]"]), load_config(None, ["rl.sync.probes=0"])
    assert [c.rl.sync.tolerance for c in unread] == [None, None]  # no code reads it
    assert build_config(gae.model_dump(mode="json", by_alias=True)) == gae  # as saved


@pytest.mark.parametrize("path", sorted(__import__("pathlib").Path("configs").rglob("*.yaml")))
def test_every_shipped_recipe_loads(path, recipe_overrides):
    cfg = load_config(path, recipe_overrides(path))
    assert cfg.out_dir.startswith("runs/")


def test_shipped_quickstart_yaml_lists_every_key():
    """Every key of the tree appears in configs/quickstart.yaml, and no other."""
    import yaml

    def keys(tree, prefix=""):
        out = set()
        for k, v in tree.items():
            out.add(prefix + k)
            if isinstance(v, dict) and k not in ("dataset_config", "parts", "judges"):
                out |= keys(v, f"{prefix}{k}.")
        return out

    shipped = yaml.safe_load(open("configs/quickstart.yaml"))
    assert keys(shipped) == keys(RunConfig().model_dump(mode="json", by_alias=True))


def test_every_stage_decides_when_to_log_and_evaluate_the_same_way():
    """``due``: every ``every`` steps and after the last step; never with ``every == 0``."""
    from posttrain.recipes.sampling_loop import due

    assert [s + 1 for s in range(7) if due(3, s, 7)] == [3, 6, 7]
    assert not any(due(0, s, 7) for s in range(7))


def test_a_partly_given_section_keeps_its_owners_defaults(tmp_path):
    """rl's optimiser defaults differ from OptimConfig's own (lr 1e-4, constant schedule):
    setting one key of rl.optim, by override or in a file, keeps the others at rl's."""
    by_override = load_config(None, ["rl.optim.warmup_steps=2"]).rl.optim
    path = tmp_path / "c.yaml"
    path.write_text("rl:\n  optim:\n    warmup_steps: 2\n")
    for optim in (by_override, load_config(path).rl.optim):
        assert (optim.lr, optim.schedule, optim.warmup_steps) == (1e-4, "constant", 2)


def test_the_old_model_dtype_points_at_trainer_precision():
    with pytest.raises(ConfigError, match="model.dtype is replaced by trainer.precision"):
        load_config(None, ["model.dtype=bfloat16"])
    assert load_config(None, ["trainer.precision=bf16"]).trainer.compute_dtype == "bfloat16"


def test_a_preset_architecture_is_checked_and_needs_a_preset():
    assert load_config(None, ["model.architecture=qwen3_moe"]).model.architecture == "qwen3_moe"
    with pytest.raises(ConfigError, match="model.architecture"):
        load_config(None, ["model.architecture=mamba"])
    with pytest.raises(ConfigError, match="shapes a tiny preset"):
        load_config(None, ["model.preset=null", "model.path=/m", "model.architecture=qwen2"])


def test_a_model_path_alone_selects_its_model_and_an_override_replaces_the_source(tmp_path):
    """``model.path`` needs no ``model.preset=null``: given alone (in YAML or as an override of
    a config naming a preset) it is the model, and ``model.preset`` overriding a config's path
    is the preset; naming both in one place is still refused."""
    assert load_config(None, ["model.path=/m"]).model.model_dump(include={"path", "preset"}) \
        == {"path": "/m", "preset": None}
    quick = load_config("configs/quickstart.yaml", ["model.path=/m"]).model
    assert (quick.path, quick.preset) == ("/m", None)
    tau = load_config("configs/tau.yaml", ["model.preset=nano"]).model
    assert (tau.path, tau.preset) == (None, "nano")
    (tmp_path / "c.yaml").write_text("model: {path: /m}\n")
    assert load_config(tmp_path / "c.yaml").model.preset is None
    with pytest.raises(ConfigError, match="set exactly one of model.path and model.preset"):
        load_config("configs/quickstart.yaml", ["model.path=/m", "model.preset=small"])
    (tmp_path / "both.yaml").write_text("model: {path: /m, preset: small}\n")
    with pytest.raises(ConfigError, match="set exactly one of model.path and model.preset"):
        load_config(tmp_path / "both.yaml")


def test_a_tracker_that_is_not_installed_is_a_config_error(monkeypatch):
    assert load_config(None, ["report_to=[tensorboard, tensorboard]"]).report_to == [
        "tensorboard"]
    monkeypatch.setitem(sys.modules, "trackio", None)  # as if it were not installed
    with pytest.raises(ConfigError, match=r"report_to: trackio not installed: pip install "
                                          r"'posttrain\[tracking\]'"):
        load_config(None, ["report_to=[wandb, trackio]"])


@pytest.mark.parametrize("override, suggestion", [
    ("task.dri=1", "dir"), ("rl.stepz=3", "steps"), ("rl.optim.lrr=1", "lr"),
    ("trainr.precision=bf16", "trainer"), ("engine.draft_tokenz=2", "draft_tokens"),
])
def test_an_unknown_key_suggests_the_closest_known_one(override, suggestion):
    """The keys of the section it is in (and of every member of a family section)."""
    with pytest.raises(ConfigError, match=f"unknown key; did you mean '{suggestion}'"):
        load_config(None, [override])
    with pytest.raises(ConfigError, match=r"zzz: unknown key$"):
        load_config(None, ["zzz=1"])
