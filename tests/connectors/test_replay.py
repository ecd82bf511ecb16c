"""The replay loop on parsed files: message contract, rules, pacing and back-pressure (no broker).

The file parsers themselves are tested in tests/datasets/.
"""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fedrca.config import ColumnMatch, load_config
from fedrca.connectors.replay import ListSink, Pacer, QueueSink, replay
from fedrca.contracts import SensorMessage
from fedrca.datasets import Dataset, load_dataset, load_hai, load_swat, load_tep, load_tep_dataset
from fedrca.exceptions import ConfigError, DataError

REPO = Path(__file__).resolve().parents[2]
SAMPLES = REPO / "data" / "samples"
HAI_2103 = SAMPLES / "hai" / "hai-21.03-test1.csv"
SWAT_ATTACK = SAMPLES / "swat" / "SWaT_Dataset_Attack_v0-sample.csv"
GENERIC = SAMPLES / "csv" / "plant-log.csv"
ROWS = 120


def raw_rows(path: Path, sep: str = ",") -> tuple[list[str], list[list[str]]]:
    """Header and cells of a sample, read independently of the loader (plain string split)."""
    text = path.read_text().splitlines()
    return text[0].split(sep), [line.split(sep) for line in text[1:]]


# -- replay -----------------------------------------------------------------------------------
def test_replay_messages_follow_the_contract(tep_dir):
    cfg = load_config(REPO / "config" / "tep.yaml")
    data = load_tep_dataset(tep_dir / "d01_te.dat", sample_seconds=180)
    groups = {p.name: p.sensors for p in cfg.plants}
    sink = ListSink()
    stats = replay(data, groups, sink, site="tep", start=100, stop=130)
    assert (stats.rows, stats.messages, stats.first_row, stats.stop_row) == (30, 150, 100, 130)
    frame = load_tep(tep_dir / "d01_te.dat")
    # row-major: every plant's message of row t before any of row t+1
    assert [(m.plant, m.seq) for m in sink.messages] == [(p, t) for t in range(100, 130) for p in cfg.plant_names]
    for message in sink.messages:
        assert set(json.loads(message.encode())) == {"site", "plant", "ts", "seq", "values"}
        assert message.site == "tep"
        assert message.ts == message.seq * 180.0
        assert message.values.tolist() == frame.loc[message.seq, groups[message.plant]].tolist()


def test_replay_with_rules_and_errors():
    data = load_hai(HAI_2103)
    sink = ListSink()
    replay(data, {"water": ColumnMatch(prefix="P3_")}, sink, site="hai", stop=3)
    p3 = [c for c in data.columns if c.startswith("P3_")]
    assert [m.values.tolist() for m in sink.messages] == data.frame[p3].iloc[:3].to_numpy().tolist()
    with pytest.raises(DataError, match="plant 'x' needs column\\(s\\) FIT101, which the file does not have"):
        replay(data, {"x": ["FIT101"]}, ListSink(), site="hai")
    with pytest.raises(DataError, match=r"row range 120\.\.121 is empty or outside"):
        replay(data, {"water": p3}, ListSink(), site="hai", start=120, stop=121)
    with pytest.raises(ConfigError, match="selects no column"):
        replay(data, {"x": ColumnMatch(prefix="P9_")}, ListSink(), site="hai")


