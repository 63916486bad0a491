"""The documentation holds together: every relative link of the README and docs/ leads to a file
that exists (and, for a ``#fragment`` into a page, to one of its headings, slugged as GitHub
does), and every page of docs/ is linked from the index, docs/README.md, so none is reachable
only by searching."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
PAGES = [ROOT / "README.md", *sorted(DOCS.glob("*.md"))]
LINK = re.compile(r"\]\(([^)\s]+)\)")


def prose(path: Path) -> str:
    """The page without its fenced blocks and inline code (where ``](x)`` is no link)."""
    return re.sub(r"`[^`\n]*`", "", re.sub(r"```.*?```", "", path.read_text(), flags=re.S))


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation but ``-`` and ``_`` dropped,
    spaces to ``-``."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    text = re.sub(r"```.*?```", "", path.read_text(), flags=re.S)
    out, seen = set(), {}
    for heading in re.findall(r"(?m)^#{1,6}\s+(.*)$", text):
        s = slug(heading)
        out.add(s if s not in seen else f"{s}-{seen[s]}")
        seen[s] = seen.get(s, 0) + 1
    return out


def test_every_relative_link_resolves():
    bad = []
    for page in PAGES:
        for target in LINK.findall(prose(page)):
            if re.match(r"[a-z]+:", target):  # http:, https:, mailto:
                continue
            name, _, fragment = target.partition("#")
            path = (page.parent / name).resolve() if name else page
            if not path.exists():
                bad.append(f"{page.relative_to(ROOT)}: {target} (no such file)")
            elif fragment and path.suffix == ".md" and fragment not in anchors(path):
                bad.append(f"{page.relative_to(ROOT)}: {target} (no such heading)")
    assert bad == []


def test_every_docs_page_is_in_the_index():
    index = DOCS / "README.md"
    linked = {(DOCS / t.partition("#")[0]).resolve() for t in LINK.findall(prose(index))}
    missing = [p.name for p in sorted(DOCS.glob("*.md")) if p != index and p.resolve() not in linked]
    assert missing == []


def test_the_readme_points_to_the_index():
    assert "](docs/README.md)" in (ROOT / "README.md").read_text()
