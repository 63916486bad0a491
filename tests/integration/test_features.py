"""Features plug into the core's hooks (``posttrain.hooks``; docs/architecture.md, "Hooks and
features"): found by folder or entry point, called in order, and a new one is one folder."""

import json
import re
import sys
from pathlib import Path

import pytest
import torch

from posttrain import hooks
from posttrain.config import ActorConfig, AlgoConfig, ConfigError, EvalConfig, RLConfig, load_config
from posttrain.config.combinations import RUN_SHAPES
from posttrain.config.section import OptimConfig
from posttrain.engines import TorchEngine
from posttrain.envs import ArithmeticTasks
from posttrain.recipes import run_rl
from posttrain.recipes.sampling_loop import RLRun
from posttrain.reporting import Reporter
from posttrain.rewards import VERIFIERS, RewardFunction
from posttrain.train import Trainer
from posttrain.train.rl_update import compute_advantages
from posttrain.types import Batch, Episode, Segment

ROOT = Path(__file__).resolve().parents[2]
SRC = ROOT / "src" / "posttrain"
EXAMPLE = re.compile(r"`length_penalty/(\w+\.py)`:\n\n```python\n(.*?)```", re.DOTALL)
BUILT_IN = ["effort", "taco", "top_entropy", "behaviour_reg", "confession", "actor_as_grm",
            "swarm", "curio", "pgenrm", "skills", "mtp", "quick"]
SKILLS = ["skill", "Skill"]
MTP = ["mtp", "MTP", "draft", "speculative", "Speculative"]  # MTP heads, speculative decoding


@pytest.fixture
def fresh_features(monkeypatch):
    """The features found anew, before and after the test (their lists are cached)."""
    before = set(sys.modules)
    hooks.features.cache_clear()
    hooks.hooked.cache_clear()
    yield
    hooks.features.cache_clear()
    hooks.hooked.cache_clear()
    for name in set(sys.modules) - before:
        if name.startswith(("posttrain.features.", "my_plugin")):
            del sys.modules[name]


def example_folder(parent: Path) -> Path:
    """The worked example's files, as docs/architecture.md shows them, in ``parent``."""
    folder = parent / "length_penalty"
    folder.mkdir()
    files = EXAMPLE.findall((ROOT / "docs" / "architecture.md").read_text())
    assert [name for name, _ in files] == ["__init__.py", "settings.py", "penalty.py"]
    for name, text in files:
        (folder / name).write_text(text)
    return folder


def test_the_built_in_features_are_found_in_their_order_with_every_hook_importable():
    found = hooks.features()
    assert [f.name for f in found] == BUILT_IN
    assert [f.order for f in found] == sorted(f.order for f in found)
    for f in found:
        for name in hooks.HOOKS:
            assert getattr(f, name) is None or callable(f.hook(name)), (f.name, name)
    # the RL update's modifiers in the order the update applied them before they moved
    assert [h.__module__.split(".")[2] for h in hooks.hooked("advantages")] == \
        ["taco", "top_entropy", "behaviour_reg", "confession"]


def test_the_architecture_page_lists_every_hook():
    """docs/architecture.md's hook table names each hook once, and no other."""
    text = (ROOT / "docs" / "architecture.md").read_text()
    rows = re.findall(r"^\| (`[a-z_]+`(?:, `[a-z_]+`)*) \|", text, re.MULTILINE)
    named = [name for row in rows for name in re.findall(r"`([a-z_]+)`", row)]
    assert sorted(named) == sorted(hooks.HOOKS)


def test_an_unknown_hook_feature_or_features_key_is_named():
    with pytest.raises(ValueError, match="no hook 'advantage'; the hooks: rewards, advantages"):
        hooks.hooked("advantage")
    with pytest.raises(ConfigError,
                       match="no feature 'lenght_penalty'; the features: effort, taco"):
        load_config("configs/quickstart.yaml", ["features.lenght_penalty={coef: 1}"])
    with pytest.raises(ConfigError, match="feature 'taco' has no keys of its own"):
        load_config("configs/quickstart.yaml", ["features.taco={}"])


