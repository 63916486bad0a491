"""The layer rules of docs/architecture.md, read from the import graph (tools/architecture.py)."""

import importlib.util
from pathlib import Path

import pytest

TOOL = Path(__file__).resolve().parents[2] / "tools" / "architecture.py"
spec = importlib.util.spec_from_file_location("architecture", TOOL)
architecture = importlib.util.module_from_spec(spec)
spec.loader.exec_module(architecture)

MAX_FILES_PER_FOLDER = 16


def test_every_import_goes_to_a_lower_layer():
    assert architecture.upward_imports() == []


def test_the_root_package_imports_nothing_of_posttrain():
    """It lies below every layer (any module may import it), so it must stay a leaf."""
    assert architecture.module_imports().get("posttrain", set()) == set()


def test_no_module_imports_itself_through_others():
    assert architecture.cycles() == []


def test_every_package_has_a_layer():
    packages = {architecture.package_of(m) for m in architecture.modules()} - {""}
    assert packages == set(architecture.LAYER_OF)


def test_the_checks_see_an_upward_import(tmp_path, monkeypatch):
    """The checks can fail: a types module importing the trainer is upward and, with the
    trainer's import of types, a cycle."""
    modules = architecture.modules()
    fake = tmp_path / "posttrain" / "types" / "upward.py"
    fake.parent.mkdir(parents=True)
    fake.write_text("from posttrain.train.trainer import Trainer\n")
    base = tmp_path / "posttrain" / "types" / "batch.py"
    base.write_text(modules["posttrain.types.batch"].read_text()
                    + "\nfrom posttrain.types.upward import Trainer\n")
    monkeypatch.setattr(architecture, "modules", lambda: {
        **modules, "posttrain.types.upward": fake, "posttrain.types.batch": base})
    assert "posttrain.types.upward -> posttrain.train.trainer" in architecture.upward_imports()
    assert any("posttrain.types.upward" in c for c in architecture.cycles())


@pytest.mark.parametrize("folder", sorted(
    {p.parent for p in architecture.PACKAGE.rglob("*.py")}), ids=lambda p: p.name)
def test_no_folder_holds_more_than_about_fifteen_files(folder):
    assert len(list(folder.glob("*.py"))) <= MAX_FILES_PER_FOLDER


def test_the_layer_picture_in_the_docs_is_current():
    assert architecture.doc_block() == architecture.picture(), (
        "run `python tools/architecture.py` to regenerate docs/architecture.md's picture")
