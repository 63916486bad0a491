"""A catalogue function of the user's, named by dotted path where config takes a catalogue
name: a new advantage estimator with an option is one function (no config edit), its
constraints follow from the inputs it takes, and a policy loss copied from a built-in trains
exactly as the built-in does (examples/extensions/catalogue.py, docs/extending.md)."""

import copy
from pathlib import Path

import pytest
import torch

from posttrain.config import (
    AlgoConfig,
    ConfigError,
    EvalConfig,
    OptimConfig,
    RLConfig,
    build_config,
    load_config,
)
from posttrain.engines import TorchEngine
from posttrain.envs import ArithmeticTasks
from posttrain.recipes import run_rl
from posttrain.recipes.sampling_loop import RLRun
from posttrain.reporting import Reporter
from posttrain.rewards import VERIFIERS, RewardFunction
from posttrain.train import Trainer
from posttrain.train.rl_update import compute_advantages, estimator_options
from posttrain.types import Batch, Episode, Segment

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = "examples/extensions/catalogue.py"
MEDIAN, CLIPPED = f"{EXAMPLE}:median_baseline", f"{EXAMPLE}:clipped"
# the overrides docs/extending.md runs
ESTIMATOR = f"algo.advantage={{name: {MEDIAN}, scale: 0.5}}"
LOSS = f"actor.policy_loss.name={CLIPPED}"


def episodes(rewards, groups):
    seg = Segment.from_prompt_completion([1, 2], [3, 4], [-0.5, -0.5])
    return [Episode([seg], rewards={"a": r}, reward=r, group_id=str(g))
            for r, g in zip(rewards, groups)]


def test_the_docs_run_the_example():
    doc = (ROOT / "docs" / "extending.md").read_text()
    assert ESTIMATOR in doc and LOSS in doc


def test_a_new_estimator_with_an_option_is_one_function():
    """The example's estimator is validated, shows its option's value, takes it from either
    spelling and computes ``scale (r - median_g)``."""
    cfg = load_config(None, ["stages=[rl]", ESTIMATOR])
    assert (cfg.algo.adv_estimator, cfg.algo.advantage.scale) == (MEDIAN, 0.5)
    assert estimator_options(cfg.algo) == {"scale": 0.5}
    assert load_config(None, [f"algo.adv_estimator={MEDIAN}"]).algo.advantage.scale == 1.0
    assert build_config(cfg.model_dump(mode="json", by_alias=True)) == cfg  # as saved
    eps = episodes([1.0, 0.0, 1.0, 0.0, 3.0, 1.0, 2.0], [0, 0, 0, 0, 1, 1, 1])
    b = Batch.from_episodes(eps, 0)
    adv = compute_advantages(b, eps, cfg.algo, {"a": 1.0})
    # lower medians 0 and 2; the two completion tokens of each row
    expected = 0.5 * torch.tensor([1.0, 0.0, 1.0, 0.0, 1.0, -1.0, 0.0])
    torch.testing.assert_close(adv, expected[:, None] * b.loss_mask)
    with pytest.raises(ConfigError, match="median_baseline' does not take lam; it takes: scale"):
        load_config(None, [f"algo.adv_estimator={MEDIAN}", "algo.advantage.lam=0.9"])
    with pytest.raises(ConfigError, match=r"algo.lam only acts with adv_estimator in \('gae',\)"):
        load_config(None, [f"algo.adv_estimator={MEDIAN}", "algo.lam=0.9"])
    with pytest.raises(ConfigError, match="advantage estimator 'grpo' does not take scale"):
        load_config(None, ["algo.advantage.scale=0.5"])


def step(model, tokenizer, tmp_path, overrides):
    """One GRPO step of ``model`` (a copy) with the ``algo`` and ``actor`` of ``overrides``;
    the trained weights."""
    cfg = load_config(None, ["stages=[rl]", *overrides])
    policy = copy.deepcopy(model)
    rl = RLConfig(steps=1, prompts_per_step=4, group_size=4, max_new_tokens=5, eval_every=0,
                  optim=OptimConfig(lr=1e-2))
    engine = TorchEngine(policy, tokenizer.pad_token_id, tokenizer.eos_token_id)
    run_rl(RLRun(Trainer(policy, rl.optim, 1), tokenizer, ArithmeticTasks(("+",), 1), [],
                 RewardFunction({"len": ("length_mod2", 1.0)}), EvalConfig(), "len",
                 Reporter(tmp_path / str(len(list(tmp_path.iterdir()))), quiet=True), cfg=rl,
                 algo=cfg.algo, actor=cfg.actor), engine)
    return torch.cat([p.detach().flatten() for p in policy.parameters()])