def test_a_folder_without_a_feature_or_a_second_of_one_name_is_refused(tmp_path, monkeypatch,
                                                                      fresh_features):
    import posttrain.features as package

    monkeypatch.setattr(package, "__path__", [*package.__path__, str(tmp_path)])
    (tmp_path / "twin").mkdir()
    (tmp_path / "twin" / "__init__.py").write_text(
        "from posttrain.hooks import Feature\nFEATURE = Feature('taco')\n")
    with pytest.raises(ValueError, match="two features share a name"):
        hooks.features()
    (tmp_path / "twin" / "__init__.py").write_text("FEATURE = {'name': 'twin'}\n")
    del sys.modules["posttrain.features.twin"]
    hooks.features.cache_clear()
    with pytest.raises(TypeError, match="must be a posttrain.hooks.Feature"):
        hooks.features()


def test_a_declared_refusal_is_derived_into_the_config_rules(tmp_path, monkeypatch,
                                                            fresh_features):
    """A feature's ``refuses`` is the config's error in a run of that shape with the feature
    on (its ``active``), formatted with the config, and nowhere else; the built-in ones too."""
    import posttrain.features as package

    monkeypatch.setattr(package, "__path__", [*package.__path__, str(tmp_path)])
    (tmp_path / "lockstep").mkdir()
    (tmp_path / "lockstep" / "__init__.py").write_text(
        "from posttrain.hooks import Feature\n"
        "FEATURE = Feature('lockstep', active=lambda cfg: cfg.seed == 7, refuses={\n"
        "    'async': 'lockstep samples in step (seed {cfg.seed}): use rl.mode=sync'})\n")
    load_config("configs/quickstart.yaml", ["rl.mode=async"])  # off: seed 0
    load_config("configs/quickstart.yaml", ["seed=7"])  # on, in a synchronous run
    with pytest.raises(ConfigError, match=r"lockstep samples in step \(seed 7\): use rl.mode"):
        load_config("configs/quickstart.yaml", ["seed=7", "rl.mode=async"])
    with pytest.raises(ConfigError, match="at several task.efforts; use rl.mode=sync"):
        load_config("configs/quickstart.yaml", ["task.efforts=[50, 100]", "rl.mode=async"])
    with pytest.raises(ConfigError, match="rl.actor_as_grm: the grading prompts are built in one"):
        load_config("configs/quickstart.yaml", ["rl.actor_as_grm={}", "dist.trainer_processes=2"])
    with pytest.raises(ValueError, match=r"refuses \['gpu'\]: not run shapes \(async, agent"):
        hooks.Feature("x", refuses={"gpu": "no"})
    assert set(RUN_SHAPES) == set(hooks.SHAPES)  # every shape a feature may refuse is judged


def grpo_episodes(lengths: list[int], rewards: list[float]) -> list[Episode]:
    """One group: episode ``i`` sampled ``lengths[i]`` tokens and earned ``rewards[i]``."""
    return [Episode([Segment.from_prompt_completion([1, 2], list(range(3, 3 + n)),
                                                    [-0.5] * n)],
                    rewards={"a": r}, reward=r, group_id="0")
            for n, r in zip(lengths, rewards)]


