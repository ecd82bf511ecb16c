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


# ----------------------------------------------------------------------------- references that must exist
#: a dotted name of the package, full (``fedrca.streams.loop``) or as the docs abbreviate it in backticks
DOTTED = re.compile(r"(?<![\w./-])fedrca(?:\.\w+)+")
#: (not the packages whose names are also configuration sections or artifact keys: ``training.rounds``,
#: ``rca.horizon``, ``privacy.window``, ``whatif.A`` are keys, not modules)
SHORT = re.compile(
    r"`((?:cli|application|streams|connectors|observability|fleet|detectors|datasets|contracts)\.\w+(?:\.\w+)*)`"
)
#: a repository path, or a path inside ``src/fedrca`` as the docs write it (``streams/agents.py``)
PATH = re.compile(r"(?<![\w./-])((?:src|tests|bench|tools|config|docs|k8s|data)/[\w./-]*[\w]|\w+/[\w/]*\w+\.py)\b")
NODE = re.compile(r"(?<![\w./-])(tests/[\w/]+\.py)::(\w+)")
#: words of a design that is gone: state in Faust tables with changelog topics and Faust standbys keeping a
#: warm copy (the workers commit a state record with every batch and read it back on assignment)
STALE = re.compile(r"Faust tables?|changelog|Faust standby|Faust keeps a warm copy", re.I)


def _dotted_exists(name: str) -> bool:
    """``fedrca.a.b.c``: the longest importable module prefix, then attributes."""
    import importlib
    import inspect

    parts = name.split(".")
    for k in range(len(parts), 0, -1):
        module_name = ".".join(parts[:k])
        rel = Path(*parts[:k])
        if not ((REPO / "src" / rel).with_suffix(".py").is_file() or (REPO / "src" / rel / "__init__.py").is_file()):
            continue
        obj: object = importlib.import_module(module_name)
        for attr in parts[k:]:
            if not hasattr(obj, attr):
                # an instance attribute a class sets (``MessageError.reason``)
                return isinstance(obj, type) and re.search(rf"self\.{attr}\b", inspect.getsource(obj)) is not None
            obj = getattr(obj, attr)
        return True
    return False


#: a placeholder in an example (``data/x.csv``, ``data/tep/dNN_te.dat``), not a file of the repository
PLACEHOLDER = re.compile(r"(?:^|/)(?:[xyz]|\w*NN\w*|\w*N)\.\w+$")


def _path_exists(path: str) -> bool:
    path = path.rstrip(".")
    if any(c in path for c in "*{}<>") or PLACEHOLDER.search(path):
        return True  # a pattern, not a file
    candidates = [REPO / path, REPO / "src" / path, REPO / "src" / "fedrca" / path]
    return any(c.exists() for c in candidates)


def stale_references(text: str) -> list[str]:
    """Names in ``text`` of a module, file or test that does not exist, and words of a retired design.

    Examples
    --------
    >>> stale_references("see `tests/streams/test_delivery.py` and :mod:`fedrca.streams.topics`")
    ['tests/streams/test_delivery.py', 'fedrca.streams.topics']
    >>> stale_references("`streams.delivery` keeps offsets; state lives in Faust tables (changelog topics)")
    ['streams.delivery', 'Faust tables', 'changelog']
    >>> stale_references("the state (Faust standby) on another node; `tests/streams/workers.py`")
    ['tests/streams/workers.py', 'Faust standby']
    >>> stale_references("`fedrca.streams.loop`, `privacy/ledger.py`, tests/test_docs.py::test_no_such_test")
    ['tests/test_docs.py::test_no_such_test']
    """
    found: list[str] = []
    for m in PATH.finditer(text):
        if text[m.end() : m.end() + 1] in ("{", "*", "<") or text[m.start() - 2 : m.start()] in ("f'", 'f"'):
            continue  # a name built by a format string or a glob
        if not _path_exists(m.group(1)):
            found.append(m.group(1))
    for m in DOTTED.finditer(text):
        name = m.group(0).rstrip(".")
        if not _dotted_exists(name):
            found.append(name)
    for m in SHORT.finditer(text):
        if not _dotted_exists("fedrca." + m.group(1)):
            found.append(m.group(1))
    for m in NODE.finditer(text):
        file, test = m.groups()
        if text[m.end() : m.end() + 1] == "*":
            continue  # every test whose name starts so
        if (REPO / file).is_file() and not re.search(rf"def {test}\b", (REPO / file).read_text(encoding="utf-8")):
            found.append(f"{file}::{test}")
    found += [m.group(0) for m in STALE.finditer(text)]
    return found


def _documentation() -> list[Path]:
    """README.md, docs/ and every source file's docstrings and comments (they name tests and modules too)."""
    files = [p for p in tracked_files() if p.suffix == ".md"]
    files += [p for p in tracked_files() if p.suffix == ".py" and p.parts[len(REPO.parts)] in ("src", "bench", "tools")]
    return files


def test_no_document_names_a_module_file_or_test_that_does_not_exist() -> None:
    bad = []
    for path in _documentation():
        text = path.read_text(encoding="utf-8")
        bad += [f"{path.relative_to(REPO)}: {ref}" for ref in stale_references(text)]
    assert not bad, "names of things that do not exist (or of a retired design):\n" + "\n".join(bad)
