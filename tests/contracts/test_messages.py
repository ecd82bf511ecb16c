"""Message validation: every malformed shape gets its dead-letter reason; good ones decode exactly."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from fedrca.contracts import (
    DeadLetterReason,
    DeadLetterStage,
    FlagMessage,
    deadletter_headers,
    decode_flag,
    decode_sensor,
    encode,
)
from fedrca.contracts.messages import MAX_ABS_VALUE
from fedrca.exceptions import MessageError

COUNTS = {"feed": 3, "reactor": 2}
NOW = 1_700_000_000.0


def sensor(**over):
    msg = {"site": "tep", "plant": "feed", "ts": 1000.0, "seq": 7, "values": [1.0, 2.5, -3.0]}
    msg.update(over)
    return json.dumps(msg).encode()


@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        (b"{not json", "malformed-json"),
        (b"\xff\xfe", "malformed-json"),
        (b"[1, 2]", "malformed-json"),
        (json.dumps({"site": "tep", "plant": "feed", "ts": 1.0, "values": [1, 2, 3]}).encode(), "missing-field"),
        (sensor(site="other"), "wrong-site"),
        (sensor(plant="boiler"), "unknown-plant"),
        (sensor(values=[1.0, 2.0]), "wrong-length"),
        (sensor(values=[1.0, "x", 2.0]), "non-finite"),
        (sensor(values=None), "missing-field"),
        (b'{"site":"tep","plant":"feed","ts":1.0,"seq":1,"values":[1.0,NaN,2.0]}', "non-finite"),
        (b'{"site":"tep","plant":"feed","ts":1.0,"seq":1,"values":[1.0,Infinity,2.0]}', "non-finite"),
        (b'{"site":"tep","plant":"feed","ts":1.0,"seq":1,"values":[null,NaN,2.0]}', "non-finite"),
        (sensor(values=[None, 1.0, 2.0], quality=[3, 0]), "bad-quality"),
        (sensor(values=[None, 1.0, 2.0], quality=[3, 0, 9]), "bad-quality"),
        (sensor(values=[None, 1.0, 2.0], quality=[3.0, 0, 0]), "bad-quality"),
        (sensor(values=[None, 1.0, 2.0], quality={"0": 3}), "bad-quality"),
        (sensor(seq=-1), "bad-seq"),
        (sensor(seq=1.5), "bad-seq"),
        (sensor(seq=True), "bad-seq"),
        (sensor(ts=-5), "bad-timestamp"),
        (sensor(ts=NOW + 10 * 86400), "bad-timestamp"),
        (sensor(ts="yesterday"), "bad-timestamp"),
    ],
)
def test_each_malformed_sensor_message_has_its_reason(raw, reason):
    with pytest.raises(MessageError) as err:
        decode_sensor(raw, "tep", COUNTS, now=NOW)
    assert err.value.reason == reason
    assert DeadLetterReason(reason) == reason


@given(
    values=st.lists(st.floats(-MAX_ABS_VALUE, MAX_ABS_VALUE, width=64), min_size=2, max_size=2),
    seq=st.integers(0, 2**40),
    ts=st.floats(0, NOW),
)
def test_valid_sensor_round_trip(values, seq, ts):
    raw = encode({"site": "tep", "plant": "reactor", "ts": ts, "seq": seq, "values": values})
    msg = decode_sensor(raw, "tep", COUNTS, now=NOW)
    assert msg.plant == "reactor" and msg.seq == seq and msg.ts == ts
    assert np.array_equal(msg.values, np.asarray(values))


def test_flag_validation_and_contract():
    flag = FlagMessage("tep", "feed", 3.0, 4, 1, 0, float("inf"), "v2")
    raw = encode(flag.to_dict())
    assert json.loads(raw) == {
        "site": "tep",
        "plant": "feed",
        "ts": 3.0,
        "seq": 4,
        "zc": 1,
        "za": 0,
        "eps": None,
        "model_version": "v2",
    }
    assert decode_flag(raw, "tep", {"feed"}, now=NOW) == flag
    bad = json.loads(raw)
    bad["zc"] = 2
    with pytest.raises(MessageError) as err:
        decode_flag(json.dumps(bad), "tep", {"feed"}, now=NOW)
    assert err.value.reason == "bad-flag"


def test_deadletter_headers_carry_reason_and_source():
    error = MessageError(DeadLetterReason.WRONG_LENGTH, "3 vs 2")
    headers = dict(deadletter_headers(error, DeadLetterStage.PLANT, "tep.sensors.feed"))
    assert headers == {
        "fedrca-reason": b"wrong-length",
        "fedrca-detail": b"3 vs 2",
        "fedrca-stage": b"plant",
        "fedrca-source-topic": b"tep.sensors.feed",
    }


def test_the_stream_bounds_values_as_the_data_files_do():
    from fedrca.datasets.nominal import MAX_ABS_VALUE as FILES

    assert MAX_ABS_VALUE == FILES  # one bound: a value a file may not hold may not arrive on a sensors topic either


def test_a_record_holds_every_name_a_topic_can():
    # contracts and config are independent cores (pyproject.toml's import contracts): each states Kafka's
    # topic-name length, and a name the configuration accepts must fit in every record that carries it
    from fedrca.config.limits import MAX_TOPIC_LENGTH
    from fedrca.contracts.bounds import MAX_NAME_CHARS

    assert MAX_NAME_CHARS == MAX_TOPIC_LENGTH
