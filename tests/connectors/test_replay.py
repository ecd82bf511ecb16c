"""Replay loaders on the shipped samples of every layout, labels, errors, pacing and back-pressure (no broker)."""

from __future__ import annotations

import gzip
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
from fedrca.connectors.replay import (
    ListSink,
    Pacer,
    QueueSink,
    load_csv,
    load_for_config,
    load_hai,
    load_swat,
    load_tep_replay,
    replay,
    swat_stage,
)
from fedrca.contracts import SensorMessage
from fedrca.datasets.tep import TEP_COLUMNS, load_tep
from fedrca.exceptions import ConfigError, DataError

REPO = Path(__file__).resolve().parents[2]
SAMPLES = REPO / "data" / "samples"
HAI_2007 = SAMPLES / "hai" / "hai-20.07-test1.csv"
HAI_2103 = SAMPLES / "hai" / "hai-21.03-test1.csv"
HAI_2305 = SAMPLES / "hai" / "hai-23.05-test1.csv"
HAI_2305_LABELS = SAMPLES / "hai" / "hai-23.05-label-test1.csv"
SWAT_ATTACK = SAMPLES / "swat" / "SWaT_Dataset_Attack_v0-sample.csv"
SWAT_NORMAL = SAMPLES / "swat" / "SWaT_Dataset_Normal_v1-sample.csv"
GENERIC = SAMPLES / "csv" / "plant-log.csv"


def lines(path: Path) -> list[str]:
    return path.read_text().splitlines()


def raw_rows(path: Path, sep: str = ",", skip: int = 0) -> tuple[list[str], list[list[str]]]:
    """Header and cells of a sample, read independently of the loader (plain string split)."""
    text = lines(path)[skip:]
    return text[0].split(sep), [line.split(sep) for line in text[1:]]


# -- TEP --------------------------------------------------------------------------------------
def test_tep_replay_keeps_values_and_labels_the_fault_onset(tep_dir):
    data = load_tep_replay(tep_dir / "d04_te.dat", sample_seconds=180)
    assert data.format == "tep" and data.rows == 960
    assert data.columns == list(TEP_COLUMNS)
    np.testing.assert_array_equal(data.frame.to_numpy(), np.loadtxt(tep_dir / "d04_te.dat"))
    np.testing.assert_array_equal(data.timestamps, np.arange(960) * 180.0)
    assert data.attack is not None
    assert data.attack[:160].sum() == 0 and data.attack[160:].all()


def test_tep_transposed_nominal_file_is_all_normal(tep_dir):
    data = load_tep_replay(tep_dir / "d00.dat", sample_seconds=3)
    assert data.frame.shape == (500, 52)
    # d00.dat is stored as 52 rows x 500 samples
    np.testing.assert_array_equal(data.frame.to_numpy(), np.loadtxt(tep_dir / "d00.dat").T)
    assert data.timestamps[-1] == 499 * 3
    assert data.attack is not None and data.attack.sum() == 0


def test_tep_files_of_unknown_name_have_no_labels(tep_dir, tmp_path):
    copy = tmp_path / "run7.dat"
    copy.write_bytes((tep_dir / "d01_te.dat").read_bytes())
    assert load_tep_replay(copy).labels is None


