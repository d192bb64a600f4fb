"""The front page and the docs site: README.md stays a front page (at most 250 lines) whose
links into the repository resolve, and the MkDocs site builds with ``mkdocs build --strict``
(a broken link or anchor, a page missing from the nav or an API reference that does not
resolve fails it)."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import udcg

REPO = Path(__file__).resolve().parents[1]
README = REPO / "README.md"
#: a Markdown link or image target: ``[text](target)``
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")


def _local_targets(markdown: str) -> list[str]:
    """The link targets of ``markdown`` that point into the repository (no URL, no anchor-only)."""
    targets = [m.group(1) for m in LINK.finditer(markdown)]
    return [t for t in targets if not re.match(r"[a-z]+:", t) and not t.startswith("#")]


def test_readme_is_a_front_page() -> None:
    lines = README.read_text(encoding="utf-8").splitlines()
    assert len(lines) <= 250, f"README.md has {len(lines)} lines; move guides to docs/"


def test_every_readme_link_resolves() -> None:
    targets = _local_targets(README.read_text(encoding="utf-8"))
    assert any(t.startswith("docs/") for t in targets), "the README links to no docs page"
    missing = [t for t in targets if not (REPO / t.partition("#")[0]).exists()]
    assert missing == []


def _train_output(markdown: str) -> str:
    """The ``text`` block that follows ``python train.py k=5`` ... ``prints`` in ``markdown``."""
    found = re.search(r"`python train\.py k=5` takes.*?```text\n(.*?)```", markdown, re.S)
    assert found, "no train.py k=5 output block"
    return found.group(1)


def test_the_getting_started_page_shows_the_readmes_train_output() -> None:
    """One run's numbers on both pages: the README's block (from the README's first command)."""
    page = (REPO / "docs" / "getting-started.md").read_text(encoding="utf-8")
    assert _train_output(page) == _train_output(README.read_text(encoding="utf-8"))


def test_the_link_finder_sees_a_missing_target() -> None:
    text = "[a](docs/index.md) [b](https://x.org/c.md) [c](#here) ![d](docs/nowhere.png)"
    targets = _local_targets(text)
    assert targets == ["docs/index.md", "docs/nowhere.png"]
    assert not (REPO / targets[1]).exists()


def test_the_docs_site_builds_strict(tmp_path: Path) -> None:
    if importlib.util.find_spec("mkdocs") is None:
        pytest.skip("mkdocs is not installed (the 'docs' extra: pip install -e '.[docs]')")
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )
    assert done.returncode == 0, done.stderr[-4000:]
    assert (tmp_path / "index.html").is_file()
    # every top-level name has its entry in the API reference
    api = (tmp_path / "api" / "index.html").read_text(encoding="utf-8")
    undocumented = [name for name in udcg.__all__ if f'id="udcg.{name}"' not in api]
    assert undocumented == []
