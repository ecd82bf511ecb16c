"""Under CI nothing required may skip: a skip fails the run unless the allow-list names it.

When the environment has ``CI=true`` (CI's ``.ci/run`` does; so may anyone), every test
or module that pytest reports as skipped must be listed, with the reason it may skip, in
one file: ``tests/skips-allowed.txt`` (ini option ``skips_allowed``, relative to the rootdir).
Otherwise the run ends with exit status 1 and the summary names each skip that was not
allowed. Expected failures (xfail) are not skips. Outside CI skips are reported as usual.

The allow-list has one entry a line, ``<node id> | <reason>``; blank lines and lines
beginning with ``#`` are ignored. An entry without a reason is an error.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import pytest

__all__ = ["AllowList", "in_ci"]

DEFAULT_FILE = "tests/skips-allowed.txt"
FALSE = {"", "0", "false", "no", "off"}


def in_ci() -> bool:
    """True when the environment says this is a CI run (``CI`` set to anything but a false value)."""
    return os.environ.get("CI", "").strip().lower() not in FALSE


@dataclass(frozen=True)
class AllowList:
    """Node id -> reason for the skips a CI run accepts."""

    path: Path
    reasons: dict[str, str]

    @classmethod
    def load(cls, path: Path) -> AllowList:
        """Read ``path`` (a missing file allows nothing); a malformed entry raises pytest.UsageError."""
        reasons: dict[str, str] = {}
        if not path.is_file():
            return cls(path, reasons)
        for number, raw in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
            line = raw.strip()
            if not line or line.startswith("#"):
                continue
            node, sep, reason = (part.strip() for part in line.partition("|"))
            if not sep or not node or not reason:
                raise pytest.UsageError(
                    f"{path}:{number}: '{line}' is not '<node id> | <reason>'; every allowed skip says why"
                )
            reasons[node] = reason
        return cls(path, reasons)


class SkipPolicy:
    """Collects the skips of a run and fails it under CI when one is not allowed."""

    def __init__(self, config: pytest.Config) -> None:
        self.allowed = AllowList.load(Path(config.rootpath) / str(config.getini("skips_allowed")))
        self.skips: dict[str, str] = {}  # node id -> reason pytest gave

    def record(self, report: pytest.CollectReport | pytest.TestReport) -> None:
        if report.skipped and not hasattr(report, "wasxfail"):
            longrepr = report.longrepr
            reason = longrepr[2] if isinstance(longrepr, tuple) else str(longrepr)
            self.skips[report.nodeid] = reason.removeprefix("Skipped: ")

    @property
    def refused(self) -> dict[str, str]:
        return {node: reason for node, reason in self.skips.items() if node not in self.allowed.reasons}

    def pytest_collectreport(self, report: pytest.CollectReport) -> None:
        self.record(report)

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        self.record(report)

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        if in_ci() and self.refused and session.exitstatus == pytest.ExitCode.OK:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED

    def pytest_terminal_summary(self, terminalreporter: pytest.TerminalReporter) -> None:
        if not in_ci() or not self.skips:
            return
        write = terminalreporter.write_line
        terminalreporter.section("skips under CI")
        for node, reason in sorted(self.skips.items()):
            if node in self.allowed.reasons:
                write(f"allowed: {node} ({reason}); listed because: {self.allowed.reasons[node]}")
        for node, reason in sorted(self.refused.items()):
            write(f"NOT ALLOWED: {node} skipped ({reason})", red=True)
        if self.refused:
            write(
                f"{len(self.refused)} skip(s) not allowed under CI=true: make them run, or list them with the "
                f"reason in {self.allowed.path}",
                red=True,
            )


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addini("skips_allowed", "file of the skips allowed under CI (node id | reason)", default=DEFAULT_FILE)


def pytest_configure(config: pytest.Config) -> None:
    config.pluginmanager.register(SkipPolicy(config), "fedrca-skip-policy")
