import importlib.util
import os

# isort: off
import posttrain  # noqa: F401  (before torch, as the CLI: its OpenMP wait policy applies)
import pytest
import torch

# isort: on

pytest_plugins = ["ci_policy", "pytester"]  # skips under CI=true, the jail's tests; and their test

# an optional engine's own tests are collected only where it is installed: vLLM's run in the
# vLLM-CPU environment (tests/engines/test_vllm_env.py), SGLang's on a GPU machine
collect_ignore = [f"engines/test_{name}_engine.py" for name in ("vllm", "sglang")
                  if importlib.util.find_spec(name) is None]
if importlib.util.find_spec("vllm") is None:
    collect_ignore.append("integration/test_vllm_ray.py")

MAX_WORKERS = 4  # past it the longest module (the worked example's run) is the floor
CORES = len(os.sched_getaffinity(0))


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_auto_num_workers(config):
    """``-n auto`` (pyproject's addopts): a pytest-xdist worker a core, at most MAX_WORKERS."""
    return max(1, min(CORES, MAX_WORKERS))


def pytest_collection_modifyitems(config, items):
    """Modules with slow tests first (a stable sort): pytest-xdist hands whole modules to its
    workers in this order (``--no-loadscope-reorder``), so the long runs start at once, on
    different workers, and the short modules fill in after them (its default order, most
    tests first, left the 5-minute worked example for last)."""
    slow = {item.nodeid.split("::")[0] for item in items if item.get_closest_marker("slow")}
    items.sort(key=lambda item: item.nodeid.split("::")[0] not in slow)


# two torch threads a test, or the cores a worker's share when that is fewer (2 workers on 2
# cores: one each, not four threads contending for two cores); the programs a test starts
# (servers, recipes, Ray workers) inherit the same share through OMP_NUM_THREADS
WORKERS = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
THREADS = max(1, min(2, CORES // WORKERS))
torch.set_num_threads(THREADS)
os.environ.setdefault("OMP_NUM_THREADS", str(THREADS))
torch.set_flush_denormal(True)


@pytest.fixture(autouse=True)
def no_plots_unless_read(request, monkeypatch):
    """A run draws its curves*.png only in tests marked ``plots``, the ones that read them
    (drawing takes 2-3 s a run, over some 80 runs in the suite); a module-scoped run draws
    them (it starts before this fixture)."""
    if request.node.get_closest_marker("plots") is None:
        from posttrain.recipes import reward_model, stages

        for module, name in ((stages, "plot_curves"), (stages, "plot_stages"),
                             (reward_model, "plot_stages")):
            monkeypatch.setattr(module, name, lambda *args, **kwargs: None)


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


@pytest.fixture(scope="session")
def recipe_overrides(tmp_path_factory):
    """``overrides(path)``: what a shipped config in ``configs/`` needs to load on a fresh
    checkout. gsm8k_style.yaml and configs/real/ name data its example script writes: written
    here, small."""
    import subprocess
    import sys

    data = tmp_path_factory.mktemp("gsm8k_style")
    subprocess.run([sys.executable, "examples/gsm8k_style/make_data.py", str(data),
                    "--train", "10", "--test", "5", "--sft", "10"], check=True,
                   capture_output=True)
    tasks = [f"task.data.path={data / 'train.jsonl'}",
             f"task.data.eval_path={data / 'test.jsonl'}"]
    by_name = {"gsm8k_style": [*tasks, f"sft.data={data / 'sft.jsonl'}"], "real": tasks}
    return lambda path: by_name.get(path.stem, by_name.get(path.parent.name, []))
