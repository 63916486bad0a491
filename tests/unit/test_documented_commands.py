"""Every ``posttrain`` command the README and docs/ show works as written, as far as it can be
checked without running it: its options parse, and the config it runs (the file, the
overrides, what the command itself forces) validates — the README's teacher-logits line, the
preference doc's IPO line and configs/tau.yaml's set-up failed as written. Data files and models
a command names are made (tiny) where the docs leave them to the user; ``my.yaml`` stands for
the user's own config. The commands that run something are run shortened by the tests of their
features; this test keeps the documentation from drifting from the code."""

import json
import re
import shlex
from pathlib import Path

import click
import pytest
import typer.main

from posttrain.cli.app import app
from posttrain.config import load_config

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
CONFIG_COMMANDS = {"train", "sft", "reward-model", "teacher-logits", "filter",
                   "filter-prompts", "rejection-sample", "pair-sample"}
FORCED = {"teacher-logits": ["stages=[distill]"]}  # what the command sets itself
SHELLS = ("", "bash", "sh", "console")  # the fenced blocks whose lines are commands
ROW = {"prompt": "What is 1+1?", "question": "What is 1+1?", "answer": 2, "source": "a",
       "carries": 0,
       "messages": [{"role": "user", "content": "What is 1+1?"},
                    {"role": "assistant", "content": "<answer>2</answer>"}],
       "chosen": "<answer>2</answer>", "rejected": "<answer>3</answer>"}


def documented() -> list[tuple[str, str]]:
    """``(doc, command line)`` of every ``posttrain`` line in a fenced block of the docs."""
    out = []
    for doc in DOCS:
        blocks = re.findall(r"```(\w*)\n(.*?)```", doc.read_text(), re.S)  # fences paired
        for block in (text for language, text in blocks if language in SHELLS):
            for line in block.replace("\\\n", " ").splitlines():
                line = re.sub(r"\s+&$", "", re.sub(r"\s+#.*$", "", line.strip()))  # background
                if line.startswith("posttrain "):
                    out.append((doc.name, line))
    return out


COMMANDS = documented()


def test_the_docs_show_commands_of_every_kind():
    kinds = {shlex.split(line)[1] for _, line in COMMANDS}
    assert len(COMMANDS) >= 60 and {"train", "sft", "serve", "view", "eval", "tau"} <= kinds


@pytest.mark.parametrize("doc, line", COMMANDS, ids=[f"{d}:{line[10:60]}" for d, line in COMMANDS])
def test_a_documented_command_parses(doc, line):
    args = shlex.split(line)[1:]
    group = typer.main.get_command(app)
    ctx = group.make_context("posttrain", list(args))
    name, command, rest = group.resolve_command(ctx, list(args))
    try:
        command.make_context(name, rest, parent=ctx)
    except click.exceptions.Exit:  # --help and the like
        pass


def config_lines():
    for doc, line in COMMANDS:
        args = shlex.split(line)[1:]
        if args[0] in CONFIG_COMMANDS and not any(a.startswith("my.yaml") for a in args):
            yield doc, args


@pytest.mark.parametrize("doc, args", list(config_lines()),
                         ids=[f"{d}:{' '.join(a)[:50]}" for d, a in config_lines()])
def test_a_documented_run_validates_as_written(doc, args, tmp_path, monkeypatch, tiny_dir):
    """The files a line names that the docs leave to the user (data, models, stored logits)
    are made in a working directory of the test's; the configs are the repository's."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "configs").symlink_to(ROOT / "configs")
    (tmp_path / "examples").symlink_to(ROOT / "examples")
    command, config, *rest = args
    overrides = [a for a in rest if "=" in a and not a.startswith("--")]
    for value in [v for a in overrides for v in re.findall(r"=([\w./-]+)$", a)]:
        provide(tmp_path / value, tiny_dir)
    for path in referenced_paths(ROOT / config):
        provide(tmp_path / path, tiny_dir)
    cfg = load_config(config, [*overrides, *FORCED.get(command, [])])
    if command == "sft":
        assert "sft" in cfg.stages
    # what a config's own set-up makes must lie outside the run directory the run claims (a
    # fresh run refuses a folder that holds files: configs/tau.yaml's models were in it)
    out = Path(cfg.out_dir)
    assert not [p for p in referenced_paths(ROOT / config) if out in Path(p).parents], \
        f"{config} keeps files it needs inside its out_dir {out}"


def referenced_paths(config: Path) -> list[str]:
    """The model and data paths a config file names (its own set-up, or the docs', makes
    them)."""
    text = re.sub(r"(?m)^\s*#.*$", "", config.read_text())  # what its comments say it makes
    return re.findall(r"(?:^|[\s{:])((?:runs|data|models)/[\w./-]+)", text)


def provide(path: Path, tiny_dir: Path) -> None:
    """A tiny stand-in for a file or model directory a documented line names, if missing."""
    if path.exists() or not (str(path).startswith(str(Path.cwd()))):
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.suffix in (".jsonl", ".json"):
        path.write_text("".join(json.dumps(ROW) + "\n" for _ in range(20)))
    elif path.suffix == ".safetensors":
        return  # stored logits: checked when the stage reads them
    elif path.name.endswith("_model") or "/" in path.name or path.suffix == "":
        path.symlink_to(tiny_dir)
