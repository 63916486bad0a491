import pytest
import torch

torch.set_num_threads(2)
torch.set_flush_denormal(True)


@pytest.fixture(scope="session")
def tiny_dir(tmp_path_factory):
    """A nano Llama + tokenizer directory, built once per session."""
    from posttrain.models import build_tiny

    return build_tiny(tmp_path_factory.mktemp("tiny") / "nano", "nano", seed=0)


@pytest.fixture(scope="session")
def tokenizer(tiny_dir):
    from posttrain.models import load_tokenizer

    return load_tokenizer(tiny_dir)


@pytest.fixture
def model(tiny_dir):
    from posttrain.models import load_model

    return load_model(tiny_dir)
