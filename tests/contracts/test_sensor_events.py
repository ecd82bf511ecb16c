"""The sensor-fault bit of a flag and the sensor event of a verdict (issue 30, item 3)."""

from __future__ import annotations

import math

import pytest

from fedrca.contracts import (
    SENSOR_FAULT,
    SENSOR_RECOVERED,
    DeadLetterReason,
    FlagMessage,
    Verdict,
    decode_flag,
    encode,
    encode_flags,
)
from fedrca.exceptions import MessageError

RAW = '{"site":"s","plant":"p","ts":1,"seq":0,"zc":0,"za":0,"eps":null,"model_version":"v1"'


def test_the_sensor_fault_bit_round_trips_and_is_left_out_when_false():
    flag = FlagMessage("s", "p", 1.0, 0, 1, 0, math.inf, "v1", sensor_fault=True)
    raw = encode(flag.to_dict())
    assert b'"sensor_fault":true' in raw
    assert decode_flag(raw, "s", {"p"}) == flag
    assert encode_flags([flag]) == [raw]
    plain = FlagMessage("s", "p", 1.0, 0, 1, 0, math.inf, "v1")
    assert b"sensor_fault" not in encode_flags([plain])[0]
    assert decode_flag(RAW + "}", "s", {"p"}).sensor_fault is False
    # a degraded row carries it (the plant could not score the row, its checks still ran)
    degraded = decode_flag(RAW + ',"degraded":true,"sensor_fault":true}', "s", {"p"})
    assert degraded.degraded and degraded.sensor_fault and not degraded.evidence


@pytest.mark.parametrize(
    "tail", [',"sensor_fault":1}', ',"sensor_fault":"yes"}', ',"withheld":true,"sensor_fault":true}']
)
def test_a_bad_sensor_fault_bit_is_refused(tail):
    with pytest.raises(MessageError) as err:
        decode_flag(RAW + tail, "s", {"p"})
    assert err.value.reason is DeadLetterReason.BAD_FLAG
    assert "sensor_fault" in str(err.value)


def test_a_sensor_event_names_its_plant_never_a_root_and_has_its_own_id():
    event = Verdict("tep", 30.0, 10, None, (), 1.0, (4, 10), SENSOR_FAULT, sensor_plants=("reactor",))
    process = Verdict("tep", 30.0, 10, None, (), 1.0, (4, 10), "no_anomaly")
    recovered = Verdict("tep", 60.0, 20, None, (), 1.0, (4, 20), SENSOR_RECOVERED, sensor_plants=("reactor",))
    assert event.is_sensor_event and not process.is_sensor_event
    assert len({event.id, process.id, recovered.id}) == 3
    assert Verdict.decode(event.encode()) == event
    assert "sensor_plants" not in process.to_dict()
    for bad in (
        dict(root_cause="reactor", outcome=SENSOR_FAULT, sensor_plants=("reactor",)),
        dict(root_cause=None, outcome=SENSOR_FAULT, sensor_plants=()),
        dict(root_cause=None, outcome="root_cause", sensor_plants=("reactor",)),
    ):
        with pytest.raises(MessageError, match="sensor event"):
            root, outcome = bad["root_cause"], bad["outcome"]
            Verdict("tep", 30.0, 10, root, (), 1.0, (4, 10), outcome, sensor_plants=bad["sensor_plants"])