def test_a_dotted_path_estimator_and_policy_loss_run_a_grpo_step(model, tokenizer, tmp_path,
                                                                 monkeypatch):
    """The copy of ppo_clip trains exactly as ppo_clip; the new estimator trains."""
    monkeypatch.setitem(VERIFIERS, "length_mod2", lambda text, ref: len(text) % 2)
    start = torch.cat([p.detach().flatten() for p in model.parameters()])
    built_in = step(model, tokenizer, tmp_path, [])
    copied = step(model, tokenizer, tmp_path, [LOSS])
    assert torch.equal(copied, built_in)
    assert (built_in - start).abs().max() > 1e-4
    median = step(model, tokenizer, tmp_path, [ESTIMATOR, LOSS])
    assert (median - start).abs().max() > 1e-4 and not torch.equal(median, built_in)


MINE = '''
import torch
from posttrain.algos import register

@register("advantage", output="token", feeds={"rewards": "token_rewards", "mask": "loss_mask"})
def critic_baseline(*, rewards: torch.Tensor, values: torch.Tensor, mask: torch.Tensor):
    """``A_t = r_t - V_t``."""
    return (rewards - values) * mask

@register("advantage", output="episode")
def greedy_gap(*, rewards: torch.Tensor, baseline_rewards: torch.Tensor, mask: torch.Tensor):
    """``A_i = R_i - R(greedy)``."""
    return (rewards - baseline_rewards)[:, None] * mask

@register("advantage", output="episode")
def needs_a_teacher(*, rewards: torch.Tensor, teacher_logp: torch.Tensor, mask: torch.Tensor):
    """Reads an input the RL update does not supply."""

@register("advantage", output="episode")
def needs_a_scale(*, rewards: torch.Tensor, group_ids: torch.Tensor, mask: torch.Tensor,
                  scale: float):
    """``A_i = scale r_i``."""

def no_output(*, rewards: torch.Tensor, mask: torch.Tensor):
    """Declares nothing."""

def not_a_policy_loss(*, advantages: torch.Tensor, mask: torch.Tensor):
    """Has no log-probs."""

def every_input(*, logp: torch.Tensor, old_logp: torch.Tensor, advantages: torch.Tensor,
                mask: torch.Tensor):
    """``L = -A logp``, noting the inputs it was given."""
    every_input.seen = {"logp", "old_logp", "advantages", "mask"}
    return -advantages * logp, {}

NOT_A_FUNCTION = 3
'''


@pytest.fixture
def mine(tmp_path, monkeypatch):
    """``mine.py``'s functions by dotted path, from the working directory."""
    (tmp_path / "mine.py").write_text(MINE)
    monkeypatch.chdir(tmp_path)
    return lambda name: f"mine.py:{name}"


def test_a_dotted_path_estimators_constraints_follow_from_its_inputs(mine):
    """What the inputs need of the run applies to a user's estimator as to the built-ins:
    the critic's values a critic, a greedy baseline a synchronous single-turn rollout; one
    without group_ids trains on groups of one."""
    critic = f"algo.adv_estimator={mine('critic_baseline')}"
    with pytest.raises(ConfigError, match="critic_baseline and critic.enabled go together"):
        load_config(None, ["stages=[rl]", critic])
    load_config(None, ["stages=[rl]", critic, "critic.enabled=true", "rl.group_size=1"])
    greedy = f"algo.adv_estimator={mine('greedy_gap')}"
    load_config(None, ["stages=[rl]", greedy, "rl.group_size=1"])
    with pytest.raises(ConfigError, match="greedy_gap decodes each prompt greedily"):
        load_config(None, ["stages=[rl]", greedy, "rl.mode=async"])
    with pytest.raises(ConfigError, match="critic.enabled go together: gae needs"):
        load_config(None, ["stages=[rl]", "critic.enabled=true"])


@pytest.mark.parametrize(("key", "name", "error"), [
    ("algo.adv_estimator", "nowhere.py:f", "'nowhere.py:f': no file 'nowhere.py' "
     r"\(a file is found from the working directory, .*, not from the config's folder\)"),
    ("algo.adv_estimator", "mine.py:absent", "'mine.py' has no attribute 'absent'"),
    ("algo.adv_estimator", "mine.py:NOT_A_FUNCTION", "is a int, not a function"),
    ("algo.adv_estimator", "mine.py:no_output",
     r"cannot be used here \(it does not declare its output: an advantage per episode"),
    ("algo.adv_estimator", "mine.py:needs_a_teacher",
     "it takes teacher_logp, which the RL update does not supply"),
    ("algo.adv_estimator", "mine.py:needs_a_scale",
     "advantage estimator 'mine.py:needs_a_scale' needs scale"),
    ("actor.policy_loss.name", "mine.py:not_a_policy_loss",
     "it does not take logp, the policy's log-probs"),
    ("actor.policy_loss.name", "mine.py:greedy_gap", "logp"),
])
def test_a_dotted_path_is_checked_when_the_config_is_validated(mine, key, name, error):
    with pytest.raises(ConfigError, match=f"{key.split('.')[0]}.*{error}"):
        load_config(None, ["stages=[rl]", f"{key}={name}"])


