"""fedrca.edge.sparkplug: the Tahu payload, metric values, and the host application's state (pure, no broker)."""

from __future__ import annotations

import logging
import math
import subprocess
import sys
from pathlib import Path

import pytest
from google.protobuf import descriptor_pb2

from fedrca.edge._tahu import Payload, descriptor_set
from fedrca.edge.sparkplug import (
    MAX_PAYLOAD_BYTES,
    REBIRTH,
    DataType,
    SparkplugError,
    SparkplugHost,
    SparkplugNode,
    Target,
    decode_payload,
    metric_value,
    parse_topic,
)

TAHU = Path(__file__).resolve().parents[2] / "src" / "fedrca" / "edge" / "_tahu"
GOOD, BAD, STALE, MISSING = 0, 1, 2, 3


def test_vendored_descriptor_is_the_compiled_proto(tmp_path: Path) -> None:
    out = tmp_path / "sparkplug_b.pb"
    proc = subprocess.run(
        [sys.executable, "-m", "grpc_tools.protoc", f"-I{TAHU}", f"--descriptor_set_out={out}", "sparkplug_b.proto"],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    compiled = descriptor_pb2.FileDescriptorSet.FromString(out.read_bytes())
    vendored = descriptor_pb2.FileDescriptorSet.FromString(descriptor_set())
    assert compiled == vendored
    assert "SPDX-License-Identifier: EPL-2.0" in (TAHU / "sparkplug_b.proto").read_text()
    assert (TAHU / "LICENCE").read_text().startswith("Eclipse Public License - v 2.0")


# -- topics and values -------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "topic",
    ["spBv1.0/g/NDATA", "spBv1.0/g/DDATA/n", "spBv1.0/g/NDATA/n/d", "spAv1.0/g/NDATA/n", "spBv1.0//NDATA/n",
     "spBv1.0/g/STATE/n", "spBv1.0/g/NDATA/n/d/e", ""],
)  # fmt: skip
def test_topics_that_are_not_sparkplug_are_refused(topic: str) -> None:
    with pytest.raises(SparkplugError):
        parse_topic(topic)


def _metric(datatype: int, **value: object) -> object:
    return Payload.Metric(datatype=datatype, **value)


@pytest.mark.parametrize(
    ("metric", "expected"),
    [
        (_metric(DataType.Int8, int_value=0xFF), -1.0),  # Tahu: 8-bit pattern
        (_metric(DataType.Int8, int_value=0xFFFFFF80), -128.0),  # sign-extended to 32 bits
        (_metric(DataType.Int16, int_value=0x8000), -32768.0),
        (_metric(DataType.Int32, int_value=0xFFFFFFFE), -2.0),
        (_metric(DataType.Int64, long_value=2**64 - 5), -5.0),
        (_metric(DataType.UInt16, int_value=65535), 65535.0),
        (_metric(DataType.UInt32, int_value=2**32 - 1), 4294967295.0),
        (_metric(DataType.UInt64, long_value=2**63), 2.0**63),
        (_metric(DataType.Float, float_value=1.5), 1.5),
        (_metric(DataType.Double, double_value=-0.25), -0.25),
        (_metric(DataType.Boolean, boolean_value=True), 1.0),
    ],
)
def test_numeric_metrics(metric: object, expected: float) -> None:
    assert metric_value(metric, None) == (expected, GOOD, None)


def test_null_nan_quality_and_wrong_types() -> None:
    assert metric_value(_metric(DataType.Double, is_null=True), None) == (None, MISSING, None)
    assert metric_value(_metric(DataType.Double, double_value=math.nan), None) == (None, BAD, None)
    assert metric_value(_metric(DataType.Float, float_value=math.inf), None) == (None, BAD, None)
    for dtype, field in [(DataType.String, "string_value"), (DataType.Text, "string_value"),
                         (DataType.Bytes, "bytes_value"), (DataType.UUID, "string_value")]:  # fmt: skip
        value = b"x" if field == "bytes_value" else "x" * 100_000
        got = metric_value(_metric(dtype, **{field: value}), None)
        assert got[:2] == (None, BAD) and got[2].startswith("wrong type")
    # a Double that carries a string: the payload contradicts itself
    assert metric_value(_metric(DataType.Double, string_value="1.0"), None)[:2] == (None, BAD)
    # no datatype anywhere
    assert metric_value(Payload.Metric(double_value=1.0), None)[2].startswith("no datatype")
    # the datatype from the birth
    assert metric_value(Payload.Metric(double_value=1.0), DataType.Double) == (1.0, GOOD, None)
    for code, quality in [(192, GOOD), (0, BAD), (500, STALE), (64, BAD)]:
        m = _metric(DataType.Double, double_value=3.0)
        m.properties.keys.append("Quality")
        m.properties.values.add(type=DataType.Int32, int_value=code)
        assert metric_value(m, None)[1] == quality