# -- HAI --------------------------------------------------------------------------------------
@pytest.mark.parametrize(("path", "sep", "n_tags"), [(HAI_2007, ";", 62), (HAI_2103, ",", 79)])
def test_hai_with_label_columns(path, sep, n_tags):
    header, rows = raw_rows(path, sep)
    data = load_hai(path)
    assert data.format == "hai" and data.rows == len(rows) == 60
    assert data.columns == header[1:-4] and len(data.columns) == n_tags
    assert all(c.startswith(("P1_", "P2_", "P3_", "P4_")) for c in data.columns)
    expected = np.array([[float(x) for x in row[1:-4]] for row in rows])
    np.testing.assert_allclose(data.frame.to_numpy(), expected, rtol=0, atol=0)
    # seconds since the epoch (UTC), one per second
    first = pd.Timestamp(rows[0][0], tz="UTC").timestamp()
    np.testing.assert_array_equal(data.timestamps, first + np.arange(60))
    # per-stage labels exactly as in the file; attack is their union
    assert list(data.labels.columns) == ["attack", "attack_P1", "attack_P2", "attack_P3"]
    for k, name in enumerate(["attack", "attack_P1", "attack_P2", "attack_P3"]):
        assert data.labels[name].tolist() == [int(row[-4 + k]) for row in rows]
    assert data.labels["attack_P1"].sum() == 10 and data.labels["attack_P3"].sum() == 5
    assert data.labels["attack_P2"].sum() == 0
    np.testing.assert_array_equal(data.attack, data.labels[["attack_P1", "attack_P2", "attack_P3"]].max(axis=1))


def test_hai_first_column_may_be_called_timestamp(tmp_path):
    path = tmp_path / "hai.csv"
    text = lines(HAI_2103)
    path.write_text("\n".join(["timestamp" + text[0][len("time") :], *text[1:]]) + "\n")
    assert load_hai(path).timestamps[0] == load_hai(HAI_2103).timestamps[0]


def test_hai_gzip_file_is_read_directly(tmp_path):
    path = tmp_path / "test1.csv.gz"
    with gzip.open(path, "wt") as handle:
        handle.write(HAI_2103.read_text())
    np.testing.assert_array_equal(load_hai(path).frame.to_numpy(), load_hai(HAI_2103).frame.to_numpy())


def test_hai_2305_labels_come_from_the_label_file_by_timestamp():
    header, rows = raw_rows(HAI_2305)
    _, label_rows = raw_rows(HAI_2305_LABELS)
    data = load_hai(HAI_2305, labels_path=HAI_2305_LABELS)
    assert header[0] == "timestamp" and data.columns == header[1:] and len(data.columns) == 87
    # the label file starts 5 s earlier: matched by timestamp, not by line
    by_time = {stamp: int(label) for stamp, label in label_rows}
    assert len(label_rows) == 65
    assert data.labels["attack"].tolist() == [by_time[row[0]] for row in rows]
    assert np.flatnonzero(data.attack).tolist() == list(range(25, 37))
    assert load_hai(HAI_2305).labels is None


def test_hai_label_file_must_cover_every_data_row(tmp_path):
    short = tmp_path / "label.csv"
    short.write_text("\n".join(lines(HAI_2305_LABELS)[:40]) + "\n")
    with pytest.raises(DataError, match=r"label.csv: no label for 2022-08-12 16:00:34 \(data row 35 of .*hai-23.05"):
        load_hai(HAI_2305, labels_path=short)


def test_hai_label_file_errors(tmp_path):
    dup = tmp_path / "dup.csv"
    text = lines(HAI_2305_LABELS)
    dup.write_text("\n".join([*text, text[10]]) + "\n")
    with pytest.raises(DataError, match="time goes backwards"):
        load_hai(HAI_2305, labels_path=dup)
    twice = tmp_path / "twice.csv"
    twice.write_text("\n".join([*text[:11], text[10], *text[11:]]) + "\n")
    with pytest.raises(DataError, match=r"twice.csv: line 12: timestamp '.*' appears twice"):
        load_hai(HAI_2305, labels_path=twice)
    bad = tmp_path / "bad.csv"
    bad.write_text(text[0] + "\n" + text[1].replace(",0", ",2") + "\n")
    with pytest.raises(DataError, match=r"bad.csv: line 2, column 'label': label '2' is not 0 or 1"):
        load_hai(HAI_2305, labels_path=bad)
    nolabel = tmp_path / "nolabel.csv"
    nolabel.write_text("timestamp,value\n2022-08-12 16:00:00,1\n")
    with pytest.raises(DataError, match="no 'label' column"):
        load_hai(HAI_2305, labels_path=nolabel)
    with pytest.raises(DataError, match=r"has label columns .* drop the label file"):
        load_hai(HAI_2103, labels_path=HAI_2305_LABELS)


