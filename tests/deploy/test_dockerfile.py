"""The Dockerfile builds from what the build context holds and runs a real ``fedrca`` command.

No Docker engine runs here, so the file is read: every path it copies from the context must
exist and survive ``.dockerignore`` (Docker's matching: patterns in order, the last match wins,
a pattern matching a parent directory matches its files, ``!`` re-includes), the wheel build must
get everything ``pyproject.toml`` names, and the entry point and default command must be real
CLI commands (run through the installed ``fedrca`` console script).
"""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from fedrca.cli import build_parser
from tests.deploy import support
from tests.deploy.support import REPO

DOCKERFILE = REPO / "Dockerfile"
PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))


def instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with line continuations joined and comments dropped."""
    lines: list[str] = []
    pending = ""
    for raw in DOCKERFILE.read_text(encoding="utf-8").splitlines():
        if not pending and (not raw.strip() or raw.lstrip().startswith("#")):
            continue
        if raw.rstrip().endswith("\\"):
            pending += raw.rstrip()[:-1] + " "
            continue
        lines.append(pending + raw)
        pending = ""
    out = []
    for line in lines:
        word, _, rest = line.strip().partition(" ")
        out.append((word.upper(), rest.strip()))
    return out


def exec_form(arguments: str) -> list[str]:
    value = json.loads(arguments)
    assert isinstance(value, list) and all(isinstance(v, str) for v in value), arguments
    return value


def copied_sources() -> list[str]:
    """Context paths of every COPY/ADD that does not copy from another stage."""
    sources = []
    for word, rest in instructions():
        if word not in ("COPY", "ADD"):
            continue
        parts = exec_form(rest) if rest.startswith("[") else shlex.split(rest)
        flags = [p for p in parts if p.startswith("--")]
        if any(f.startswith("--from=") for f in flags):
            continue
        paths = [p for p in parts if not p.startswith("--")]
        sources += paths[:-1]
    return sources


def dockerignore() -> list[tuple[bool, re.Pattern[str]]]:
    """(negated, pattern) of .dockerignore, in order."""
    rules = []
    for raw in (REPO / ".dockerignore").read_text(encoding="utf-8").splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        negated = line.startswith("!")
        pattern = line.lstrip("!").strip().strip("/")
        regex = ""
        i = 0
        while i < len(pattern):
            if pattern.startswith("**/", i):
                regex, i = regex + "(?:.*/)?", i + 3
            elif pattern.startswith("**", i):
                regex, i = regex + ".*", i + 2
            elif pattern[i] == "*":
                regex, i = regex + "[^/]*", i + 1
            elif pattern[i] == "?":
                regex, i = regex + "[^/]", i + 1
            else:
                regex, i = regex + re.escape(pattern[i]), i + 1
        rules.append((negated, re.compile(regex)))
    return rules


def in_context(path: str) -> bool:
    """Whether ``path`` (relative to the repository) is sent to the Docker build."""
    parts = path.strip("/").split("/")
    prefixes = ["/".join(parts[: i + 1]) for i in range(len(parts))]
    excluded = False
    for negated, regex in dockerignore():
        if any(regex.fullmatch(p) for p in prefixes):
            excluded = not negated
    return not excluded


def test_the_ignore_matcher_follows_docker():
    assert in_context("pyproject.toml") and in_context("src/fedrca/cli.py")
    assert not in_context("tests/test_cli.py") and not in_context("data/tep/d00.dat")
    assert not in_context("src/fedrca/__pycache__/cli.cpython-311.pyc")
    assert not in_context(".venv/bin/python") and not in_context(".git/HEAD")


def test_every_copied_path_exists_in_the_build_context():
    sources = copied_sources()
    assert sources, "the Dockerfile copies nothing from the context"
    for source in sources:
        path = REPO / source
        assert path.exists(), f"Dockerfile copies {source}, which does not exist"
        assert in_context(source), f"Dockerfile copies {source}, which .dockerignore leaves out"
        if path.is_dir():
            # the files of the repository (build output such as *.egg-info is left out on purpose)
            tracked = subprocess.run(["git", "ls-files", source], capture_output=True, text=True, cwd=REPO, check=True)
            files = tracked.stdout.split()
            assert files, f"{source} holds no tracked file"
            missing = [f for f in files if not in_context(f)]
            assert not missing, f".dockerignore leaves out {missing[:5]} of {source}"


def test_the_wheel_build_gets_what_pyproject_names():
    copied = {Path(s) for s in copied_sources()}
    project = PYPROJECT["project"]
    needed = {Path("pyproject.toml"), Path(project["readme"])}
    needed |= {Path(d) for d in PYPROJECT["tool"]["setuptools"]["packages"]["find"]["where"]}
    assert needed <= copied, f"the build stage misses {sorted(map(str, needed - copied))}"


def test_base_image_and_user():
    words = instructions()
    args = dict(a.split("=", 1) for w, a in words if w == "ARG" and "=" in a)
    images = [
        a.split()[0].replace("${PYTHON_VERSION}", args.get("PYTHON_VERSION", "")) for w, a in words if w == "FROM"
    ]
    assert images and all(re.fullmatch(r"python:3\.\d+-slim", i) for i in images), images
    minimum = PYPROJECT["project"]["requires-python"].removeprefix(">=")
    assert tuple(map(int, images[-1][7:-5].split("."))) >= tuple(map(int, minimum.split("."))), images[-1]
    (user,) = [a for w, a in words if w == "USER"]
    assert re.fullmatch(r"[1-9]\d{3,}:[1-9]\d{3,}", user), f"a numeric non-root user, got {user}"


def entrypoint_and_cmd() -> tuple[list[str], list[str]]:
    words = dict(instructions())
    return exec_form(words["ENTRYPOINT"]), exec_form(words["CMD"])


def test_entry_point_is_the_package_console_script():
    entrypoint, _ = entrypoint_and_cmd()
    assert entrypoint == ["fedrca"]
    assert "fedrca" in PYPROJECT["project"]["scripts"]


def test_the_default_command_runs():
    entrypoint, cmd = entrypoint_and_cmd()
    script = Path(sys.executable).parent / entrypoint[0]  # the console script `pip install` made
    out = subprocess.run([str(script), *cmd], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, f"{entrypoint + cmd}: {out.stderr}"
    assert "usage: fedrca" in out.stdout


def test_every_sub_command_the_manifests_run_exists(base, capsys):
    commands = sorted({c["args"][0] for _, c in support.containers(base)})
    assert commands == ["edge", "publish-params", "run", "train"]
    for command in commands:
        # the parser the console script builds (fedrca.cli.main), in this process: no second start-up
        with pytest.raises(SystemExit) as exit_:
            build_parser().parse_args([command, "--help"])
        assert exit_.value.code == 0
        assert f"usage: fedrca {command}" in capsys.readouterr().out
