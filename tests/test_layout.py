"""The package layout holds: imports point inward (import-linter), no hidden imports, one reason list."""

from __future__ import annotations

import ast
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from fedrca.contracts import DeadLetterReason

REPO = Path(__file__).resolve().parents[1]
SRC = REPO / "src" / "fedrca"


def _python_files() -> list[Path]:
    return sorted(p for p in SRC.rglob("*.py") if "_bundled" not in p.parts)


def test_import_linter_contracts_hold():
    lint = shutil.which("lint-imports", path=str(Path(__import__("sys").executable).parent))
    assert lint is not None, "import-linter is a dev dependency (pip install -e '.[dev]')"
    proc = subprocess.run([lint], cwd=REPO, capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "0 broken" in proc.stdout


def test_no_package_import_hides_inside_a_function_without_its_reason():
    """An import of fedrca inside a function hides the real dependency graph from the linter's
    readers; the only ones allowed say why on the line before (start-up cost of a command)."""
    hidden = []
    for path in _python_files():
        lines = path.read_text(encoding="utf-8").splitlines()
        for node in ast.walk(ast.parse("\n".join(lines))):
            if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            for sub in ast.walk(node):
                if isinstance(sub, ast.ImportFrom) and (sub.module or "").startswith("fedrca"):
                    context = "\n".join(lines[max(0, sub.lineno - 8) : sub.lineno])
                    if "start-up cost" not in context:
                        hidden.append(f"{path.relative_to(REPO)}:{sub.lineno} {sub.module}")
    assert not hidden, "package imports inside functions without a reason:\n" + "\n".join(hidden)


def test_every_dead_letter_reason_the_code_gives_is_a_member_of_the_enum():
    bare = []
    for path in _python_files():
        text = path.read_text(encoding="utf-8")
        bare += [f"{path.relative_to(REPO)}: {m}" for m in re.findall(r'MessageError\(\s*"[^"]*"', text)]
    assert not bare, "MessageError takes a DeadLetterReason member, not a string:\n" + "\n".join(bare)
    assert len({r.value for r in DeadLetterReason}) == len(DeadLetterReason)


@pytest.mark.parametrize(
    "package",
    ["contracts", "config", "detectors", "fleet", "training", "rca", "causal", "whatif", "datasets", "streams", "cli"],
)
def test_every_package_says_what_it_is(package):
    doc = ast.get_docstring(ast.parse((SRC / package / "__init__.py").read_text(encoding="utf-8")))
    assert doc and len(doc.split()) > 12, f"fedrca.{package} needs a docstring that tells its role"
