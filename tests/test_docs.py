"""The documentation: the mkdocs site builds strictly, the README stays a front door whose links
resolve, and nothing in the repository cites a document outside it."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README_LIMIT = 10_000

# Markdown links: inline [text](target "title") and reference definitions [label]: target.
_INLINE = re.compile(r"\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
_REFERENCE = re.compile(r"^\s{0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s+.*)?$", re.MULTILINE)
_FENCE = re.compile(r"^```.*?^```", re.MULTILINE | re.DOTALL)

# Citations of documents outside the repository (design notes kept beside it). Spelled in pieces
# so that this file does not cite them itself.
_OUTSIDE = re.compile("|".join([
    r"\bDESIGN" + r"\.md\b",
    r"\bSTYLE" + r"\.md\b",
    r"\bSTYLE" + r" \d",                 # a numbered rule of that style document
    r"(?<![\w.-])" + "shared" + r"/",   # the folder beside the repository that holds them
]))
_TEXT = {".py", ".md", ".yaml", ".yml", ".toml", ".txt", ".json", ".cfg", ".ini", ".sh", ".log", ".csv"}
# (folder, the fewest text files it must hold: a scan of an empty or moved folder must not pass)
_SCANNED = [("harness", 60), ("tests", 60), ("benchmarks", 10), ("docs", 10), ("jobs", 3),
            ("search_spaces", 5)]


@pytest.mark.slow
def test_mkdocs_builds_strictly(tmp_path: Path) -> None:
    """`mkdocs build --strict`: a broken link, anchor or nav entry, a page missing from the nav, or
    a failing generator in docs/hooks.py fails the build."""
    proc = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--config-file", str(ROOT / "mkdocs.yml"),
         "--site-dir", str(tmp_path / "site")],
        cwd=ROOT, capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    page = (tmp_path / "site" / "study-file" / "index.html").read_text(encoding="utf-8")
    assert "curriculum.delta" in page and "<!-- config-keys -->" not in page


def _links(markdown: str) -> list[str]:
    text = _FENCE.sub("", markdown)
    return _INLINE.findall(text) + _REFERENCE.findall(text)


def test_readme_is_a_front_door_whose_links_resolve() -> None:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(text) <= README_LIMIT, f"README.md has {len(text):,} characters; at most {README_LIMIT:,}"
    links = _links(text)
    relative = [t for t in links if not re.match(r"^[a-z][a-z0-9+.-]*:", t) and not t.startswith("#")]
    assert any(t.startswith("docs/") for t in relative), links  # the README points into the docs
    broken = [t for t in relative if not (ROOT / t.split("#", 1)[0]).exists()]
    assert not broken, f"README.md links to missing files: {broken}"


def test_link_parser_sees_links() -> None:
    sample = 'See [a](docs/a.md#x) and [c](https://x.org "t").\n\n[d]: docs/d.md\n' \
             "```\n[not](a-link.md)\n```\n"
    assert _links(sample) == ["docs/a.md#x", "https://x.org", "docs/d.md"]


def _text_files(folder: str) -> list[Path]:
    return [p for p in sorted((ROOT / folder).rglob("*"))
            if p.is_file() and p.suffix in _TEXT and "__pycache__" not in p.parts]


@pytest.mark.parametrize(("folder", "at_least"), _SCANNED)
def test_no_citation_of_documents_outside_the_repository(folder: str, at_least: int) -> None:
    files = _text_files(folder)
    assert len(files) >= at_least, f"{folder}/: scanned {len(files)} files, expected at least {at_least}"
    hits = [f"{p.relative_to(ROOT)}:{n}: {line.strip()[:120]}"
            for p in files
            for n, line in enumerate(p.read_text(encoding="utf-8", errors="replace").splitlines(), 1)
            if _OUTSIDE.search(line)]
    assert not hits, "cite docs/ (or another file in the repository) instead:\n" + "\n".join(hits)


def test_citation_pattern_matches_what_it_must() -> None:
    shared = "sha" + "red/"
    cited = ["see " + "DESIGN" + ".md", "(" + "STYLE" + " 8)", "../" + shared + "papers/x.md",
             "/work/" + shared + "notes.md"]
    clean = ["NAME_STYLES", "a shared-nothing design", "docs/architecture.md", "shared_memory/"]
    assert all(_OUTSIDE.search(s) for s in cited)
    assert not any(_OUTSIDE.search(s) for s in clean)
