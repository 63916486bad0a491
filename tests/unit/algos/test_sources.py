"""Every source the catalogue and the docs cite is one a reader can follow: a paper, report or
blog named by its authors or lab, year and arXiv id, never a label of the project's private
notes (the seed posts ``S00``..``S28``, ``PT (...)`` for the pipeline summary, ``[R]``) or a
section of the unpublished spec (``ALGORITHMS.md §14``)."""

import re
from pathlib import Path

from posttrain.algos import entries
from posttrain.algos.docs import REFERENCES

ROOT = Path(__file__).resolve().parents[3]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
LABEL = re.compile(r"\bS\d{1,2}\b|\bPT \(|\[R\]|ALGORITHMS\.md|§\s*\d+")
ARXIV = re.compile(r"arXiv (\d{4}\.\d{4,5})")


def test_no_catalogue_source_is_a_private_label():
    bad = {f"{e.kind}/{e.name}": e.source for e in entries() if LABEL.search(e.source)}
    assert bad == {}


def test_every_catalogue_source_names_a_year():
    """A year places the paper or report. ``tvd`` follows the textbook definition; TACO's paper
    is known by its title only (no authors, year or arXiv id could be confirmed)."""
    bare = {f"{e.kind}/{e.name}": e.source for e in entries()
            if not re.search(r"\b(19|20)\d\d\b", e.source)}
    assert set(bare) <= {"divergence/tvd", "advantage/taco"}, bare


def test_every_arxiv_id_a_source_cites_is_in_the_references():
    listed = {m for ref in REFERENCES for m in ARXIV.findall(ref)}
    cited = {m for e in entries() for m in ARXIV.findall(e.source)}
    assert cited - listed == set()
    assert "## References" in (ROOT / "docs" / "algorithms.md").read_text()


def test_no_doc_cites_a_private_label_or_the_unpublished_spec():
    bad = [f"{doc.name}:{n}: {line.strip()}" for doc in DOCS
           for n, line in enumerate(doc.read_text().splitlines(), 1) if LABEL.search(line)]
    assert bad == []


def test_no_docstring_cites_the_unpublished_spec_or_the_seed_notes():
    bad = [f"{path.relative_to(ROOT)}:{n}" for path in sorted((ROOT / "src").rglob("*.py"))
           for n, line in enumerate(path.read_text().splitlines(), 1)
           if re.search(r"ALGORITHMS\.md|the seeds'|\bS\d{1,2}'s\b", line)]
    assert bad == []
