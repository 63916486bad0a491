"""The task families of environment libraries that play their own episodes (``verifiers``,
``nemo_gym``): what a run of one may combine, checked when the config loads (no library
needed), and the spec each hands its runner."""

import pytest

from posttrain.config import ConfigError, load_config

FAMILIES = {
    "verifiers": ["task.name=verifiers", "task.environment=arith_env"],
    "nemo_gym": ["task.name=nemo_gym", "task.environment=arith_gym",
                 "task.paths=[examples/nemo_gym]"],
}
PARTS = ["reward.parts={correct: {verifier: env}}", "reward.accuracy_part=correct",
         "stages=[rl]"]


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_a_library_run_loads(family):
    cfg = load_config(None, [*FAMILIES[family], *PARTS])
    assert cfg.task.name == family and cfg.task.spec()


@pytest.mark.parametrize("family", sorted(FAMILIES))
@pytest.mark.parametrize("extra, words", [
    (["reward.parts={correct: {verifier: env}, fmt: {verifier: format}}"],
     "reward.parts fmt need verifier env"),
    (["rl.mode=async"], "plays with rl.mode=sync"),
    (["agent.compaction.strategy=microcompact"], "drop agent.compaction"),
])
def test_what_a_library_run_cannot_combine(family, extra, words):
    with pytest.raises(ConfigError, match=words):
        load_config(None, [*FAMILIES[family], *PARTS, *extra])


def test_the_nemo_gym_spec_carries_its_judges_and_turn_limit():
    cfg = load_config(None, [*FAMILIES["nemo_gym"], *PARTS, "task.max_steps=3",
                             "task.models={judge: {base_url: 'http://j/v1', model: j}}"])
    spec = cfg.task.spec()
    assert spec["max_steps"] == 3 and spec["environment"] == "arith_gym"
    assert spec["models"] == {"judge": {"base_url": "http://j/v1", "api_key": "none",
                                        "model": "j"}}
    with pytest.raises(ConfigError, match="model"):
        load_config(None, [*FAMILIES["nemo_gym"], *PARTS, "task.models={judge: {base_url: x}}"])
