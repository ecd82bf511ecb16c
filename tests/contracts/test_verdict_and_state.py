"""The verdict contract (one schema everywhere) and the flag state code."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from fedrca.contracts import FlagState, Verdict, flag_bits, flag_states, verdict_id
from fedrca.exceptions import MessageError

plants = st.sampled_from(["feed", "reactor", "separator"])
verdicts = st.builds(
    Verdict,
    site=st.sampled_from(["tep", "hai"]),
    ts=st.floats(0, 1e9, allow_nan=False),
    seq=st.integers(0, 10**9),
    root_cause=st.none() | plants,
    propagated=st.lists(plants, max_size=3).map(tuple),
    posterior=st.floats(0.0, 1.0),
    evidence_window=st.tuples(st.integers(0, 1000), st.integers(0, 1000)).map(lambda w: (min(w), max(w))),
    outcome=st.sampled_from(["root_cause", "no_anomaly", "external_root", "unexplained"]),
)


@given(verdicts)
def test_a_verdict_survives_the_wire_and_its_id_follows_its_evidence(v):
    back = Verdict.decode(v.encode())
    assert back == v
    assert back.id == verdict_id(v.site, v.root_cause, v.evidence_window)
    assert json.loads(v.encode()) == v.to_dict()


def test_a_verdict_out_of_contract_is_a_message_error():
    good = Verdict("tep", 0.0, 3, "reactor", (), 0.9, (1, 3), "root_cause").to_dict()
    with pytest.raises(MessageError, match="posterior"):
        Verdict.from_dict({**good, "posterior": 1.5})
    with pytest.raises(MessageError, match="empty"):
        Verdict.from_dict({**good, "evidence_window": [5, 2]})
    with pytest.raises(MessageError, match="missing-field"):
        Verdict.from_dict({k: v for k, v in good.items() if k != "seq"})
    with pytest.raises(MessageError, match="does not match its content"):
        Verdict.from_dict({**good, "id": "0" * 16})
    with pytest.raises(MessageError, match="malformed-json"):
        Verdict.decode(b"[1]")


@given(st.lists(st.tuples(st.integers(0, 1), st.integers(0, 1)), min_size=1, max_size=50))
def test_flag_state_codes_and_bits_are_inverse(pairs):
    zc, za = (np.array(x) for x in zip(*pairs, strict=True))
    codes = flag_states(zc, za)
    assert [FlagState(int(c)).bits for c in codes] == [tuple(p) for p in pairs]
    back = flag_bits(codes)
    assert np.array_equal(back[0], zc) and np.array_equal(back[1], za)
    assert FlagState.of(1, 1) is FlagState.ROOT and FlagState.of(1, 0) is FlagState.PROPAGATED
