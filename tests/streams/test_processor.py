"""Plant processor core: flags only, duplicates skipped, restart continues exactly, the dataclass's flags."""

from __future__ import annotations

import copy
import json

import numpy as np
import pytest

from fedrca.contracts import FlagMessage, SensorMessage, encode, encode_flags
from fedrca.datasets import linear_multiplant
from fedrca.detectors import PlantDetector
from fedrca.detectors.health import SensorHealth
from fedrca.privacy.ledger import FlagWindow
from fedrca.streams import processor as processor_module
from fedrca.streams.processor import PlantProcessor


@pytest.fixture(scope="module")
def fitted():
    train = linear_multiplant(n_samples=1200, n_plants=1, seed=1).Y
    test = linear_multiplant(n_samples=300, n_plants=1, n_events=2, seed=2).Y
    return train, test


def messages(Y, start=0):
    return [SensorMessage("s", "p", float(t), t, Y[t - start]) for t in range(start, start + len(Y))]


def new_processor(train):
    return PlantProcessor("s", PlantDetector("p", n_states=2, epsilon=2.0, seed=1).fit(train))


def test_flags_match_the_detector_and_carry_no_raw_values(fitted):
    train, test = fitted
    proc = new_processor(train)
    reference = PlantDetector("p", n_states=2, epsilon=2.0, seed=1).fit(train).step_batch(test)
    out = proc.process(messages(test))
    assert [f.zc for f in out.flags] == reference.zc_pub.astype(int).tolist()
    assert [f.za for f in out.flags] == reference.za_pub.astype(int).tolist()
    for f in out.flags:
        record = f.to_dict()
        assert set(record) == {"site", "plant", "ts", "seq", "zc", "za", "eps", "model_version"}
    # no sensor value (as printed in JSON) occurs in any flag message
    text = b"".join(encode(f.to_dict()) for f in out.flags)
    for value in test[:50].ravel():
        assert json.dumps(float(value)).encode() not in text


def test_redelivered_messages_are_skipped_deterministically(fitted):
    train, test = fitted
    proc = new_processor(train)
    first = proc.process(messages(test[:100]))
    again = proc.process(messages(test[50:150], start=50))
    assert again.duplicates == 50
    assert [f.seq for f in again.flags] == list(range(100, 150))
    assert proc.last_seq == 149 and len(first.flags) == 100


def test_restart_from_saved_state_continues_like_no_restart(fitted):
    train, test = fitted
    proc = new_processor(train)
    proc.process(messages(test[:120]))
    saved = json.loads(json.dumps(proc.get_state()))  # through JSON, as in the Faust table
    expected = proc.process(messages(test[120:], start=120)).flags
    restarted = new_processor(train)
    restarted.set_state(saved)
    assert restarted.process(messages(test[120:], start=120)).flags == expected


def test_parameter_version_is_recorded_on_each_flag(fitted):
    train, test = fitted
    proc = new_processor(train)
    before = proc.process(messages(test[:10]))
    proc.detector.set_parameters(np.zeros(proc.detector.augmentation.theta.shape), version="v7")
    after = proc.process(messages(test[10:20], start=10))
    assert {f.model_version for f in before.flags} == {"proprietary"}
    assert {f.model_version for f in after.flags} == {"v7"}
    assert copy.deepcopy(proc.get_state())["detector"]["parameter_version"] == "v7"


def test_the_flags_are_those_of_the_dataclass(fitted, monkeypatch):
    """The processor builds its flags without the frozen dataclass's ``__init__`` (``_flag_message``): every kind
    of flag (scored with a severity level and the sensor bit, degraded, withheld, a skipped seq's) must be the
    dataclass's, field by field with its type, and encode to the same bytes."""
    train, test = fitted
    Y = test.copy()
    Y[40:, 1] = Y[39, 1]  # a stuck tag: the sensor bit
    Y[60, :] = np.nan  # a row the plant cannot score: degraded
    stream = messages(Y)
    del stream[80]  # a skipped seq: published degraded when seq 81 comes

    def run() -> list:
        detector = PlantDetector("p", n_states=2, epsilon=2.0, seed=1, severity_levels=3, level_epsilon=3.0)
        # a budget that runs out within the stream: the rows past it are withheld
        window = FlagWindow("p", 2.0, 100, 1e-5, 300.0)
        health = SensorHealth("p", epsilon=2.0, seed=1).fit(train)
        proc = PlantProcessor("s", detector.fit(train), window, "stop", health)
        return [f for lo in range(0, len(stream), 7) for f in proc.process(stream[lo : lo + 7]).flags]

    fast = run()
    monkeypatch.setattr(processor_module, "_flag_message", lambda *fields: FlagMessage(*fields))
    reference = run()
    assert {"withheld", "degraded", "sensor_fault"} <= {k for f in reference for k, v in vars(f).items() if v is True}
    assert any(f.level for f in reference) and len(reference) == len(test)
    assert [[(k, type(v), v) for k, v in vars(f).items()] for f in fast] == [
        [(k, type(v), v) for k, v in vars(f).items()] for f in reference
    ]
    assert encode_flags(fast) == encode_flags(reference)
