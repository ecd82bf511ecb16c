"""Sensor faults in the streaming cores (issue 30, item 3): the plant checks its tags, excludes a broken one,
publishes one bit; the RCA turns the bits into sensor events, never a root cause; replay and the
streaming runtime agree."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fedrca.application.site import prepare_site, run_pipeline, site_runtime
from fedrca.config import load_config, parse_config
from fedrca.contracts import SENSOR_FAULT, SENSOR_RECOVERED, FlagMessage, Quality, SensorMessage, encode
from fedrca.datasets import linear_multiplant
from fedrca.datasets.loader import PlantData, load_frame, plant_frames
from fedrca.detectors import PlantDetector
from fedrca.detectors.health import CHECKS, SensorHealth
from fedrca.privacy import FlagWindow
from fedrca.rca.engine import build_engine
from fedrca.rca.sensors import SENSOR_LOG_ODDS, SensorEvents
from fedrca.streams.embedded import replay_frame
from fedrca.streams.processor import PlantProcessor
from fedrca.streams.rca_stage import RCAStage
from fedrca.streams.runtime import PlantRuntime, RCARuntime, RuntimeSettings


@pytest.fixture(scope="module")
def data():
    train = linear_multiplant(n_samples=1200, n_plants=2, seed=1)
    test = linear_multiplant(n_samples=200, n_plants=2, seed=2)
    return train, test


def _processor(train, eps: float = math.inf, window: FlagWindow | None = None) -> PlantProcessor:
    sl = train.sensor_slices[0]
    detector = PlantDetector("a", n_states=2, epsilon=eps, seed=0).fit(train.Y[:, sl])
    health = SensorHealth("a", epsilon=eps, seed=1).fit(train.Y[:, sl])
    return PlantProcessor("s", detector, window, "warn", health)


def _messages(Y: np.ndarray, start: int = 0) -> list[SensorMessage]:
    return [SensorMessage("s", "a", float(start + t), start + t, Y[t]) for t in range(len(Y))]


def test_a_stuck_tag_is_excluded_and_the_plant_publishes_its_sensor_bit_only(data):
    train, test = data
    processor = _processor(train)
    Y = test.Y[:, train.sensor_slices[0]].copy()
    Y[50:, 2] = Y[49, 2]
    out = processor.process(_messages(Y))
    bits = [f.sensor_fault for f in out.flags]
    assert not any(bits[:50])
    first = bits.index(True)
    assert 50 <= first < 60 and all(bits[first:])
    assert out.health is not None and out.health.excluded[first:, 2].all()
    assert not out.health.excluded[:, [0, 1, 3]].any()
    # the flag says one bit, never which tag or value
    raw = json.loads(encode(out.flags[first].to_dict()))
    assert set(raw) <= {"site", "plant", "ts", "seq", "zc", "za", "eps", "model_version", "sensor_fault", "degraded"}


def test_the_sensor_bit_is_charged_to_the_privacy_window(data):
    train, test = data
    window = FlagWindow("a", 1.0, 1000, 1e-5)
    processor = _processor(train, eps=1.0, window=window)
    assert processor.bits_per_sample == 3
    Y = test.Y[:40, train.sensor_slices[0]].copy()
    Y[10, :] = np.nan  # a row the plant cannot score: its sensor bit alone
    out = processor.process(_messages(Y))
    assert out.degraded == 1
    assert window.bits == 39 * 3 + 1


def test_a_skipped_row_is_published_degraded_at_once_and_its_late_message_is_dead_lettered(data):
    train, test = data
    config = parse_config(
        {
            "site": "s",
            "dataset": {"format": "synthetic", "columns": [f"y{i}" for i in range(8)]},
            "plants": [{"name": "a", "sensors": [f"y{i}" for i in range(8)], "model": {"n_states": 2}}],
        }
    )
    sl = train.sensor_slices[0]
    detector = PlantDetector("a", n_states=2, seed=0).fit(train.Y[:, sl])
    runtime = PlantRuntime(config, {"a": detector})
    msgs = _messages(test.Y[:10, sl])
    batch = runtime.decode_sensors([m.encode() for m in msgs[:3] + msgs[6:8]], plant="a")
    out = runtime.process_plant("a", batch.valid, batch)
    assert [(f.seq, f.degraded) for f in out.flags] == [
        (0, False), (1, False), (2, False), (3, True), (4, True), (5, True), (6, False), (7, False)
    ]  # fmt: skip
    assert out.flags[3].ts == pytest.approx(3.0)  # between its neighbours' times
    late = runtime.decode_sensors([msgs[4].encode(), msgs[6].encode()], plant="a")
    again = runtime.process_plant("a", late.valid, late)
    assert again.flags == [] and again.duplicates == 1 and [m.seq for m in again.late] == [4]
    assert [err.reason for _, err in late.rejected] == ["late"]
    m = runtime.metrics
    assert m.value("fedrca_rows_without_plant_total", plant="a", reason="skipped") == 3
    assert m.value("fedrca_deadletters_total", stage="plant", reason="late") == 1


def test_sensor_events_exact_and_under_randomized_response():
    events = SensorEvents("s", ["a", "b"])
    bits = np.zeros((20, 2), dtype=np.int64)
    bits[5:12, 1] = 1
    bits[8, 1] = -1  # b absent from row 8: no evidence, its state holds
    out = events.run(np.arange(20), bits)
    assert [(v.seq, v.outcome, v.sensor_plants, v.evidence_window) for v in out] == [
        (5, SENSOR_FAULT, ("b",), (5, 5)),
        (12, SENSOR_RECOVERED, ("b",), (5, 12)),
    ]
    assert all(v.root_cause is None and v.is_sensor_event for v in out)
    # epsilon 2: a bit is 2 nats; the CUSUM S = max(0, S +- 2) switches at ln 1e4 = 9.2 (5 net bits), an odd flip
    # is absorbed: S = 0 2 0 0 2 4 2 4 6 8 10 -> a fault from row 10, its evidence from row 4 (S left 0)
    noisy = SensorEvents("s", ["a"], epsilon=2.0)
    flips = np.array([0, 1, 0, 0, 1, 1, 0, 1, 1, 1, 1, 1, 1, 1])[:, None]
    got = noisy.run(np.arange(len(flips)), flips)
    assert [(v.seq, v.outcome) for v in got] == [(10, SENSOR_FAULT)]
    assert got[0].evidence_window[0] == 4 and got[0].posterior >= 1 - math.exp(-SENSOR_LOG_ODDS) - 1e-6
    # row by row gives the same events (the batch path skips rows that cannot switch)
    one = SensorEvents("s", ["a", "b"])
    rows = [one.update(t, {p: int(bits[t, m]) for m, p in enumerate("ab") if bits[t, m] >= 0}) for t in range(20)]
    assert [v for r in rows for v in r] == out


@settings(max_examples=40, deadline=None, derandomize=True, database=None)
@given(
    rows=st.lists(st.lists(st.sampled_from([0, 0, 0, 0, 1, -1]), min_size=3, max_size=3), max_size=40),
    epsilon=st.sampled_from([math.inf, 0.5, 2.0, 9.0]),
)
def test_a_quiet_row_changes_nothing(rows, epsilon):
    """SensorEvents.update's shortcut (no bit set, every plant healthy without evidence) gives the events and
    the state of its full step (_update) row by row."""
    quick, full = SensorEvents("s", ["a", "b", "c"], epsilon), SensorEvents("s", ["a", "b", "c"], epsilon)
    for t, row in enumerate(rows):
        bits = {p: b for p, b in zip("abc", row, strict=True) if b >= 0}
        assert quick.update(t, bits, float(t)) == full._update(t, bits, float(t))
        assert [quick._faulty, quick._evidence, quick._start, quick._pending] == [
            full._faulty, full._evidence, full._start, full._pending
        ]  # fmt: skip


def _flag(plant: str, seq: int, ts: float | None = None, fault: bool = False, zc: int = 0) -> FlagMessage:
    return FlagMessage("s", plant, float(seq) if ts is None else ts, seq, zc, zc, math.inf, "v", sensor_fault=fault)


def test_the_stage_emits_a_rows_sensor_event_before_its_verdict_and_survives_a_restart():
    config = parse_config(
        {
            "site": "s",
            "dataset": {"format": "synthetic", "columns": ["y0", "y1", "y2"]},
            "plants": [{"name": p, "sensors": [f"y{i}"]} for i, p in enumerate("abc")],
        }
    )
    plants = config.plant_names

    def run(stage: RCAStage, seqs: range) -> list:
        out = []
        for seq in seqs:
            for p in plants:
                out += stage.add(_flag(p, seq, fault=p == "b" and 10 <= seq < 30, zc=int(p == "a" and seq >= 20)))[0]
        return out

    straight = RCAStage("s", plants, build_engine(config), allowed_lateness=2)
    expected = run(straight, range(60)) + straight.flush()
    first = RCAStage("s", plants, build_engine(config), allowed_lateness=2)
    part = run(first, range(25))
    state = json.loads(json.dumps(first.get_state()))
    second = RCAStage("s", plants, build_engine(config), allowed_lateness=2)
    second.set_state(state)
    assert [v.id for v in part + run(second, range(25, 60)) + second.flush()] == [v.id for v in expected]
    sensor = [(v.seq, v.outcome, v.sensor_plants) for v in expected if v.is_sensor_event]
    assert sensor == [(10, SENSOR_FAULT, ("b",)), (30, SENSOR_RECOVERED, ("b",))]
    assert not any(v.root_cause == "b" for v in expected)
    at_20 = [v for v in expected if v.seq == 20 or (v.seq == 10 and v.is_sensor_event)]
    assert at_20[0].is_sensor_event


def test_a_plant_whose_clock_disagrees_is_judged_without_and_counted():
    config = parse_config(
        {
            "site": "s",
            "dataset": {"format": "synthetic", "columns": ["y0", "y1", "y2"], "sample_seconds": 10},
            "plants": [{"name": p, "sensors": [f"y{i}"]} for i, p in enumerate("abc")],
        }
    )
    rca = RCARuntime(config, build_engine(config))
    flags = []
    for seq in range(12):
        for p in "abc":
            skew = 25.0 if p == "c" and seq >= 6 else 0.0  # c's clock jumps 2.5 samples ahead
            flags.append(_flag(p, seq, ts=10.0 * seq + skew))
    rca.process_flags([encode(f.to_dict()) for f in flags])
    rca.flush()
    m = rca.metrics
    assert m.value("fedrca_rows_without_plant_total", plant="c", reason="clock") == 6
    assert m.value("fedrca_clock_offset_seconds", plant="c") == pytest.approx(25.0)
    assert m.value("fedrca_rows_without_plant_total", plant="a", reason="clock") is None
    # two plants: nobody to tell which clock is wrong; counted as offsets only
    rows = []
    aligner = RCAStage("s", ["a", "b"], build_engine(config.model_copy(update={"plants": config.plants[:2]})), 1,
                       max_clock_skew=10.0).aligner  # fmt: skip
    for seq in range(3):
        rows += aligner.add(_flag("a", seq, ts=10.0 * seq))[0] + aligner.add(_flag("b", seq, ts=10.0 * seq + 40))[0]
    assert [r.clock for r in rows] == [(), (), ()] and rows[0].offsets == {"a": -20.0, "b": 20.0}


@pytest.fixture(scope="module")
def tep():
    config = load_config("config/tep.yaml")
    frame = load_frame(config, "data/tep/d04_te.dat").iloc[:400].reset_index(drop=True)
    frame.loc[60:, "XMEAS(13)"] = frame.loc[59, "XMEAS(13)"]  # separator pressure stuck
    arrays = plant_frames(config, frame, "d04")
    # the compressor work XMEAS(20) reported Bad by its device for 61 rows
    quality = {"compressor": np.zeros(arrays["compressor"].Y.shape, dtype=np.uint8)}
    quality["compressor"][200:261, 2] = Quality.BAD
    compressor = arrays["compressor"].Y.copy()
    compressor[200:261, 2] = np.nan
    arrays["compressor"] = PlantData(compressor, arrays["compressor"].U)
    return config, arrays, quality


def test_replay_and_the_streaming_runtime_agree_with_sensor_faults(tep):
    config, arrays, quality = tep
    site = prepare_site(config, "data/tep/d00.dat")
    run = run_pipeline(site, arrays, quality=quality)
    runtime = site_runtime(config, "data/tep/d00.dat")
    values = {p: d.Y for p, d in arrays.items()}
    live = replay_frame(runtime, values, sample_seconds=config.dataset.sample_seconds, quality=quality)
    assert [v.id for v in live.verdicts] == [v.id for v in run.verdicts]
    events = [(v.seq, v.outcome, v.sensor_plants) for v in run.verdicts if v.is_sensor_event]
    assert events[0][1:] == (SENSOR_FAULT, ("separator",)) and 60 <= events[0][0] < 70
    assert (202, SENSOR_FAULT, ("compressor",)) in events
    assert run.health["compressor"].checks[CHECKS.index("bad"), 202, 2]
    assert not any(v.root_cause in ("separator", "compressor") for v in run.verdicts if v.seq < 160)
    m = runtime.metrics
    assert m.value("fedrca_sensor_fault", plant="separator") == 1.0
    assert m.value("fedrca_sensor_faulty_tags", plant="separator", check="stuck") == 1.0
    assert m.value("fedrca_sensor_fault_episodes_total", plant="compressor", check="bad") == 1.0
    # the reason metrics say why the latest process verdict names its root; a later batch of sensor events
    # alone (no reason of its own) leaves them
    margin = m.value("fedrca_verdict_margin_nats")
    assert margin > 0  # d04: the latest process verdict names the reactor with its margin
    event = next(v for v in live.verdicts if v.is_sensor_event)
    latest = next(v for v in reversed(live.verdicts) if not v.is_sensor_event)
    runtime.rca._record([event])
    assert m.value("fedrca_verdict_margin_nats") == margin
    assert margin == latest.reason.margin
    m.record_reason(event)  # a verdict without a reason clears them
    assert m.value("fedrca_verdict_margin_nats") == 0.0
    runtime.rca._record([latest, event])  # the batch's latest process verdict, whatever follows it
    assert m.value("fedrca_verdict_margin_nats") == latest.reason.margin


def test_a_flag_past_the_lateness_is_judged_without_its_plant_counted_and_dead_lettered():
    config = parse_config(
        {
            "site": "s",
            "dataset": {"format": "synthetic", "columns": ["y0", "y1"]},
            "plants": [{"name": p, "sensors": [f"y{i}"]} for i, p in enumerate("ab")],
        }
    )
    rca = RCARuntime(config, build_engine(config), settings=RuntimeSettings(allowed_lateness=3))
    # sample by sample, but b's first two rows are missing
    early = [_flag(p, seq) for seq in range(10) for p in "ab" if p == "a" or seq >= 2]
    rca.process_flags([encode(f.to_dict()) for f in early])
    # b's rows 0 and 1 were released without it once a flag 3 samples newer came; its flags now are late
    _, rejected = rca.process_flags([encode(_flag("b", seq).to_dict()) for seq in (0, 1)])
    assert [err.reason for _, err in rejected] == ["late", "late"]
    m = rca.metrics
    assert m.value("fedrca_rows_without_plant_total", plant="b", reason="late") == 2
    assert m.value("fedrca_deadletters_total", stage="rca", reason="late") == 2
    assert m.value("fedrca_rows_without_plant_total", plant="a", reason="late") is None