def test_hai_bad_cells_are_reported_by_line_and_column(tmp_path):
    text = lines(HAI_2103)
    header = text[0].split(",")
    row = text[7].split(",")
    row[header.index("P1_FT01")] = "n/a"
    path = tmp_path / "bad.csv"
    path.write_text("\n".join([*text[:7], ",".join(row), *text[8:]]) + "\n")
    with pytest.raises(DataError, match=r"bad.csv: line 8, column 'P1_FT01': 'n/a' is not a number; fix"):
        load_hai(path)
    row[header.index("P1_FT01")] = ""
    path.write_text("\n".join([*text[:7], ",".join(row), *text[8:]]) + "\n")
    with pytest.raises(DataError, match=r"line 8, column 'P1_FT01': missing or non-finite value"):
        load_hai(path)
    row = text[3].split(",")
    row[0] = "yesterday"
    path.write_text("\n".join([*text[:3], ",".join(row), *text[4:]]) + "\n")
    with pytest.raises(DataError, match=r"line 4, column 'time': 'yesterday' is not a date/time"):
        load_hai(path)
    path.write_text("\n".join([text[0], text[2], text[1], *text[3:]]) + "\n")
    with pytest.raises(DataError, match=r"line 3, column 'time': time goes backwards .* sort the file"):
        load_hai(path)
    path.write_text("\n".join([text[0], text[1] + ",1", *text[2:]]) + "\n")
    with pytest.raises(DataError, match="not a well-formed CSV file"):
        load_hai(path)
    path.write_text("when,P1_FT01\n1,2\n")
    with pytest.raises(DataError, match=r"no HAI CSV .* header line found"):
        load_hai(path)
    with pytest.raises(DataError, match="no such file"):
        load_hai(tmp_path / "missing.csv")


# -- SWaT -------------------------------------------------------------------------------------
def test_swat_attack_file_columns_times_and_misspelled_labels():
    header, rows = raw_rows(SWAT_ATTACK)
    data = load_swat(SWAT_ATTACK)
    assert header[0] == " Timestamp" and " MV101" in header  # the published leading spaces
    assert data.format == "swat" and data.rows == 60 and len(data.columns) == 51
    assert data.columns == [h.strip() for h in header[1:-1]]
    assert "MV101" in data.columns and "AIT201" in data.columns
    np.testing.assert_array_equal(data.frame.to_numpy(), np.array([[float(x) for x in r[1:-1]] for r in rows]))
    # day-first 12-hour clock across noon: 11:59:59 AM -> 12:00:00 PM is one second
    assert rows[29][0] == " 28/12/2015 11:59:59 AM" and rows[30][0] == " 28/12/2015 12:00:00 PM"
    assert data.timestamps[0] == pd.Timestamp("2015-12-28 11:59:30", tz="UTC").timestamp()
    np.testing.assert_array_equal(np.diff(data.timestamps), np.ones(59))
    labels = [r[-1] for r in rows]
    assert "A ttack" in labels and "Attack" in labels and "Normal" in labels
    assert data.attack.tolist() == [int(label != "Normal") for label in labels]
    assert data.attack.sum() == 12


def test_swat_normal_export_with_a_leading_empty_line():
    assert lines(SWAT_NORMAL)[0].strip(",") == ""
    data = load_swat(SWAT_NORMAL)
    assert data.rows == 60 and data.attack.sum() == 0
    assert data.timestamps[0] == pd.Timestamp("2015-12-22 16:00:00", tz="UTC").timestamp()


