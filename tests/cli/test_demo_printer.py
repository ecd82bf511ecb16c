"""The verdict lines ``fedrca demo`` prints (src/fedrca/cli/demo.py): the root, its set and its reason."""

from __future__ import annotations

import pytest

from fedrca.cli.demo import _verdict_printer
from fedrca.contracts import PlantReason, Reason, Verdict


def _verdict(seq: int, root: str | None, candidates: tuple[str, ...], probabilities=None, reason=None) -> Verdict:
    outcome = "root_cause" if root else "no_anomaly"
    if probabilities is None:
        probabilities = tuple(round(0.95 / len(candidates), 4) for _ in candidates)
    return Verdict(
        "tep", float(seq), seq, root, ("reactor",) if root else (), 0.95, (seq - 5, seq), outcome,
        candidates, probabilities, 0.9 if candidates else None, None, reason,
    )  # fmt: skip


def test_a_verdict_with_several_candidates_names_them_with_their_probabilities(
    capsys: pytest.CaptureFixture[str],
) -> None:
    show = _verdict_printer("d01", frozenset({"feed", "stripper"}))
    show(_verdict(170, "reactor", ("reactor", "stripper", "feed"), (0.55, 0.25, 0.15)))
    out = capsys.readouterr().out
    assert (
        "root cause reactor (p 0.55, uncalibrated); candidates at 0.90: reactor 0.55, stripper 0.25 (unmeasured "
        "entry), feed 0.15 (unmeasured entry); propagated to reactor (posterior 0.95, evidence 165..170)"
    ) in out


def test_the_reason_follows_the_verdict(capsys: pytest.CaptureFixture[str]) -> None:
    reason = Reason(
        (
            PlantReason("reactor", 0, 1.0, (1, 1), "root_candidate", "", ""),
            PlantReason("separator", 3, 0.5, (1, 0), "propagated", "root_cause", "config path reactor > separator"),
        ),
        "separator",
        12.0,
        "the onset order decides: reactor alarmed before separator",
    )
    _verdict_printer("d04")(_verdict(170, "reactor", ("reactor",), (0.97,), reason))
    lines = capsys.readouterr().out.splitlines()
    assert lines[1] == "      reactor: +0 rows, Z_c on in 100% of rows; (1, 1) root candidate"
    assert lines[2] == (
        "      separator: +3 rows, Z_c on in 50% of rows; (1, 0) propagated effect; table with the root: root cause; "
        "config path reactor > separator"
    )
    assert lines[3] == "      would change: the onset order decides: reactor alarmed before separator"


def test_unchanged_verdicts_print_once(capsys: pytest.CaptureFixture[str]) -> None:
    show = _verdict_printer("d04")
    show(_verdict(170, "reactor", ("reactor",)))
    show(_verdict(180, "reactor", ("reactor",)))  # heartbeat: same decision
    show(_verdict(190, "reactor", ("reactor", "separator")))  # the candidates changed: a new line
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 2
    assert lines[1].endswith("(posterior 0.95, evidence 185..190)")
    assert "candidates at 0.90: reactor 0.47, separator 0.47" in lines[1]
