"""Rows with missing values in the stream: degraded flags (one bit, no evidence), never a dead letter."""

from __future__ import annotations

import json

import numpy as np
import pytest

from fedrca.contracts import FlagMessage, SensorMessage, decode_flag, encode_flags
from fedrca.datasets import linear_multiplant
from fedrca.detectors import PlantDetector
from fedrca.privacy.ledger import FlagWindow
from fedrca.streams.aligner import FlagAligner
from fedrca.streams.processor import PlantProcessor


def test_degraded_rows_are_complete_without_evidence():
    aligner = FlagAligner(["a", "b", "c"], allowed_lateness=100)
    aligner.add(FlagMessage("s", "a", 0.0, 0, 0, 0, 1.0, "v", degraded=True))
    aligner.add(FlagMessage("s", "c", 0.0, 0, 0, 0, 1.0, "v", True))
    rows, _ = aligner.add(FlagMessage("s", "b", 0.0, 0, 1, 1, 1.0, "v"))
    assert [(r.flags, r.complete, r.withheld, r.degraded) for r in rows] == [({"b": (1, 1)}, True, ("c",), ("a",))]
    assert aligner.add(FlagMessage("s", "a", 0.0, 0, 0, 0, 1.0, "v", degraded=True))[1] == "duplicate"
    assert aligner.add(FlagMessage("s", "a", 0.0, 0, 0, 0, 1.0, "v"))[1] == "late"  # a clearance is new information
    again = FlagAligner(["a", "b", "c"], allowed_lateness=100)
    again.set_state(json.loads(json.dumps(aligner.get_state())))
    assert again.add(FlagMessage("s", "a", 0.0, 0, 0, 0, 1.0, "v", degraded=True))[1] == "duplicate"


@pytest.fixture(scope="module")
def fitted():
    train = linear_multiplant(n_samples=1200, n_plants=1, seed=1).Y
    test = linear_multiplant(n_samples=200, n_plants=1, n_events=2, seed=2).Y
    return train, test


def test_a_processor_publishes_rows_it_cannot_score_as_degraded_and_charges_nothing_for_them(fitted):
    train, test = fitted
    Y = test.copy()
    Y[10:20, :] = np.nan  # every sensor missing: nothing to score
    det = PlantDetector("p", n_states=2, epsilon=2.0, seed=1).fit(train)
    proc = PlantProcessor("s", det, FlagWindow("p", 2.0, 1000, 1e-5, float("inf")))
    out = proc.process([SensorMessage("s", "p", float(t), t, Y[t]) for t in range(len(Y))])
    assert [f.seq for f in out.flags] == list(range(len(Y)))
    degraded = [f.seq for f in out.flags if f.degraded]
    assert set(degraded) >= set(range(10, 20))
    assert out.degraded == len(degraded)
    assert all(f.zc == f.za == 0 and f.level is None for f in out.flags if f.degraded)
    assert proc.window is not None and proc.window.count() == 2 * (len(Y) - len(degraded))
    back = [decode_flag(raw, "s", {"p"}) for raw in encode_flags(out.flags)]
    assert [f.degraded for f in back] == [f.degraded for f in out.flags]


def test_degraded_rows_are_counted_per_plant(fitted):
    from fedrca.observability import Metrics

    train, test = fitted
    Y = test[:50].copy()
    Y[5:9] = np.nan
    metrics = Metrics(plants=["p"])
    metrics.record_detection("p", PlantDetector("p", n_states=2, seed=1).fit(train).step_batch(Y))
    assert metrics.value("fedrca_degraded_rows_total", plant="p") == 4
