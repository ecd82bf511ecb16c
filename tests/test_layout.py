"""The package layout holds: imports point inward (import-linter), no hidden imports, one reason list."""

from __future__ import annotations

import ast
import re
import shutil
import subprocess
import tomllib
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
    [
        "contracts",
        "config",
        "privacy",
        "detectors",
        "fleet",
        "training",
        "rca",
        "causal",
        "whatif",
        "datasets",
        "streams",
        "application",
        "cli",
    ],
)
def test_every_package_says_what_it_is(package):
    doc = ast.get_docstring(ast.parse((SRC / package / "__init__.py").read_text(encoding="utf-8")))
    assert doc and len(doc.split()) > 12, f"fedrca.{package} needs a docstring that tells its role"


def _architecture_rows() -> dict[str, list[str] | None]:
    """docs/architecture.md's table: package -> its "may import" cell (None = everything)."""
    rows: dict[str, list[str] | None] = {}
    for line in (REPO / "docs" / "architecture.md").read_text(encoding="utf-8").splitlines():
        m = re.match(r"\| `fedrca\.(\w+)` \|", line)
        if m:
            cell = line.rstrip().rstrip("|").rsplit("|", 1)[1].strip()
            rows[m.group(1)] = None if cell == "everything" else re.findall(r"`(\w+)`", cell)
    return rows


def _contracts() -> dict[str, dict]:
    data = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))
    return {c["name"]: c for c in data["tool"]["importlinter"]["contracts"]}


def _row_problems(rows: dict[str, list[str] | None], contracts: dict[str, dict]) -> list[str]:
    packages = {p for p in rows if p != "exceptions"}
    problems = []
    for package, allowed in rows.items():
        if allowed is None or package == "exceptions":
            continue
        contract = contracts.get(f"row: fedrca.{package}")
        if contract is None:
            problems.append(f"fedrca.{package}: no contract 'row: fedrca.{package}' in pyproject.toml")
            continue
        expected = {f"fedrca.{p}" for p in packages - {package} - set(allowed)}
        if set(contract["forbidden_modules"]) != expected:
            problems.append(
                f"fedrca.{package}: the table allows {sorted(allowed)}, the contract forbids "
                f"{sorted(contract['forbidden_modules'])}"
            )
    return problems


def test_every_row_of_the_architecture_table_is_an_import_contract():
    """The table's "may import" cell and the row's contract say the same: the contract forbids every
    other fedrca package (the docs cannot drift from what lint-imports enforces)."""
    rows = _architecture_rows()
    on_disk = {p.name for p in SRC.iterdir() if (p / "__init__.py").exists()} | {
        p.stem for p in SRC.glob("*.py") if p.stem not in ("__init__", "exceptions")
    }
    assert on_disk <= set(rows), f"packages without a row in docs/architecture.md: {sorted(on_disk - set(rows))}"
    problems = _row_problems(rows, _contracts())
    assert not problems, "\n".join(problems)


def test_the_table_check_finds_a_row_that_drifts():
    """A row that allows what its contract forbids, and a row without a contract, are both reported."""
    rows = _architecture_rows()
    assert not _row_problems(rows, _contracts())
    drifted = {**rows, "rca": [*(rows["rca"] or []), "detectors"], "newpkg": ["contracts"]}
    problems = _row_problems(drifted, _contracts())
    assert any(p.startswith("fedrca.rca:") for p in problems), problems
    assert any(p.startswith("fedrca.newpkg: no contract") for p in problems), problems


def _imports(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
        elif isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
    return names


@pytest.mark.parametrize("folder", ["bench", "tools"])
def test_bench_and_tools_never_import_the_tests_or_the_shell(folder):
    """bench/ and tools/ build sites with fedrca.application; the shell (fedrca.cli) is for users, and the tests
    may import tools/, never the reverse."""
    bad = []
    for path in sorted((REPO / folder).rglob("*.py")):
        for name in _imports(path):
            if name == "tests" or name.startswith(("tests.", "fedrca.cli")):
                bad.append(f"{path.relative_to(REPO)}: imports {name}")
    assert not bad, "\n".join(bad)
