"""tests/skip_policy.py: under CI=true a skip fails the run unless tests/skips-allowed.txt allows it."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.skip_policy import AllowList

REPO = Path(__file__).resolve().parents[1]

TESTS = """
import pytest

def test_runs():
    assert True

def test_skips():
    pytest.skip("no frobnicator here")

@pytest.mark.xfail(reason="known bug", strict=True)
def test_expected_failure():
    assert False
"""


@pytest.fixture
def suite(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    pytester.makeini("[pytest]\nskips_allowed = allowed.txt\n")
    pytester.makepyfile(test_things=TESTS)
    monkeypatch.delenv("CI", raising=False)
    return pytester


def run(pytester: pytest.Pytester) -> pytest.RunResult:
    # without the hypothesis plugin: its import costs seconds and these files do not use it
    return pytester.runpytest("-p", "tests.skip_policy", "-p", "no:cacheprovider", "-p", "no:hypothesispytest")


def test_outside_ci_a_skip_is_just_reported(suite):
    result = run(suite)
    result.assert_outcomes(passed=1, skipped=1, xfailed=1)
    assert result.ret == pytest.ExitCode.OK
    assert "NOT ALLOWED" not in result.stdout.str()


@pytest.mark.parametrize("value", ["true", "1", "yes"])
def test_under_ci_a_skip_that_is_not_listed_fails_the_run_and_is_named(suite, monkeypatch, value):
    monkeypatch.setenv("CI", value)
    result = run(suite)
    result.assert_outcomes(passed=1, skipped=1, xfailed=1)
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(
        [
            "*NOT ALLOWED: test_things.py::test_skips skipped (no frobnicator here)*",
            "*1 skip(s) not allowed under CI=true*allowed.txt*",
        ]
    )
    assert "test_expected_failure" not in result.stdout.str(), "an xfail is not a skip"


def test_under_ci_a_listed_skip_passes_with_its_reason(suite, monkeypatch):
    monkeypatch.setenv("CI", "true")
    suite.path.joinpath("allowed.txt").write_text(
        "# comment\n\ntest_things.py::test_skips | the frobnicator exists on the lab machine only\n"
    )
    result = run(suite)
    assert result.ret == pytest.ExitCode.OK
    result.stdout.fnmatch_lines(
        ["*allowed: test_things.py::test_skips (no frobnicator here); listed because: the frob*"]
    )


def test_under_ci_false_skips_are_allowed(suite, monkeypatch):
    monkeypatch.setenv("CI", "false")
    assert run(suite).ret == pytest.ExitCode.OK


def test_a_skipped_module_counts_and_failures_keep_their_status(pytester, monkeypatch):
    monkeypatch.setenv("CI", "true")
    pytester.makeini("[pytest]\nskips_allowed = allowed.txt\n")
    pytester.makepyfile(
        test_module='import pytest\npytest.skip("whole module", allow_module_level=True)\n',
        test_fails="def test_fails():\n    assert False\n",
    )
    result = run(pytester)
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(["*NOT ALLOWED: test_module.py skipped (whole module)*"])


def test_an_entry_without_a_reason_is_a_usage_error(suite, monkeypatch):
    suite.path.joinpath("allowed.txt").write_text("test_things.py::test_skips\n")
    result = run(suite)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*allowed.txt:1: 'test_things.py::test_skips' is not '<node id> | <reason>'*"])


def test_the_repository_allow_list_is_valid_and_every_entry_names_a_test():
    allowed = AllowList.load(REPO / "tests" / "skips-allowed.txt")
    for node in allowed.reasons:
        path = REPO / node.split("::")[0]
        assert path.is_file(), f"tests/skips-allowed.txt names {node}, whose file does not exist"