def test_payloads_too_large_or_undecodable_are_refused() -> None:
    with pytest.raises(SparkplugError, match="bound"):
        decode_payload(b"\x00" * (MAX_PAYLOAD_BYTES + 1))
    with pytest.raises(SparkplugError, match="not a Sparkplug B protobuf"):
        decode_payload(b"\xff\xff\xff\xff\xff")


# -- the host -----------------------------------------------------------------------------------------
class _Commands(list):
    def append_pair(self, topic: str, payload: bytes) -> None:
        self.append((topic, payload))


class Recorder:
    """A host over metrics ``metrics`` of node g/n (or of its device), keeping what it emits and sends."""

    def __init__(self, metrics: list[str], device: str | None = None, scale: float = 1.0) -> None:
        self.updates: list[tuple[int, float | None, int, float]] = []
        self.commands = _Commands()
        targets = {("g", "n", device, m): [Target(i, scale=scale)] for i, m in enumerate(metrics)}
        self.host = SparkplugHost(targets, self.emit, self.commands.append_pair, rebirth_holdoff=5.0, log_every=0.0)

    def emit(self, tag: int, value: float | None, quality: int, ts: float) -> None:
        self.updates.append((tag, value, quality, ts))

    def values(self) -> list[tuple[int, float | None, int]]:
        out = [u[:3] for u in self.updates]
        self.updates.clear()
        return out


def _rebirths(rec: Recorder) -> list[str]:
    out = []
    for topic, payload in rec.commands:
        metrics = decode_payload(payload).metrics
        assert [(m.name, m.boolean_value, m.datatype) for m in metrics] == [(REBIRTH, True, DataType.Boolean)]
        out.append(topic)
    return out


def test_birth_data_gap_rebirth_and_death() -> None:
    rec = Recorder(["a", "b"])
    node = SparkplugNode("g", "n", ["a", "b", "unmapped"])
    rec.host.on_message(node.topic("NBIRTH"), node.birth([1.0, 2.0, 3.0], ts=10.0), received=10.5)
    assert rec.values() == [(0, 1.0, GOOD), (1, 2.0, GOOD)]
    rec.host.on_message(node.topic("NDATA"), node.data([1.5, None, 9.0], ts=11.0), received=11.5)
    assert rec.values() == [(0, 1.5, GOOD), (1, None, MISSING)]
    node.data([0.0, 0.0, 0.0], ts=12.0)  # lost on the way
    rec.host.on_message(node.topic("NDATA"), node.data([1.7, 2.7, 0.0], ts=13.0), received=13.5)
    assert rec.values() == [(0, 1.7, GOOD), (1, 2.7, GOOD)]  # the gap's message is still used
    assert rec.host.counters.sequence_gaps == 1
    assert _rebirths(rec) == ["spBv1.0/g/NCMD/n"]
    # a second gap within the hold-off asks no second rebirth
    node.data([0.0, 0.0, 0.0], ts=14.0)
    rec.host.on_message(node.topic("NDATA"), node.data([1.8, 2.8, 0.0], ts=15.0), received=14.0)
    assert rec.host.counters.sequence_gaps == 2 and len(rec.commands) == 1
    # the rebirth answers: seq restarts at 0, no gap
    rec.host.on_message(node.topic("NBIRTH"), node.birth([1.9, 2.9, 0.0], ts=16.0), received=16.0)
    rec.host.on_message(node.topic("NDATA"), node.data([2.0, 3.0, 0.0], ts=17.0), received=17.0)
    assert rec.host.counters.sequence_gaps == 2
    rec.values()
    # the will of an older session, delivered late, is ignored
    old = SparkplugNode("g", "n", ["a"], bd_seq=node.bd_seq - 1)
    rec.host.on_message(old.topic("NDEATH"), old.death(), received=18.0)
    assert rec.values() == [] and rec.host.counters.stale_deaths == 1
    # the death of this session: every tag stale at once, then data is dropped until a birth
    rec.host.on_message(node.topic("NDEATH"), node.death(), received=19.0)
    assert rec.values() == [(0, None, STALE), (1, None, STALE)]
    rec.host.on_message(node.topic("NDATA"), node.data([5.0, 5.0, 5.0], ts=20.0), received=25.0)
    assert rec.values() == [] and rec.host.counters.dropped_unborn == 1
    assert len(_rebirths(rec)) == 2
    node.next_session()
    rec.host.on_message(node.topic("NBIRTH"), node.birth([6.0, 7.0, 0.0], ts=26.0), received=26.0)
    assert rec.values() == [(0, 6.0, GOOD), (1, 7.0, GOOD)]


