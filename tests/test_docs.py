"""The documentation stays true: no link leaves the repository, generated figures match their command.

* Every relative link of a Markdown file resolves to a file of the repository (a user's clone
  has nothing else), and no tracked file names a path outside it.
* README.md's ``make demo`` table is generated (``make docs-figures``, tools/docs_figures.py);
  ``tests/streams/test_embedded.py`` runs the demo and compares its table with README's.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)|(?:href|src)=\"([^\"]+)\"")
SCHEME = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*:")
#: paths that only exist on the machine the repository was written on
OUTSIDE = re.compile(r"(?<![\w.])(?:\.\./)+shared/|(?<![\w.])/work/")


def tracked_files() -> list[Path]:
    """The repository's files (git's list when there is one, else the tree without tool caches)."""
    try:
        out = subprocess.run(["git", "ls-files"], cwd=REPO, capture_output=True, text=True, check=True).stdout
        return [REPO / line for line in out.splitlines() if (REPO / line).is_file()]
    except (OSError, subprocess.CalledProcessError):
        skip = {".git", ".venv", "node_modules", ".kafka", "out", "build"}
        return [p for p in REPO.rglob("*") if p.is_file() and not skip & set(p.relative_to(REPO).parts)]


def markdown_links(text: str) -> list[str]:
    """Targets of Markdown links and images and of HTML href/src attributes.

    Examples
    --------
    >>> markdown_links('[a](docs/x.md#y) ![p](img.png) <a href="../z.md">z</a> [w](https://example.org)')
    ['docs/x.md#y', 'img.png', '../z.md', 'https://example.org']
    """
    return [m.group(1) or m.group(2) for m in LINK.finditer(text)]


def test_every_relative_link_resolves_inside_the_repository() -> None:
    bad = []
    for path in tracked_files():
        if path.suffix != ".md":
            continue
        text = re.sub(r"```.*?```", "", path.read_text(encoding="utf-8"), flags=re.S)  # code is not a link
        for target in markdown_links(text):
            if SCHEME.match(target) or target.startswith("#"):
                continue  # a web address or an anchor of the same page
            resolved = (path.parent / target.split("#")[0]).resolve()
            inside = resolved == REPO or REPO in resolved.parents
            if not inside or not resolved.exists():
                why = "outside the repository" if not inside else "missing"
                bad.append(f"{path.relative_to(REPO)}: {target} ({why})")
    assert not bad, "links that a clone of the repository cannot follow:\n" + "\n".join(bad)


def test_no_file_names_a_path_outside_the_repository() -> None:
    bad = []
    for path in tracked_files():
        if path == Path(__file__).resolve():
            continue  # its own examples below
        try:
            text = path.read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError):
            continue  # binary
        bad += [f"{path.relative_to(REPO)}: {m.group(0)}" for m in OUTSIDE.finditer(text)]
    assert not bad, "paths outside the repository:\n" + "\n".join(bad)


@pytest.mark.parametrize("text", ["see ../shared/ARCHITECTURE.md", "[d](../../shared/x.md)", "/work/shared/papers"])
def test_the_outside_pattern_catches_the_paths_it_is_for(text: str) -> None:
    assert OUTSIDE.search(text)


def test_every_generated_figure_has_a_block_in_each_of_its_files(monkeypatch: pytest.MonkeyPatch) -> None:
    """A figure ``make docs-figures`` makes must have its place, or the tool fails after the benchmark ran."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("docs_figures", REPO / "tools" / "docs_figures.py")
    assert spec is not None and spec.loader is not None
    tool = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "docs_figures", tool)  # its dataclasses look themselves up there
    spec.loader.exec_module(tool)
    missing = [
        f"{name} in {file}"
        for name, figure in tool.FIGURES.items()
        if not figure.writes_file
        for file in figure.files
        if name not in tool.blocks((REPO / file).read_text(encoding="utf-8"))
    ]
    assert not missing, "figures without a block: " + ", ".join(missing)
