"""One ``posttrain eval``, four modes: each runs, each old spelling (``eval --skills-bench``,
``tau eval``, ``quick-eval``; ``filter`` for ``filter-prompts``) says its new one on one line
and does the same, and an option of another mode is refused before anything is loaded."""

import json

import pytest
import typer.main
from typer.testing import CliRunner

from posttrain.cli.app import app
from posttrain.cli.eval_cmd import Mode, takes

runner = CliRunner()
SKILL_BANK = "skills.dir={bank}"
# a command: its new spelling, its old one (None: it has none), the file it writes in {out};
# {model} is a nano model with the quick-instruction tokens, which every mode can evaluate
SPELLINGS = {
    "heldout": (["eval", "{model}", "--config", "configs/quickstart.yaml", "eval.num_problems=2",
                 "out_dir={tmp}/run", "--out", "{out}"],
                None, "summary.json"),
    "skills-bench": (
        ["eval", "{model}", "--mode", "skills-bench", "--config", "configs/quickstart.yaml",
         SKILL_BANK, "eval.num_problems=2", "eval.max_new_tokens=4", "out_dir={tmp}/run",
         "--out", "{out}"],
        ["eval", "{model}", "--skills-bench", "--config", "configs/quickstart.yaml", SKILL_BANK,
         "eval.num_problems=2", "eval.max_new_tokens=4", "out_dir={tmp}/run", "--out", "{out}"],
        "skills_bench.json"),
    "tau": (
        ["eval", "{model}", "--mode", "tau", "--domain", "mock", "--solo", "--limit", "1",
         "--max-turns", "2", "--max-new-tokens", "4", "--out", "{out}"],
        ["tau", "eval", "--domain", "mock", "--model", "{model}", "--solo", "--limit", "1",
         "--max-turns", "2", "--max-new-tokens", "4", "--out", "{out}"],
        "summary.json"),
    "quick": (["eval", "{model}", "--mode", "quick", "--rows", "3", "--max-new-tokens", "2",
               "--out", "{out}/report.json"],
              ["quick-eval", "{model}", "--rows", "3", "--max-tokens", "2",
               "--out", "{out}/report.json"],
              "report.json"),
    "filter-prompts": (
        ["filter-prompts", "configs/quickstart.yaml", "--model", "{model}", "--k", "1",
         "--num-prompts", "2", "model.preset=nano", "rl.max_new_tokens=4", "out_dir={tmp}/run",
         "--out", "{out}/kept.jsonl"],
        ["filter", "configs/quickstart.yaml", "--model", "{model}", "--k", "1",
         "--num-prompts", "2", "model.preset=nano", "rl.max_new_tokens=4", "out_dir={tmp}/run",
         "--out", "{out}/kept.jsonl"],
        "kept.jsonl"),
}
NEW = {"skills-bench": "posttrain eval --mode skills-bench", "tau": "posttrain eval M --mode tau",
       "quick": "posttrain eval --mode quick --max-new-tokens N",
       "filter-prompts": "posttrain filter-prompts"}


@pytest.fixture(scope="module")
def model(tiny_dir, tmp_path_factory):
    from posttrain.models.quick_tokens import QUICK_TOKENS, with_quick_tokens

    out = tmp_path_factory.mktemp("quick") / "nano"
    with_quick_tokens(tiny_dir, out, QUICK_TOKENS)
    return out


@pytest.fixture(scope="module")
def bank(tmp_path_factory):
    from posttrain.features.skills import Skill, write_skill

    bank = tmp_path_factory.mktemp("skills") / "bank"
    write_skill(Skill("column-addition", "Add multi-digit numbers column by column.",
                      "Add each column from the right and carry the ten.", ("addition",)), bank)
    return bank


def run(words, model, bank, tmp, out):
    out.mkdir()  # quick's --out is a file in it
    return runner.invoke(app, [w.format(model=model, bank=bank, tmp=tmp, out=out) for w in words])


@pytest.mark.parametrize("command", list(SPELLINGS))
def test_each_mode_runs_and_its_old_spelling_says_the_new_one_and_does_the_same(
        command, model, bank, tmp_path):
    new, old, writes = SPELLINGS[command]
    result = run(new, model, bank, tmp_path, tmp_path / "new")
    assert result.exit_code == 0, result.output
    assert "note:" not in result.output
    written = (tmp_path / "new" / writes).read_text()
    if writes.endswith(".json"):
        assert json.loads(written)
    if old is None:
        return
    before = run(old, model, bank, tmp_path, tmp_path / "old")
    assert before.exit_code == 0, before.output
    note = before.stderr.splitlines()[0]
    assert note.startswith("note: posttrain ") and note.endswith(f" is now {NEW[command]}")
    assert before.stdout == result.stdout
    assert (tmp_path / "old" / writes).read_text() == written


REFUSED = [
    (["eval", "{d}/m", "--trials", "2"], "--trials belongs to --mode tau, not --mode heldout"),
    (["eval", "{d}/m", "--mode", "heldout", "--max-new-tokens", "4"],
     "--max-new-tokens belongs to --mode tau, quick, not --mode heldout"),
    (["eval", "{d}/m", "--mode", "skills-bench", "--url", "http://127.0.0.1:1/v1"],
     "--url belongs to --mode quick, not --mode skills-bench"),
    (["eval", "{d}/m", "--mode", "tau", "--domain", "mock", "--config", "{d}/c.yaml"],
     "--config belongs to --mode heldout, skills-bench, not --mode tau"),
    (["eval", "{d}/m", "--mode", "tau", "--domain", "mock", "eval.num_problems=2"],
     "OVERRIDES belongs to --mode heldout, skills-bench, not --mode tau"),
    (["eval", "{d}/m", "--mode", "quick", "--domain", "mock"],
     "--domain belongs to --mode tau, not --mode quick"),
    (["quick-eval", "{d}/m", "--solo"], "--solo belongs to --mode tau, not --mode quick"),
    (["eval", "{d}/m", "--mode", "tau", "--skills-bench"],
     "--skills-bench is the old spelling of --mode skills-bench: give one --mode"),
]


@pytest.mark.parametrize("words, says", REFUSED, ids=[" ".join(w[2:]) for w, _ in REFUSED])
def test_an_option_of_another_mode_is_refused_before_anything_loads(words, says, tmp_path):
    """MODEL does not exist: the refusal comes first."""
    result = runner.invoke(app, [w.format(d=tmp_path) for w in words])
    errors = [line for line in result.output.splitlines() if line.startswith("error:")]
    assert result.exit_code == 2 and errors == [f"error: {says}"], result.output


def test_the_help_lists_each_option_under_the_modes_that_take_it():
    """The help panels say what the modes' functions take (``eval_cmd.MODES``)."""
    command = typer.main.get_command(app).commands["eval"]
    for param in command.params:
        if param.name in ("mode", "skills_bench_flag"):
            continue
        modes = [m.value for m in Mode if param.name in takes(m)]
        panel = getattr(param, "rich_help_panel", None)
        assert panel == (None if len(modes) == len(Mode) else f"--mode {', '.join(modes)}"), \
            param.name
