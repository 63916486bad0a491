"""Validating a config imports neither torch nor transformers, so a typo is reported at once:
the catalogue's facts come from ``algos/index.json`` and every package loads its names on
first use. Each probe runs in a fresh interpreter (this test process has torch loaded)."""

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
HEAVY = ("torch", "transformers", "numpy", "sympy")


def probe(code: str) -> dict:
    """Run ``code`` in a fresh interpreter; it sets ``out``; returns it with the heavy
    modules that got imported."""
    script = f"import json, sys\n{code}\n" \
             f"out['heavy'] = [m for m in {HEAVY!r} if m in sys.modules]\nprint(json.dumps(out))"
    run = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True,
                         text=True, check=True)
    return json.loads(run.stdout)


def test_every_bundled_config_validates_without_torch(recipe_overrides):
    paths = sorted((ROOT / "configs").glob("*.yaml"))
    overrides = {str(p.relative_to(ROOT)): recipe_overrides(p) for p in paths}
    out = probe("from posttrain.config import load_config\n"
                f"out = {{'runs': [load_config(p, o).out_dir for p, o in {overrides!r}.items()]}}")
    assert len(out["runs"]) == len(list((ROOT / "configs").glob("*.yaml")))
    assert out["heavy"] == []


def test_a_task_builder_config_validates_without_torch():
    """Its solver's engine is built through the engine family when the task is, not imported
    with the member's section."""
    out = probe("from posttrain.config import load_config\n"
                "out = {'task': load_config('examples/synthesis/task_builder.yaml').task.name}")
    assert out == {"task": "task_builder", "heavy": []}


def test_a_bad_catalogue_name_or_hyperparameter_is_caught_without_torch():
    out = probe(
        "from posttrain.config import ConfigError, load_config\nout = {'errors': []}\n"
        "for o in (['algo.adv_estimator=grp'], ['actor.policy_loss.r_max=5'],\n"
        "          ['actor.policy_loss.name=cispo', 'actor.policy_loss.r_max=5']):\n"
        "    try:\n        load_config('configs/quickstart.yaml', o); out['errors'].append('')\n"
        "    except ConfigError as e:\n        out['errors'].append(str(e))")
    unknown, not_taken, taken = out["errors"]
    assert "unknown advantage 'grp'; known: behaviour_reg, confession, dr_grpo" in unknown
    assert "policy loss 'ppo_clip' does not take r_max" in not_taken
    assert taken == ""
    assert out["heavy"] == []


def test_the_cli_reports_a_typo_without_importing_torch():
    out = probe("from posttrain.cli.app import main\nsys.argv = ['posttrain', 'train', "
                "'configs/quickstart.yaml', 'sft.batch_sizee=3']\nout = {}\ntry:\n"
                "    main()\nexcept SystemExit as e:\n    out['code'] = e.code")
    assert out == {"code": 2, "heavy": []}


def test_an_entry_loads_only_its_own_module():
    out = probe("from posttrain.algos import get\nget('kl', 'k3')\n"
                "out = {'advantages': 'posttrain.algos.advantages' in sys.modules}")
    assert out["advantages"] is False and "torch" in out["heavy"]


def test_a_spelling_of_an_entry_not_yet_imported_cannot_be_registered_again():
    out = probe("from posttrain.algos import register\nout = {}\ntry:\n"
                "    register('kl', 'k9', aliases=('low_var_kl',), source='x')(lambda: 0)\n"
                "except ValueError as e:\n    out['error'] = str(e)")
    assert out["error"] == "kl 'low_var_kl' is already registered"
