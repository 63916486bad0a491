"""The local trainer and the Ray-actor trainer implement ``PolicyTrainer`` alike: every member
exists with the protocol's parameters (names, kinds, defaults), so a recipe typed against the
protocol runs on either."""

import inspect

import pytest

from posttrain.cluster import RayTrainer
from posttrain.config import OptimConfig
from posttrain.train import PolicyTrainer, Trainer

METHODS = sorted(name for name, value in vars(PolicyTrainer).items()
                 if callable(value) and not name.startswith("_"))


def parameters(fn) -> list[tuple[str, object, object]]:
    return [(p.name, p.kind, p.default) for p in inspect.signature(fn).parameters.values()]


def test_the_protocol_lists_what_the_recipes_call():
    assert set(METHODS) >= {"compute_logprobs", "apply", "named_weights", "export_model",
                            "state_dict", "load_state_dict"}


@pytest.mark.parametrize("cls", [Trainer, RayTrainer], ids=lambda c: c.__name__)
@pytest.mark.parametrize("name", METHODS)
def test_each_trainer_takes_the_protocols_parameters(cls, name):
    assert parameters(getattr(cls, name)) == parameters(getattr(PolicyTrainer, name))


def test_the_ray_trainer_forwards_the_model():
    assert isinstance(inspect.getattr_static(RayTrainer, "model"), property)


def test_a_live_local_trainer_is_a_policy_trainer(model):
    trainer = Trainer(model, OptimConfig(), 1)
    assert isinstance(trainer, PolicyTrainer)
    assert trainer.model is model
