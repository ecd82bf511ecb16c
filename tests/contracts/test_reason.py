"""The verdict's candidate set and reason: validated, bounded, round-tripped (contracts/reason.py)."""

from __future__ import annotations

import json
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fedrca.contracts import PlantReason, Reason, Verdict
from fedrca.contracts.messages import MAX_SEQ
from fedrca.contracts.reason import (
    MAX_CANDIDATES,
    MAX_CHANGE_CHARS,
    MAX_LINK_CHARS,
    MAX_PROPAGATED,
    MAX_REASON_PLANTS,
    MAX_VERDICT_BYTES,
    MAX_VERDICT_NAME_CHARS,
    PLANT_STATES,
)
from fedrca.exceptions import MessageError


def plant_reason(name: str = "reactor", **kw) -> PlantReason:
    fields = {"onset": 0, "share": 0.5, "pair": (1, 1), "state": "root_candidate", "table": "", "link": ""}
    return PlantReason(name, **{**fields, **kw})


def verdict(**kw) -> Verdict:
    fields = {
        "propagated": (),
        "candidates": ("reactor", "feed"),
        "probabilities": (0.6, 0.35),
        "level": 0.9,
        "calibration": "tep-abc",
        "reason": Reason((plant_reason(),), "feed", 3.5, "feed would be named had it alarmed first"),
    }
    return Verdict("tep", 1.0, 5, "reactor", posterior=0.97, evidence_window=(1, 5), outcome="root_cause",
                   **{**fields, **kw})  # fmt: skip


def test_a_verdict_with_its_set_and_reason_survives_the_wire():
    v = verdict()
    assert Verdict.decode(v.encode()) == v
    data = json.loads(v.encode())
    assert data["probabilities"] == [0.6, 0.35] and data["level"] == 0.9 and data["calibration"] == "tep-abc"
    assert data["reason"]["plants"][0] == {
        "plant": "reactor", "onset": 0, "share": 0.5, "pair": [1, 1], "state": "root_candidate", "table": "",
        "link": "",
    }  # fmt: skip


def test_verdicts_of_older_producers_still_decode():
    old = b'{"site":"tep","ts":1.0,"seq":5,"root_cause":"reactor","propagated":[],"posterior":0.9,'
    old += b'"evidence_window":[1,5],"outcome":"root_cause"}'
    v = Verdict.decode(old)
    assert v.candidates == () and v.probabilities == () and v.reason is None and v.calibration is None


def test_an_infinite_margin_travels_as_null():
    v = verdict(reason=Reason((), None, math.inf, "no other hypothesis is possible"))
    assert json.loads(v.encode())["reason"]["margin"] is None
    assert Verdict.decode(v.encode()).reason.margin == math.inf


@pytest.mark.parametrize(
    ("change", "match"),
    [
        ({"probabilities": (0.6,)}, "1 probabilities for 2 candidates"),
        ({"probabilities": (0.9, 0.3)}, "sum to"),
        ({"probabilities": (1.5, 0.0)}, r"in \[0, 1\]"),
        ({"candidates": tuple(f"p{i}" for i in range(MAX_CANDIDATES + 1)), "probabilities": ()}, "at most"),
        ({"candidates": ("",), "probabilities": ()}, "plant names"),
        ({"propagated": tuple(f"p{i}" for i in range(MAX_PROPAGATED + 1))}, "propagated"),
        ({"level": 0.0}, "level"),
        ({"level": True}, "level"),
        ({"calibration": "x" * (MAX_VERDICT_NAME_CHARS + 1)}, "calibration"),
    ],
)
def test_candidates_out_of_contract_are_refused(change, match):
    with pytest.raises(MessageError, match=match):
        verdict(**change)


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("pair", (2, 0)),
        ("pair", (1,)),
        ("share", 1.5),
        ("share", float("nan")),
        ("state", "root"),
        ("onset", 1.5),
        ("link", "x" * (MAX_LINK_CHARS + 1)),
        ("plant", ""),
    ],
)
def test_plant_reasons_out_of_contract_are_refused(field, value):
    with pytest.raises(MessageError):
        plant_reason(**{field: value}) if field != "plant" else plant_reason(value)


def test_reasons_out_of_contract_are_refused():
    with pytest.raises(MessageError, match="at most"):
        Reason(tuple(plant_reason(f"p{i}") for i in range(MAX_REASON_PLANTS + 1)), None, 0.0, "")
    with pytest.raises(MessageError, match="margin"):
        Reason((), None, -1.0, "")
    with pytest.raises(MessageError, match="change"):
        Reason((), None, 0.0, "x" * (MAX_CHANGE_CHARS + 1))


@pytest.mark.parametrize(
    "reason",
    [
        "[]",
        '{"plants": "abc", "runner_up": null, "margin": 0, "change": ""}',
        '{"plants": [{"plant": "a"}], "runner_up": null, "margin": 0, "change": ""}',
        '{"plants": [], "runner_up": 5, "margin": 0, "change": ""}',
        '{"plants": [], "runner_up": null, "margin": "x", "change": ""}',
        '{"plants": [], "margin": 0, "change": ""}',
    ],
)
def test_a_malformed_reason_on_the_wire_is_a_message_error(reason):
    raw = json.loads(verdict().encode())
    raw["reason"] = json.loads(reason)
    del raw["id"]
    with pytest.raises(MessageError):
        Verdict.decode(json.dumps(raw))


def test_an_oversized_verdict_record_is_refused_before_parsing():
    with pytest.raises(MessageError, match="exceeds"):
        Verdict.decode(b"{" + b" " * MAX_VERDICT_BYTES + b"}")


def test_the_largest_verdict_fits_its_bound():
    """Every bounded field at its largest, the longest names: the encoded verdict stays within MAX_VERDICT_BYTES."""
    name = "n" * MAX_VERDICT_NAME_CHARS
    names = [name[:-2] + f"{i:02d}" for i in range(MAX_PROPAGATED)]
    plants = tuple(
        PlantReason(names[i], 10**12, 0.33, (1, 0), "propagated", "imperfect_training", "l" * MAX_LINK_CHARS)
        for i in range(MAX_REASON_PLANTS)
    )
    reason = Reason(plants, names[1], 1e300, "c" * MAX_CHANGE_CHARS)
    v = Verdict(
        name, 1e12, MAX_SEQ, names[0], tuple(names), 0.123456, (MAX_SEQ - 1, MAX_SEQ), "multiple_roots",
        tuple(names[:MAX_CANDIDATES]), tuple([1 / 3 / MAX_CANDIDATES] * MAX_CANDIDATES), 0.95, name, reason,
    )  # fmt: skip
    raw = v.encode()
    assert len(raw) <= MAX_VERDICT_BYTES
    assert Verdict.decode(raw) == v


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.floats(0.0, 1.0), min_size=1, max_size=MAX_CANDIDATES),
    st.sampled_from(sorted(PLANT_STATES)),
    st.integers(-(10**6), 10**6) | st.none(),
)
def test_any_valid_set_and_reason_round_trips(probabilities, pair, onset):
    total = sum(probabilities)
    probabilities = [p / max(total, 1.0) for p in probabilities]
    names = tuple(f"p{i}" for i in range(len(probabilities)))
    reason = Reason((plant_reason("p0", onset=onset, pair=pair, state=PLANT_STATES[pair]),), None, 0.5, "x")
    v = Verdict("s", 0.0, 1, "p0", (), 0.9, (0, 1), "root_cause", names, tuple(probabilities), 0.9, None, reason)
    assert Verdict.decode(v.encode()) == v
