"""Device keys: auto resolves to the CPU on a machine without CUDA, and a CUDA device that is
not there (or fp16 without one) is a config error naming the key, before any model loads."""

import pytest
import torch

from posttrain.config import ConfigError, load_config
from posttrain.models.devices import resolve_device

no_cuda = pytest.mark.skipif(torch.cuda.is_available(), reason="checks a machine without CUDA")


@no_cuda
def test_auto_is_the_cpu_without_cuda_and_cuda_is_refused():
    assert resolve_device("auto") == torch.device("cpu")
    assert resolve_device("cpu") == torch.device("cpu")
    with pytest.raises(ValueError, match="engine.device: cuda:1 needs a CUDA GPU"):
        resolve_device("cuda:1", "engine.device")


@no_cuda
@pytest.mark.parametrize("overrides,message", [
    (["trainer.device=cuda"], "trainer.device: cuda needs a CUDA GPU"),
    (["engine.device=cuda:0"], "engine.device: cuda:0 needs a CUDA GPU"),
    (["trainer.precision=fp16"], "trainer.precision fp16 needs a CUDA device"),
])
def test_a_device_this_machine_lacks_is_a_config_error(overrides, message):
    with pytest.raises(ConfigError, match=message):
        load_config(None, overrides)


def test_a_device_key_takes_auto_cpu_cuda_or_cuda_n():
    assert load_config(None, ["trainer.device=cpu"]).trainer.device == "cpu"
    with pytest.raises(ConfigError, match="trainer.device"):
        load_config(None, ["trainer.device=tpu"])
    with pytest.raises(ValueError, match="is not auto, cpu, cuda or cuda:N"):
        resolve_device("mps")