def test_swat_stages_by_first_digit():
    data = load_swat(SWAT_ATTACK)
    stages = {s: [c for c in data.columns if swat_stage(c) == s] for s in range(1, 7)}
    assert stages[1] == ["FIT101", "LIT101", "MV101", "P101", "P102"]
    assert stages[3][0] == "DPIT301" and stages[6] == ["FIT601", "P601", "P602", "P603"]
    assert sum(len(v) for v in stages.values()) == 51
    with pytest.raises(DataError, match="not a SWaT tag"):
        swat_stage("Normal/Attack")


def test_swat_unknown_label_is_an_error(tmp_path):
    text = lines(SWAT_ATTACK)
    path = tmp_path / "swat.csv"
    path.write_text("\n".join([*text[:5], text[5].replace(",Normal", ",Atack"), *text[6:]]) + "\n")
    with pytest.raises(DataError, match=r"swat.csv: line 6, column 'Normal/Attack': label 'Atack' is neither"):
        load_swat(path)


# -- generic CSV ------------------------------------------------------------------------------
def test_generic_csv_with_time_and_label_columns():
    header, rows = raw_rows(GENERIC)
    data = load_csv(GENERIC, time_column="t", label_columns=["fault"])
    assert data.columns == header[1:-1]
    np.testing.assert_array_equal(data.timestamps, [float(r[0]) for r in rows])
    assert data.labels["fault"].tolist() == [int(r[-1]) for r in rows]
    assert data.attack.tolist() == data.labels["fault"].tolist()
    no_time = load_csv(GENERIC, sample_seconds=2.0)
    assert "t" in no_time.columns and "fault" in no_time.columns
    np.testing.assert_array_equal(no_time.timestamps, np.arange(60) * 2.0)


def test_generic_csv_dates_and_mapping_errors(tmp_path):
    path = tmp_path / "dated.csv"
    path.write_text("when;a;b\n2024-01-01T00:00:00Z;1;2\n2024-01-01T00:00:10Z;3;4\n")
    data = load_csv(path, time_column="when")
    assert data.timestamps.tolist() == [1704067200.0, 1704067210.0] and data.columns == ["a", "b"]
    with pytest.raises(DataError, match=r"no time column 'time'; the header has when, a, b; fix dataset.time_column"):
        load_csv(path, time_column="time")
    with pytest.raises(DataError, match="no label column 'fault'"):
        load_csv(path, time_column="when", label_columns=["fault"])


def test_load_for_config_dispatches_on_the_format(tmp_path):
    cfg = load_config(REPO / "config" / "hai.yaml")
    assert load_for_config(cfg, HAI_2305, HAI_2305_LABELS).attack.sum() == 12
    assert load_for_config(load_config(REPO / "config" / "swat.yaml"), SWAT_ATTACK).format == "swat"
    with pytest.raises(ConfigError, match="only read for HAI"):
        load_for_config(load_config(REPO / "config" / "swat.yaml"), SWAT_ATTACK, HAI_2305_LABELS)


# -- replay -----------------------------------------------------------------------------------
def test_replay_messages_follow_the_contract(tep_dir):
    cfg = load_config(REPO / "config" / "tep.yaml")
    data = load_tep_replay(tep_dir / "d01_te.dat", sample_seconds=180)
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
    with pytest.raises(DataError, match=r"row range 60\.\.61 is empty or outside"):
        replay(data, {"water": p3}, ListSink(), site="hai", start=60, stop=61)
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
    assert fake.sleeps == [] and len(sink.messages) == 60
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
    while len(received) < 120:
        received.append(sink.queue.get(timeout=10))
    assert done.wait(10)
    thread.join(10)
    assert [(m.plant, m.seq) for m in received] == [(p, t) for t in range(60) for p in ("boiler", "water")]


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
    from fedrca.connectors.replay import ReplayDataset

    data = ReplayDataset(frame, ts, None, "mem", "csv")
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
    data = load_for_config(cfg, GENERIC)
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
    assert parts["feed"].Y.shape == (60, 2) and parts["tank"].Y.shape == (60, 3)
