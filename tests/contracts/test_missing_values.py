"""Missing and Bad values on the wire: plant data (NaN and a quality code), never a dead letter.

The sensor contract's ``null`` and ``quality`` (``fedrca.contracts.Quality``) and the flag
contract's ``degraded`` bit (contracts/messages.py).
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from fedrca.contracts import FlagMessage, Quality, SensorMessage, decode_flag, decode_sensor, encode
from fedrca.exceptions import MessageError

COUNTS = {"feed": 3}
NOW = 1_700_000_000.0


def raw(values, **extra):
    return json.dumps({"site": "tep", "plant": "feed", "ts": 1.0, "seq": 4, "values": values, **extra}).encode()


def test_a_null_is_a_missing_value():
    msg = decode_sensor(raw([1.0, None, 3.0]), "tep", COUNTS, now=NOW)
    assert np.isnan(msg.values[1]) and msg.values[[0, 2]].tolist() == [1.0, 3.0]
    assert msg.quality.tolist() == [Quality.GOOD, Quality.MISSING, Quality.GOOD]
    assert msg.missing.tolist() == [False, True, False]


def test_a_value_of_bad_quality_is_not_used_and_a_null_marked_good_is_missing():
    msg = decode_sensor(raw([1.0, None, 3.0], quality=[1, 0, 2]), "tep", COUNTS, now=NOW)
    assert np.isnan(msg.values).tolist() == [True, True, True]
    assert msg.quality.tolist() == [Quality.BAD, Quality.MISSING, Quality.STALE]


def test_every_value_missing_is_still_a_message():
    msg = decode_sensor(raw([None, None, None]), "tep", COUNTS, now=NOW)
    assert np.isnan(msg.values).all() and (msg.quality == Quality.MISSING).all()


def test_encoding_writes_null_and_the_quality_only_when_it_says_more_than_missing():
    plain = SensorMessage("tep", "feed", 1.0, 4, np.array([1.0, np.nan, 3.0]))
    assert json.loads(plain.encode())["values"] == [1.0, None, 3.0]
    assert "quality" not in json.loads(plain.encode())
    stale = SensorMessage("tep", "feed", 1.0, 4, np.array([1.0, np.nan, 3.0]), np.array([0, Quality.STALE, 0]))
    assert json.loads(stale.encode())["quality"] == [0, 2, 0]
    with pytest.raises(MessageError) as err:
        SensorMessage("tep", "feed", 1.0, 4, np.array([1.0, np.inf, 3.0])).encode()
    assert err.value.reason == "non-finite"


@pytest.mark.parametrize(
    "quality",
    [np.array([0, 0, 0]), np.array([1, 0, 1]), np.array([0, 7, 0]), np.array([0, 3])],
)
def test_a_quality_vector_that_contradicts_the_values_is_refused(quality):
    with pytest.raises(MessageError) as err:
        SensorMessage("tep", "feed", 1.0, 4, np.array([1.0, np.nan, 3.0]), quality)
    assert err.value.reason == "bad-quality"


codes = st.sampled_from([int(q) for q in Quality])
# within the stream's bound of a value (fedrca.contracts.messages.MAX_ABS_VALUE; beyond it: non-finite)
values = st.floats(-1e150, 1e150, width=64)


@given(st.lists(st.tuples(values, codes), min_size=3, max_size=3))
def test_round_trip_keeps_values_and_codes(entries):
    vals = np.array([np.nan if q else v for v, q in entries])
    quality = np.array([q for _, q in entries], dtype=np.uint8)
    msg = SensorMessage("tep", "feed", 1.0, 4, vals, quality)
    back = decode_sensor(msg.encode(), "tep", COUNTS, now=NOW)
    assert np.array_equal(back.values, vals, equal_nan=True)
    assert np.array_equal(back.quality, quality)
    assert "NaN" not in msg.encode().decode()


def test_the_degraded_flag_carries_no_bits_and_round_trips():
    flag = FlagMessage("tep", "feed", 3.0, 4, 0, 0, 1.0, "v2", degraded=True)
    wire = json.loads(encode(flag.to_dict()))
    assert wire["degraded"] is True and wire["zc"] == wire["za"] == 0
    assert decode_flag(encode(flag.to_dict()), "tep", {"feed"}, now=NOW) == flag
    assert not flag.evidence and FlagMessage("tep", "feed", 3.0, 4, 1, 0, 1.0, "v2").evidence
    assert "degraded" not in json.loads(encode(FlagMessage("tep", "feed", 3.0, 4, 1, 0, 1.0, "v2").to_dict()))
    for bad in ({**wire, "zc": 1}, {**wire, "degraded": 1}, {**wire, "degraded": "yes"}):
        with pytest.raises(MessageError) as err:
            decode_flag(json.dumps(bad), "tep", {"feed"}, now=NOW)
        assert err.value.reason == "bad-flag"