def test_timestamps_scale_and_devices() -> None:
    rec = Recorder(["t"], device="d1", scale=2.0)
    node = SparkplugNode("g", "n", ["x"])
    rec.host.on_message(node.topic("NBIRTH"), node.birth([0.0], ts=1.0), received=1.0)
    dbirth = Payload(timestamp=2000, seq=1)
    m = dbirth.metrics.add(name="t", alias=7, datatype=DataType.Int16, int_value=0xFFFF, timestamp=1500)
    rec.host.on_message("spBv1.0/g/DBIRTH/n/d1", dbirth.SerializeToString(), received=3.0)
    assert rec.updates == [(0, -2.0, GOOD, 1.5)]  # metric timestamp (ms), scale 2
    ddata = Payload(timestamp=4000, seq=2)
    ddata.metrics.add(alias=7, int_value=21)  # the datatype comes from the birth
    rec.host.on_message("spBv1.0/g/DDATA/n/d1", ddata.SerializeToString(), received=5.0)
    assert rec.updates[-1] == (0, 42.0, GOOD, 4.0)  # no metric timestamp: the payload's
    ddeath = Payload(timestamp=6000, seq=3)
    rec.host.on_message("spBv1.0/g/DDEATH/n/d1", ddeath.SerializeToString(), received=6.0)
    assert rec.updates[-1] == (0, None, STALE, 6.0)
    m.Clear()


def _hostile_cases() -> list[tuple[str, str, bytes, str]]:
    node = SparkplugNode("g", "n", ["a", "b"])
    node.birth([1.0, 2.0], ts=1.0)

    def data(**fields: object) -> bytes:
        p = Payload(timestamp=1000, **{k: v for k, v in fields.items() if k != "metrics"})
        for metric in fields.get("metrics", []):  # type: ignore[attr-defined]
            p.metrics.add(**metric)
        return p.SerializeToString()

    nd = node.topic("NDATA")
    return [
        ("garbage bytes", nd, b"\xff\xfe\xfd\xfc", "malformed"),
        ("truncated protobuf", nd, node.data([1.0, 2.0], ts=2.0)[:-3], "malformed"),
        ("empty payload, no seq", nd, b"", "malformed"),
        ("seq over 255", nd, data(seq=300, metrics=[{"alias": 1, "double_value": 1.0}]), "malformed"),
        ("oversized payload", nd, b"\x0a" * (MAX_PAYLOAD_BYTES + 1), "malformed"),
        ("unknown alias", nd, data(seq=1, metrics=[{"alias": 99, "double_value": 1.0}]), "unknown_alias"),
        ("metric without name or alias", nd, data(seq=1, metrics=[{"double_value": 1.0}]), "malformed"),
        (
            "string for a Double",
            nd,
            data(seq=1, metrics=[{"alias": 1, "datatype": DataType.String, "string_value": "x" * 1_000_000}]),
            "wrong_type",
        ),
        (
            "bytes value",
            nd,
            data(seq=1, metrics=[{"alias": 1, "datatype": DataType.Bytes, "bytes_value": b"1"}]),
            "wrong_type",
        ),
        ("dataset value", nd, data(seq=1, metrics=[{"alias": 1, "datatype": DataType.DataSet}]), "wrong_type"),
        (
            "Double carrying an int",
            nd,
            data(seq=1, metrics=[{"alias": 1, "int_value": 5, "datatype": DataType.Double}]),
            "wrong_type",
        ),
        ("sequence gap", nd, data(seq=40, metrics=[{"alias": 1, "double_value": 1.0}]), "sequence_gaps"),
        ("NDEATH without bdSeq", node.topic("NDEATH"), data(), "malformed"),
        ("NBIRTH without bdSeq", node.topic("NBIRTH"), data(seq=0), "malformed"),
        ("NBIRTH without seq", node.topic("NBIRTH"), data(metrics=[{"name": "bdSeq", "long_value": 0}]), "malformed"),
        ("wrong namespace", "spAv1.0/g/NDATA/n", node.data([1.0, 2.0], ts=2.0), "malformed"),
        ("unknown message type", "spBv1.0/g/NFOO/n", node.data([1.0, 2.0], ts=2.0), "malformed"),
        ("topic too deep", "spBv1.0/g/DDATA/n/d/e", node.data([1.0, 2.0], ts=2.0), "malformed"),
        ("another node", "spBv1.0/g/NDATA/other", b"\xff", "ignored"),
        ("our own command", "spBv1.0/g/NCMD/n", b"\xff", "ignored"),
        ("DDATA of an unborn device", "spBv1.0/g/DDATA/n/dev", data(seq=1, metrics=[{"alias": 1}]), "ignored"),
        (
            "historical value",
            nd,
            data(seq=1, metrics=[{"alias": 1, "double_value": 9.0, "is_historical": True}]),
            "ignored",
        ),
        ("huge topic", "spBv1.0/" + "x" * 100_000, b"", "malformed"),
    ]


