"""The verdict lines ``fedrca demo`` prints (src/fedrca/cli/demo.py)."""

from __future__ import annotations

import pytest

from fedrca.cli.demo import _verdict_printer
from fedrca.contracts import Verdict


def _verdict(seq: int, root: str | None, candidates: tuple[str, ...]) -> Verdict:
    outcome = "root_cause" if root else "no_anomaly"
    return Verdict(
        "tep", float(seq), seq, root, ("reactor",) if root else (), 0.95, (seq - 5, seq), outcome, candidates
    )


def test_a_verdict_with_several_candidates_names_them(capsys: pytest.CaptureFixture[str]) -> None:
    show = _verdict_printer("d01")
    show(_verdict(170, "feed", ("feed", "stripper")))
    out = capsys.readouterr().out
    assert "root cause feed, propagated to reactor [candidates: feed, stripper]" in out


def test_a_single_candidate_is_not_repeated_and_unchanged_verdicts_print_once(
    capsys: pytest.CaptureFixture[str],
) -> None:
    show = _verdict_printer("d04")
    show(_verdict(170, "reactor", ("reactor",)))
    show(_verdict(180, "reactor", ("reactor",)))  # heartbeat: same decision
    show(_verdict(190, "reactor", ("reactor", "separator")))  # the candidates changed: a new line
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 2
    assert "candidates" not in lines[0]
    assert lines[1].endswith("(posterior 0.95, evidence 185..190)")
    assert "[candidates: reactor, separator]" in lines[1]
