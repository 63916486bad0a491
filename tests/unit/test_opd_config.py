"""The opd stage's settings: what it needs and what it refuses, each with a clear message."""

import pytest

from posttrain.config import ConfigError, load_config

TEACHER = "opd.teachers=[{path: /t, domains: [addition]}]"


def test_an_opd_stage_with_a_teacher_loads():
    cfg = load_config(None, ["stages=[sft, opd]", TEACHER])
    assert cfg.opd.teachers[0].domains == ["addition"] and cfg.opd.loss == "full_vocab_rkl"
    assert load_config(None, ["stages=[opd]", "opd.self_distill=opsd"]).opd.teachers == []


@pytest.mark.parametrize("overrides,message", [
    (["stages=[opd]"], "needs opd.teachers or opd.self_distill"),
    (["stages=[opd]", TEACHER, "opd.self_distill=sdft"], "leave opd.teachers empty"),
    (["stages=[opd]", TEACHER, "opd.loss=opd_sampled", "opd.topk=4"], "topk applies"),
    (["stages=[opd]", TEACHER, "opd.loss=mopd", "opd.group_size=1"], "group_size >= 2"),
    (["stages=[opd]", TEACHER, "opd.teacher_placement=ray"], "sampled-token log-probs only"),
    (["stages=[opd]", TEACHER, "opd.loss=opd_clip", "opd.teacher_placement=ray"],
     "needs dist.backend=ray"),
    (["stages=[opd]", TEACHER, "task.name=calculator"], "agent task"),
    (["stages=[sft, rl]", TEACHER], "'opd' is not in stages"),
    (["stages=[opd]", "opd.self_distill=magic"], "opd.self_distill"),
    (["stages=[opd]", TEACHER, "opd.loss=kl"], "opd.loss"),
])
def test_bad_opd_settings_are_refused(overrides, message):
    with pytest.raises(ConfigError, match=message):
        load_config(None, overrides)
