"""Inference-time privacy ledger: spent epsilon over the window, exported, warn or stop at exhaustion."""

from __future__ import annotations

import math

import numpy as np
import pytest

from fedrca.config import parse_config
from fedrca.contracts import PRIVACY_WITHHELD, FlagMessage, SensorMessage, decode_flag, encode_flags
from fedrca.datasets import linear_multiplant
from fedrca.detectors import PlantDetector
from fedrca.privacy.accounting import composed_epsilon
from fedrca.privacy.ledger import FlagWindow
from fedrca.rca.engine import build_engine
from fedrca.streams.processor import PlantProcessor
from fedrca.streams.runtime import PlantRuntime, RCARuntime

EPS = 0.5


@pytest.fixture(scope="module")
def data():
    train = linear_multiplant(n_samples=1200, n_plants=2, seed=1)
    test = linear_multiplant(n_samples=300, n_plants=2, n_events=2, duration=20, seed=2)
    return train, test


def site(budget: float, window: int, on_exhausted: str, eps: float = EPS):
    return parse_config(
        {
            "site": "s",
            "dataset": {"format": "synthetic", "columns": [f"y{i}" for i in range(16)]},
            "plants": [
                {"name": "a", "sensors": [f"y{i}" for i in range(8)], "model": {"n_states": 2}},
                {"name": "b", "sensors": [f"y{i}" for i in range(8, 16)], "model": {"n_states": 2}},
            ],
            "privacy": {"flag_epsilon": eps, "budget": budget, "window": window, "on_exhausted": on_exhausted},
        }
    )


def detectors(train, eps: float = EPS):
    return {
        name: PlantDetector(name, n_states=2, epsilon=eps, seed=i).fit(train.Y[:, sl])
        for i, (name, sl) in enumerate(zip(("a", "b"), train.sensor_slices, strict=True))
    }


def messages(test, plant, sl, start=0, stop=None):
    Y = test.Y[start:stop, sl]
    return [SensorMessage("s", plant, float(start + t), start + t, Y[t]) for t in range(len(Y))]


def test_spent_epsilon_is_the_window_of_published_bits_composed_exactly(data):
    train, test = data
    runtime = PlantRuntime(site(budget=math.inf, window=50, on_exhausted="warn"), detectors(train))
    runtime.process_plant("a", messages(test, "a", train.sensor_slices[0], 0, 30))
    m = runtime.metrics
    # 30 samples x 2 bits of eps 0.5, by hand: the exact composition of 60 randomized-response bits
    expected = composed_epsilon(1e-5, pure={EPS: 60})
    flags_only = m.value("fedrca_privacy_epsilon_spent", plant="a", mechanism="randomized_response")
    assert flags_only == pytest.approx(expected)
    assert m.value("fedrca_privacy_epsilon_spent", plant="a", mechanism="all") == pytest.approx(expected)
    assert expected < 60 * EPS
    # 100 samples later only the last 50 count
    runtime.process_plant("a", messages(test, "a", train.sensor_slices[0], 30, 130))
    window_eps = composed_epsilon(1e-5, pure={EPS: 100})
    assert m.value("fedrca_privacy_epsilon_spent", plant="a", mechanism="all") == pytest.approx(window_eps)
    assert m.value("fedrca_privacy_epsilon_budget", plant="a") == math.inf


def test_warn_keeps_publishing_and_exports_the_overrun(data, caplog):
    train, test = data
    budget = 6.0
    runtime = PlantRuntime(site(budget=budget, window=100, on_exhausted="warn"), detectors(train))
    out = runtime.process_plant("a", messages(test, "a", train.sensor_slices[0], 0, 100))
    assert len(out.flags) == 100 and not any(f.withheld for f in out.flags)
    assert out.overrun > 0
    spent = runtime.metrics.value("fedrca_privacy_epsilon_spent", plant="a", mechanism="all")
    assert spent >= budget == runtime.metrics.value("fedrca_privacy_epsilon_budget", plant="a")
    assert "privacy budget 6 exhausted" in caplog.text


def test_stop_withholds_flags_within_the_budget_and_verdicts_say_so(data):
    train, test = data
    budget = 400.0  # flags of eps 3: 133 bits (66 samples) of any 100-sample window
    config = site(budget=budget, window=100, on_exhausted="stop", eps=3.0)
    runtime = PlantRuntime(config, detectors(train, eps=3.0))
    out = runtime.process_plant("a", messages(test, "a", train.sensor_slices[0], 0, 100))
    cap = runtime.processors["a"].window.capacity()
    published = [f for f in out.flags if not f.withheld]
    assert len(published) == cap // 2  # as many samples as the budget allows, then withheld
    assert all(f.withheld and f.zc == f.za == 0 for f in out.flags[len(published) :])
    assert runtime.metrics.value("fedrca_privacy_epsilon_spent", plant="a", mechanism="all") <= budget
    # withheld flags travel as such ...
    raws = encode_flags(out.flags)
    assert decode_flag(raws[-1], "s", {"a", "b"}).withheld
    # ... and the RCA marks the verdicts it reaches while a plant withholds its flags
    rest = runtime.process_plant("a", messages(test, "a", train.sensor_slices[0], 100, 300)).flags
    other = runtime.process_plant("b", messages(test, "b", train.sensor_slices[1], 0, 300)).flags
    rca = RCARuntime(config, build_engine(config))
    marked = plain = 0
    for a_flag, b_flag in zip(out.flags + rest, other, strict=True):
        verdicts, rejected = rca.process_flags(encode_flags([a_flag, b_flag]))
        assert not rejected
        withheld = a_flag.withheld or b_flag.withheld
        assert rca.withheld == {f.plant for f in (a_flag, b_flag) if f.withheld}
        for v in verdicts:
            assert (v.outcome == PRIVACY_WITHHELD) == withheld
            marked += withheld
            plain += not withheld
    assert marked and plain


def test_withheld_rows_are_complete_without_evidence():
    from fedrca.streams.aligner import FlagAligner

    aligner = FlagAligner(["a", "b"], allowed_lateness=100)
    aligner.add(FlagMessage("s", "a", 0.0, 0, 0, 0, 1.0, "v", True))
    rows, _ = aligner.add(FlagMessage("s", "b", 0.0, 0, 1, 1, 1.0, "v"))
    assert [(r.flags, r.complete, r.withheld) for r in rows] == [({"b": (1, 1)}, True, ("a",))]
    assert aligner.add(FlagMessage("s", "a", 0.0, 0, 0, 0, 1.0, "v", True))[1] == "duplicate"


def test_window_survives_a_restart_of_the_processor(data):
    train, test = data
    sl = train.sensor_slices[0]

    def processor():
        det = PlantDetector("a", n_states=2, epsilon=EPS, seed=0).fit(train.Y[:, sl])
        return PlantProcessor("s", det, FlagWindow("a", EPS, 100, 1e-5, 6.0), "stop")

    one = processor()
    first = one.process(messages(test, "a", sl, 0, 40))
    restarted = processor()
    restarted.set_state(one.get_state())
    rest = restarted.process(messages(test, "a", sl, 40, 100))
    straight = processor().process(messages(test, "a", sl, 0, 100))
    assert [f.withheld for f in first.flags + rest.flags] == [f.withheld for f in straight.flags]
    assert np.count_nonzero([not f.withheld for f in straight.flags]) * 2 == restarted.window.capacity()