def test_the_flat_keys_and_algo_advantage_are_one_setting():
    """The flat keys fill ``algo.advantage`` and ``algo.advantage`` fills them; a value given
    both ways must agree."""
    flat = load_config(None, ["algo.adv_estimator=gd2po", "algo.conflict_filter=snr",
                              "reward.parts={}", "reward.parts.c.verifier=exact",
                              "reward.parts.f.verifier=format", "reward.accuracy_part=c"])
    section = load_config(None, ["algo.advantage={name: gd2po, filter: snr}",
                                 "reward.parts={}", "reward.parts.c.verifier=exact",
                                 "reward.parts.f.verifier=format", "reward.accuracy_part=c"])
    assert flat == section
    assert estimator_options(flat.algo) == {"filter": "snr"}
    assert (flat.algo.advantage.tau, flat.algo.tau) == (0.8, 0.8)  # shown as used
    both = AlgoConfig(adv_estimator="gigpo", gamma=0.9, advantage={"gamma": 0.9})
    assert both == AlgoConfig(advantage={"name": "gigpo", "gamma": 0.9})
    with pytest.raises(ValueError, match="algo.gamma=0.9 and algo.advantage.gamma=0.5 differ"):
        AlgoConfig(adv_estimator="gigpo", gamma=0.9, advantage={"gamma": 0.5})
    with pytest.raises(ConfigError, match="adv_estimator=rloo and algo.advantage.name=grpo"):
        load_config(None, ["algo.adv_estimator=rloo", "algo.advantage.name=grpo"])
    assert AlgoConfig(adv_estimator="group_norm", advantage={"name": "grpo"}).advantage.name \
        == "grpo"
    assigned = AlgoConfig(adv_estimator="gae")
    assigned.gamma = 0.9  # an assignment is validated as a given key
    assert estimator_options(assigned) == {"gamma": 0.9}


def test_the_actor_loss_is_supplied_every_input_validation_allows(mine):
    """A loss that requires every input the config lets a policy loss ask for
    (``POLICY_LOSS_INPUTS``) is called by the RL loss with each of them."""
    from posttrain.algos import StepNorm, get
    from posttrain.config.sections.trainer import POLICY_LOSS_INPUTS
    from posttrain.train import RLTokens, rl_loss

    actor = load_config(None, [f"actor.policy_loss.name={mine('every_input')}"]).actor
    logp = torch.tensor([[-1.0, -2.0]], requires_grad=True)
    t = RLTokens(logp, None, logp.detach() - 0.1, torch.tensor([[1.0, -1.0]]),
                 torch.tensor([[1.0, 0.0]]))
    loss, _ = rl_loss(t, StepNorm.from_mask(t.mask), actor)
    assert set(POLICY_LOSS_INPUTS) == get("policy_loss", mine("every_input")).seen
    assert loss.item() == pytest.approx(1.0)  # -A logp on the one unmasked token


def test_a_shaping_rule_of_ones_own_is_judged_by_its_declared_output(tmp_path):
    """``reward.shaping`` takes a function by path that declares its output, and reshapes with
    it; one that declares none (a filter, like ``dynamic_sampling``) is refused, saying why."""
    from posttrain.config import ShapingRule
    from posttrain.rollout.scoring import shape_rewards

    module = tmp_path / "rules.py"
    module.write_text(
        "import torch\n\nfrom posttrain.algos import register\n\n\n"
        "@register('shaping', output='cost')\n"
        "def per_token(*, lengths: torch.Tensor) -> torch.Tensor:\n"
        "    return lengths.double()\n\n\n"
        "def undeclared(*, lengths: torch.Tensor) -> torch.Tensor:\n"
        "    return lengths.double()\n")
    cfg = load_config(None, [f"reward.shaping=[{{name: '{module}:per_token', coef: 0.25}}]"])
    (rule,) = cfg.reward.shaping
    shaped = shape_rewards(episodes([1.0, 0.0], [0, 0]), [rule], 0)
    assert [e.reward for e in shaped] == [1.0 - 0.25 * 2, 0.0 - 0.25 * 2]  # 2 tokens each
    with pytest.raises(ValueError, match="declares no output, a bonus, a cost or the new"):
        ShapingRule(name=f"{module}:undeclared")