class FakeClock:
    """Deterministic time: ``sleep`` advances ``now``; ``lag`` adds work time per send."""

    def __init__(self) -> None:
        self.now = 100.0
        self.sleeps: list[float] = []

    def clock(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


class SlowSink(ListSink):
    """A sink that takes ``cost`` (fake) seconds per message."""

    def __init__(self, fake: FakeClock, cost: float) -> None:
        super().__init__()
        self.fake = fake
        self.cost = cost

    def send(self, message):
        self.fake.now += self.cost
        super().send(message)


@pytest.mark.parametrize(("spec", "factor"), [("realtime", 1.0), ("x60", 60.0), ("x2.5", 2.5), ("10x", 10.0)])
def test_pacer_releases_rows_on_the_scaled_schedule(spec, factor):
    fake = FakeClock()
    data = load_swat(SWAT_ATTACK)  # one row per second
    sink = ListSink()
    stats = replay(data, {"p1": ["FIT101"]}, sink, site="s", pacer=Pacer.from_spec(spec, clock=fake.clock,
                   sleep=fake.sleep), stop=20)  # fmt: skip
    assert len(sink.messages) == 20
    # first row immediately, then one sleep per row of exactly 1 s / factor
    assert len(fake.sleeps) == 19
    np.testing.assert_allclose(fake.sleeps, 1.0 / factor, rtol=1e-9)
    assert fake.now - 100.0 == pytest.approx(19.0 / factor)
    assert stats.slept == pytest.approx(19.0 / factor) and stats.max_lag == 0.0


def test_pacer_catches_up_after_a_slow_sink_and_never_drops():
    fake = FakeClock()
    data = load_swat(SWAT_ATTACK)
    # 0.3 s per message, 2 plants -> 0.6 s per row; at x1 there is 0.4 s left to sleep per row
    sink = SlowSink(fake, 0.3)
    stats = replay(data, {"a": ["FIT101"], "b": ["LIT101"]}, sink, site="s",
                   pacer=Pacer(1.0, clock=fake.clock, sleep=fake.sleep), stop=10)  # fmt: skip
    np.testing.assert_allclose(fake.sleeps, 0.4, rtol=1e-9)
    # at x4 a row is due every 0.25 s but takes 0.6 s: never sleeps, sends everything, lag grows
    fake2 = FakeClock()
    sink2 = SlowSink(fake2, 0.3)
    stats = replay(data, {"a": ["FIT101"], "b": ["LIT101"]}, sink2, site="s",
                   pacer=Pacer(4.0, clock=fake2.clock, sleep=fake2.sleep), stop=10)  # fmt: skip
    assert fake2.sleeps == [] and len(sink2.messages) == 20
    assert stats.max_lag == pytest.approx(9 * 0.6 - 9 * 0.25)
    assert [m.seq for m in sink2.messages] == [t for t in range(10) for _ in range(2)]


def test_asap_never_sleeps_and_bad_specs_are_rejected():
    fake = FakeClock()
    sink = ListSink()
    replay(load_swat(SWAT_ATTACK), {"a": ["FIT101"]}, sink, site="s",
           pacer=Pacer.from_spec("asap", clock=fake.clock, sleep=fake.sleep))  # fmt: skip
    assert fake.sleeps == [] and len(sink.messages) == ROWS
    for bad in ("fast!", "x0", "x-1", "-3"):
        with pytest.raises(ConfigError, match="unknown replay speed"):
            Pacer.from_spec(bad)
    with pytest.raises(ConfigError, match="positive factor"):
        Pacer(0.0)


def test_queue_sink_blocks_the_replay_until_the_consumer_takes_messages():
    data = load_hai(HAI_2103)
    sink = QueueSink(maxsize=5)
    received: list[SensorMessage] = []
    release = threading.Event()
    done = threading.Event()

    def producer() -> None:
        replay(data, {"boiler": ColumnMatch(prefix="P1_"), "water": ColumnMatch(prefix="P3_")}, sink, site="hai")
        done.set()

    thread = threading.Thread(target=producer, daemon=True)
    thread.start()
    # nobody consumes: the replay fills the queue and blocks instead of dropping
    deadline = time.monotonic() + 10
    while not sink.queue.full() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert sink.queue.full()
    assert not done.wait(0.2)
    release.set()
    while len(received) < 2 * ROWS:
        received.append(sink.queue.get(timeout=10))
    assert done.wait(10)
    thread.join(10)
    assert [(m.plant, m.seq) for m in received] == [(p, t) for t in range(ROWS) for p in ("boiler", "water")]


def test_queue_sink_times_out_with_a_clear_error():
    sink = QueueSink(maxsize=1, timeout=0.05)
    message = SensorMessage("s", "p", 0.0, 0, np.zeros(1))
    sink.send(message)
    with pytest.raises(DataError, match=r"the consumer took no message for 0\.05 s"):
        sink.send(message)


@settings(max_examples=60, deadline=None)
@given(
    gaps=st.lists(st.floats(0.0, 50.0, allow_nan=False), min_size=1, max_size=40),
    speed=st.floats(0.5, 500.0),
    cost=st.floats(0.0, 2.0),
)
def test_pacer_never_releases_early_never_drops_and_is_exact_when_the_sink_is_free(gaps, speed, cost):
    fake = FakeClock()
    ts = np.concatenate([[1000.0], 1000.0 + np.cumsum(gaps)])
    frame = pd.DataFrame({"a": np.arange(len(ts), dtype=float)})
    data = Dataset(frame, ts, None, "mem", "csv")
    sent_at: list[float] = []

    class Recording(SlowSink):
        def send(self, message):
            sent_at.append(self.fake.now)
            super().send(message)

    replay(data, {"p": ["a"]}, Recording(fake, cost), site="s", pacer=Pacer(speed, clock=fake.clock, sleep=fake.sleep))
    due = 100.0 + (ts - ts[0]) / speed
    assert len(sent_at) == len(ts)
    assert all(s >= d - 1e-9 for s, d in zip(sent_at, due))
    if cost == 0.0:
        np.testing.assert_allclose(sent_at, due, rtol=0, atol=1e-9)


def test_generic_csv_with_a_config_mapping_end_to_end(tmp_path):
    cfg_path = tmp_path / "plant.yaml"
    cfg_path.write_text(
        "site: demo\n"
        "dataset: {format: csv, time_column: t, label_columns: [fault], sample_seconds: 0.5}\n"
        "plants:\n"
        "  - {name: feed, match: {prefix: feed_}}\n"
        "  - {name: tank, match: {regex: '^(tank|pump)_'}}\n"
    )
    cfg = load_config(cfg_path)
    data = load_dataset(cfg.dataset, GENERIC)
    assert data.labels["fault"].sum() == 10 and data.timestamps[1] == 0.5
    sink = ListSink()
    groups = {"feed": ColumnMatch(prefix="feed_"), "tank": ColumnMatch(regex="^(tank|pump)_")}
    replay(data, groups, sink, site="demo", stop=2)
    header, rows = raw_rows(GENERIC)
    assert json.loads(sink.messages[0].encode()) == {"site": "demo", "plant": "feed", "ts": 0.0, "seq": 0,
                                                     "values": [float(rows[0][1]), float(rows[0][2])]}  # fmt: skip
    assert sink.messages[1].values.tolist() == [float(x) for x in rows[0][3:6]]
    # the site path (training/detection) drops time and label columns and resolves the same rules
    from fedrca.datasets.loader import load_frame, plant_frames

    frame = load_frame(cfg, GENERIC)
    assert list(frame.columns) == header[1:-1]
    parts = plant_frames(cfg, frame)
    assert parts["feed"].Y.shape == (ROWS, 2) and parts["tank"].Y.shape == (ROWS, 3)