def test_hostile_messages_give_a_count_and_a_line_and_lose_nothing_valid(caplog: pytest.LogCaptureFixture) -> None:
    cases = _hostile_cases()
    assert len(cases) >= 20
    rec = Recorder(["a", "b"])
    node = SparkplugNode("g", "n", ["a", "b"])
    caplog.set_level(logging.WARNING, logger="fedrca.edge.sparkplug")
    for what, topic, payload, counter in cases:
        rec.host.on_message(node.topic("NBIRTH"), node.birth([1.0, 2.0], ts=1.0), received=1.0)
        rec.updates.clear()
        caplog.clear()
        before = getattr(rec.host.counters, counter)
        rec.host.on_message(topic, payload, received=2.0)  # never raises
        assert getattr(rec.host.counters, counter) == before + 1, what
        if counter != "ignored":
            assert len(caplog.records) == 1, what  # one clear line
            assert len(caplog.records[0].getMessage()) < 400, what  # no echo of a huge input
        # the next valid message of the node is used in full
        rec.host.on_message(node.topic("NBIRTH"), node.birth([3.0, 4.0], ts=3.0), received=3.0)
        rec.host.on_message(node.topic("NDATA"), node.data([5.0, 6.0], ts=4.0), received=4.0)
        assert rec.values()[-2:] == [(0, 5.0, GOOD), (1, 6.0, GOOD)], what


def test_a_flood_of_one_problem_logs_once_and_counts_all(caplog: pytest.LogCaptureFixture) -> None:
    rec = Recorder(["a"])
    rec.host.log_every = 60.0
    caplog.set_level(logging.WARNING, logger="fedrca.edge.sparkplug")
    for i in range(5000):
        rec.host.on_message("spBv1.0/g/NDATA/n", b"\xff\xff", received=100.0 + i * 1e-3)
    assert rec.host.counters.malformed == 5000
    assert len(caplog.records) == 1 and "malformed so far: 1" in caplog.records[0].getMessage()


def test_a_birth_too_large_is_refused() -> None:
    rec = Recorder(["a"])
    birth = Payload(seq=0)
    birth.metrics.add(name="bdSeq", long_value=0, datatype=DataType.Int64)
    for i in range(100_001):
        birth.metrics.add(name="m", alias=i)
    rec.host.on_message("spBv1.0/g/NBIRTH/n", birth.SerializeToString(), received=1.0)
    assert rec.host.counters.malformed == 1 and rec.updates == []