def test_the_worked_example_is_one_folder_that_changes_the_rewards_and_reports(
        tmp_path, monkeypatch, fresh_features, model, tokenizer):
    """The example's folder, dropped beside the built-in features, is found; its keys
    validate; its reward hook makes a group of equal rewards the group of penalised ones (the
    advantages are those of rewards ``1 - 0.5 max(0, n - 2)``, exactly); one RL step logs its
    metric; without its keys nothing changes."""
    import posttrain.features as package

    monkeypatch.setattr(package, "__path__", [*package.__path__, str(tmp_path)])
    example_folder(tmp_path)
    assert "length_penalty" in [f.name for f in hooks.features()]
    cfg = load_config("configs/quickstart.yaml", [
        "features.length_penalty={coef: 0.5, budget: 2}"])
    assert cfg.features["length_penalty"].coef == 0.5
    with pytest.raises(ConfigError, match="budget"):
        load_config("configs/quickstart.yaml", ["features.length_penalty={budget: -1}"])

    eps = grpo_episodes([2, 3, 4, 2], [1.0, 1.0, 1.0, 1.0])
    batch = Batch.from_episodes(eps, 0)
    penalised = compute_advantages(batch, eps, AlgoConfig(), {"a": 1.0}, cfg.features)
    by_hand = grpo_episodes([2, 3, 4, 2], [1.0, 0.5, 0.0, 1.0])
    expected = compute_advantages(batch, by_hand, AlgoConfig(), {"a": 1.0})
    torch.testing.assert_close(penalised, expected, atol=0, rtol=0)
    assert penalised.abs().sum() > 0
    assert compute_advantages(batch, eps, AlgoConfig(), {"a": 1.0}).abs().sum() == 0

    monkeypatch.setitem(VERIFIERS, "length_mod2", lambda text, ref: len(text) % 2)
    rl = RLConfig(steps=1, prompts_per_step=2, group_size=2, max_new_tokens=5, eval_every=0,
                  optim=OptimConfig(lr=1e-3))
    engine = TorchEngine(model, tokenizer.pad_token_id, tokenizer.eos_token_id)
    run_rl(RLRun(Trainer(model, rl.optim, 1), tokenizer, ArithmeticTasks(("+",), 1), [],
                 RewardFunction({"len": ("length_mod2", 1.0)}), EvalConfig(), "len",
                 Reporter(tmp_path / "run", quiet=True), cfg=rl, algo=AlgoConfig(),
                 actor=ActorConfig(), features=cfg.features), engine)
    step = json.loads((tmp_path / "run" / "metrics.jsonl").read_text().splitlines()[0])
    assert 0.0 <= step["length/over_budget"] <= 1.0


def test_an_installed_package_registers_a_feature_by_entry_point(tmp_path, monkeypatch,
                                                                  fresh_features):
    """The example as a package of its own, with an entry point in its metadata."""
    folder = example_folder(tmp_path)
    folder.rename(tmp_path / "my_plugin")
    dist = tmp_path / "my_plugin-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: my-plugin\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text(
        "[posttrain.features]\nlength_penalty = my_plugin:FEATURE\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert "length_penalty" in [f.name for f in hooks.features()]
    cfg = load_config("configs/quickstart.yaml", ["features.length_penalty={coef: 0.1}"])
    assert cfg.features["length_penalty"].budget == 64


# the orchestration files and the features that have moved out of them
MOVED = {
    "train/rl_update.py": BUILT_IN + MTP,
    "train/trainer.py": MTP,
    "train/checkpoint.py": MTP,
    "rollout/scoring.py": BUILT_IN + ["grading", "Effort"],
    "rollout/single_turn.py": ["effort", "Effort"],
    "rollout/agent.py": ["swarm", "Swarm"],
    "recipes/distillation/opd.py": MTP + ["effort", "Effort"],
    "rollout/evaluation.py": BUILT_IN + MTP + ["spec/"],
    "rollout/async_source.py": BUILT_IN + ["confess"],
    "recipes/run_tasks.py": ["confess", "curio", "grading", "taco", "top_entropy",
                             "behaviour_reg", "swarm", "effort", "Effort", *SKILLS],
    "recipes/sampling_loop.py": ["confess", "curio", "grading", "taco", "behaviour_reg", *MTP,
                                 *SKILLS],
    "recipes/build.py": MTP + SKILLS + ["quick", "attn_res"],
    "recipes/sft.py": MTP + ["quick"],
    "recipes/reward_model.py": ["pgenrm", "prototype", "Prototype"],
    "recipes/agent_tasks.py": ["curio", "CURIO"],
    "recipes/placement.py": MTP,
    "recipes/stages.py": MTP,
    "recipes/dpo.py": MTP,
    "recipes/distillation/offline.py": MTP,
    "config/combinations.py": ["curio", "swarm", "CURIO", "SWARM"],
    "recipes/rl.py": ["grading", "actor_as_grm", "GRM", "confess", "effort", *MTP, *SKILLS],
}


@pytest.mark.parametrize("path", sorted(MOVED))
def test_the_orchestration_files_name_no_feature_that_moved_out(path):
    text = (SRC / path).read_text()
    named = [name for name in MOVED[path] if name in text]
    assert named == [], f"{path} names {named}: they belong in features/<name>/"
