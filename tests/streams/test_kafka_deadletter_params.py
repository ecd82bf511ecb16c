"""Dead letters and parameter hot-reload on a real broker, through one ``fedrca run`` worker.

A stream of TEP rows with malformed records interleaved (sensor and flag
messages): every bad record lands on a dead-letter topic with its original
bytes and a reason, every good one is processed. A plant's dead letters hold its
raw bytes, so they go to the plant's own ``<site>.deadletter.<plant>``; the RCA's
(flags) go to the site's ``<site>.deadletter``. Trained parameters published
mid-stream are used for every later sample and recorded in the flags; a
tampered artifact is refused, dead-lettered (to the plant it is addressed to) and
counted.
"""

from __future__ import annotations

import json
import socket
import struct
import subprocess
import sys
import urllib.request
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from tools.cluster import Cluster, group_assignment, site_config, train_site

from fedrca.config import SiteConfig, load_config
from fedrca.connectors import replay
from fedrca.connectors.kafka import KafkaSink, ensure_site_topics, read_topic
from fedrca.contracts import SERVER, load_artifact
from fedrca.contracts.artifacts import manifest_digest
from fedrca.contracts.binary import pack_arrays
from fedrca.datasets import load_dataset
from fedrca.observability import numeric_version
from tests.kafka_broker import unique_name, wait_until

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
TRAIN = REPO / "data" / "tep" / "d00.dat"
FAULT = REPO / "data" / "tep" / "d01_te.dat"
FEDRCA = [sys.executable, "-m", "fedrca.cli"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _metric(port: int, name: str, **labels: str) -> float | None:
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    want = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
    for line in text.splitlines():
        if line.startswith(f"{name}{{"):
            series, _, value = line.rpartition(" ")
            got = ",".join(sorted(series[len(name) + 1 : -1].split(",")))
            if got == want:
                return float(value)
    return None


def _scalar(port: int, name: str) -> float | None:
    """An unlabelled series of the worker's exporter (None when absent)."""
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    for line in text.splitlines():
        if line.startswith(f"{name} "):
            return float(line.split()[1])
    return None


def _send_rows(config: SiteConfig, sink: KafkaSink, rows: range) -> None:
    dataset = load_dataset(config.dataset, FAULT)
    groups = {p.name: list(p.sensors) for p in config.plants}
    replay.replay(dataset, groups, sink, site=config.site, start=rows.start, stop=rows.stop)
    sink.flush()


def _flags_by_key(bootstrap: str, config: SiteConfig) -> dict[tuple[str, int], dict]:
    """The processors' flags (the malformed records injected into the topic are skipped)."""
    out = {}
    for record in read_topic(bootstrap, config.topic("flags")):
        try:
            f = json.loads(record.value)
        except (ValueError, RecursionError):
            continue
        if f.get("model_version") != "x":  # not one of the injected bad flags
            out[(f["plant"], f["seq"])] = f
    return out


def _bad_sensor_records(config: SiteConfig) -> list[tuple[str, bytes | None, bytes, str]]:
    """(topic, key, value, expected reason) of malformed sensor messages, none with real data."""
    site = config.site
    feed = config.topic("sensors", plant="feed")
    n = len(config.plant("feed").sensors)

    def msg(**fields) -> bytes:
        base = {"site": site, "plant": "feed", "ts": 5.0, "seq": 10_000, "values": [1.25] * n}
        base.update(fields)
        return json.dumps(base).encode()

    return [
        (feed, b"feed", b'{"site": "' + site.encode() + b'", "plant": "feed", "seq": 3', "malformed-json"),
        (feed, b"feed", b"\xff\xfe not utf-8", "malformed-json"),
        (feed, b"feed", msg(values=[1.25] * (n - 1)), "wrong-length"),
        (feed, b"feed", msg(values=[1.25] * (n - 1) + [float("nan")]), "non-finite"),
        (feed, b"feed", msg(values=[1.25] * (n - 1) + ["x"]), "non-finite"),
        (feed, b"feed", msg(plant="boiler"), "unknown-plant"),
        (feed, b"feed", msg(ts=-60.0), "bad-timestamp"),
        (feed, b"feed", msg(ts=4.0e10), "bad-timestamp"),
        (feed, b"feed", msg(site="elsewhere"), "wrong-site"),
        (feed, b"feed", msg(seq=-1), "bad-seq"),
        (feed, b"feed", json.dumps({"site": site, "plant": "feed", "seq": 1}).encode(), "missing-field"),
        (feed, None, msg(), "bad-key"),
        # the records that once killed the plant worker in a loop (issue 34; more in test_kafka_poison.py)
        (feed, b"feed", msg().replace(b'"values": [', b'"values": ' + b"[" * 100_000, 1), "too-deep"),
        (feed, b"feed", msg(site="x" * 999_000), "wrong-site"),
        (feed, b"feed", msg(seq=2**70), "bad-seq"),
        (feed, b"feed", msg(values=[1.25] * (n - 1) + [1e300]), "non-finite"),
    ]


def _bad_flag_records(config: SiteConfig) -> list[tuple[str, bytes | None, bytes, str]]:
    flags = config.topic("flags")
    site = config.site
    base = {"site": site, "plant": "reactor", "ts": 1.0, "seq": 7, "zc": 1, "za": 0, "eps": None, "model_version": "x"}
    return [
        (flags, b"reactor", b"not json at all", "malformed-json"),
        (flags, b"reactor", json.dumps({**base, "zc": 2}).encode(), "bad-flag"),
        (flags, b"boiler", json.dumps({**base, "plant": "boiler"}).encode(), "unknown-plant"),
        # the flags that once killed the RCA worker (issue 34)
        (flags, b"reactor", json.dumps({**base, "eps": "abc"}).encode(), "bad-flag"),
        (flags, b"reactor", json.dumps({**base, "plant": "@"}).encode().replace(b'"@"', b"[" * 100_000), "too-deep"),
        (flags, b"reactor", json.dumps({**base, "site": "x" * 999_000}).encode(), "wrong-site"),
    ]


@pytest.fixture(scope="module")
def live(kafka_broker, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("dlq")
    bootstrap = kafka_broker.bootstrap
    config_path = site_config(tmp, unique_name("tep"))
    config = load_config(config_path)
    params = train_site(config_path, TRAIN, tmp / "params")
    ensure_site_topics(bootstrap, config)
    port = _free_port()
    cluster = Cluster(config_path, bootstrap, TRAIN, tmp)
    cluster.add("all", "plants,rca,params", ["--metrics-port", str(port), "--allowed-lateness", "1400"])
    try:
        for group in (f"fedrca-{config.site}-plants", f"fedrca-{config.site}-rca"):
            wait_until(lambda g=group: group_assignment(bootstrap, g) is not None, 180, f"the worker in {group}")
        yield config, bootstrap, port, params, cluster
    except BaseException:
        print(cluster.diagnostics())
        raise
    finally:
        cluster.stop_all()


def wait_or_dump(cluster: Cluster, condition, timeout: float, what: str, interval: float = 0.1) -> None:
    """wait_until, printing the workers' log tails when it times out (the failure report shows them)."""
    try:
        wait_until(condition, timeout, what, interval)
    except BaseException:
        print(cluster.diagnostics())
        raise


def test_bad_records_are_dead_lettered_good_ones_processed_then_parameters_reload(live):
    config, bootstrap, port, params, cluster = live
    deadletter = config.topic("deadletter")  # the RCA's: flags
    feed_deadletter = config.topic("plant_deadletter", plant="feed")  # the feed processor's: raw bytes
    bad_sensors, bad_flags = _bad_sensor_records(config), _bad_flag_records(config)
    with KafkaSink(bootstrap, config) as sink:
        # rows 0..199 with the malformed records interleaved
        for i, (topic, key, value, _) in enumerate(bad_sensors):
            _send_rows(config, sink, range(i * 12, (i + 1) * 12))
            sink.send_raw(topic, key, value)
        _send_rows(config, sink, range(len(bad_sensors) * 12, 200))
        for topic, key, value, _ in bad_flags:
            sink.send_raw(topic, key, value)

    def part_done(rows: range) -> bool:
        flags = _flags_by_key(bootstrap, config)
        return all((p, t) in flags for p in config.plant_names for t in rows)

    wait_or_dump(cluster, lambda: part_done(range(200)), 120, "flags of rows 0..199", interval=0.5)

    def dead(topic: str) -> list:
        return list(read_topic(bootstrap, topic))

    wait_or_dump(cluster, lambda: len(dead(feed_deadletter)) >= len(bad_sensors), 60, "the feed's dead letters")
    wait_or_dump(cluster, lambda: len(dead(deadletter)) >= len(bad_flags), 60, "the RCA's dead letters")
    for topic, expected_bad, stage in ((feed_deadletter, bad_sensors, b"plant"), (deadletter, bad_flags, b"rca")):
        records = dead(topic)
        assert len(records) == len(expected_bad)
        got = Counter((r.value, r.headers["fedrca-reason"].decode()) for r in records)
        assert got == Counter((value, reason) for _, _, value, reason in expected_bad)
        for r in records:
            assert r.headers["fedrca-detail"], "every dead letter says why"
            assert r.headers["fedrca-stage"] == stage
    flags = _flags_by_key(bootstrap, config)
    assert set(flags) == {(p, t) for p in config.plant_names for t in range(200)}, "good ones processed, no extras"
    assert {f["model_version"] for f in flags.values()} == {"proprietary"}
    reasons = Counter(reason for *_, reason in bad_sensors)
    for reason, n in reasons.items():
        assert _metric(port, "fedrca_deadletters_total", stage="plant", reason=reason) == n

    # Publish the trained parameters mid-stream; the processors switch between two batches.
    reloads_before = _scalar(port, "fedrca_rca_reloads_total") or 0.0
    subprocess.run(
        [
            *FEDRCA,
            "publish-params",
            "--config",
            str(cluster.config),
            "--params",
            str(params),
            "--broker",
            f"kafka://{bootstrap}",
        ],
        check=True,
        cwd=REPO,
        capture_output=True,
    )
    version = load_artifact(params, "reactor").version
    wait_or_dump(
        cluster,
        lambda: all(_metric(port, "fedrca_parameter_info", plant=p, version=version) == 1 for p in config.plant_names),
        60,
        "the new parameter version to be offered",
    )
    # The RCA role of the same running worker rebuilds its engine from the published server
    # artifact (learned graph, nominal flag rates) without a restart.
    server_version = numeric_version(load_artifact(params, SERVER).version)
    wait_or_dump(
        cluster,
        # one rebuild per published artifact: the server's and each plant's (nominal flag rates)
        lambda: (
            _scalar(port, "fedrca_rca_reloads_total") == reloads_before + len(config.plant_names) + 1
            and _scalar(port, "fedrca_rca_parameter_version") == server_version
        ),
        60,
        "the RCA engine to be rebuilt from the published server artifact",
    )
    assert cluster.workers["all"].starts == 1 and cluster.workers["all"].alive
    with KafkaSink(bootstrap, config) as sink:
        _send_rows(config, sink, range(200, 400))
    wait_or_dump(cluster, lambda: part_done(range(200, 400)), 120, "flags of rows 200..399", interval=0.5)
    flags = _flags_by_key(bootstrap, config)
    assert {flags[(p, t)]["model_version"] for p in config.plant_names for t in range(200, 400)} == {version}

    # A tampered artifact (Theta changed, manifest re-versioned with a consistent digest, so
    # only the arrays' sha256 can catch it) is refused and reported.
    artifact = load_artifact(params, "reactor")
    arrays = {k: np.asarray(v).copy() for k, v in artifact.arrays.items()}
    arrays["theta"] = arrays["theta"] + 1.0
    manifest = {**dict(artifact.manifest), "version": "v999"}
    manifest["digest"] = manifest_digest(manifest)
    meta = {"plant": "reactor", "version": "v999", "manifest": manifest}
    tampered = pack_arrays("artifact", meta, arrays)
    with KafkaSink(bootstrap, config) as sink:
        sink.send_raw(config.topic("params"), b"reactor", tampered)
    wait_or_dump(
        cluster,
        lambda: _metric(port, "fedrca_deadletters_total", stage="params", reason="bad-artifact") == 1,
        60,
        "the tampered artifact to be refused",
    )
    reactor_deadletter = config.topic("plant_deadletter", plant="reactor")
    wait_or_dump(cluster, lambda: len(dead(reactor_deadletter)) >= 1, 60, "the refused artifact's dead letter")
    refused = [r for r in dead(reactor_deadletter) if r.headers["fedrca-reason"] == b"bad-artifact"]
    assert len(refused) == 1 and refused[0].value == tampered
    assert b"sha256" in refused[0].headers["fedrca-detail"]
    # a record whose array claims 2^35 x 2^35 elements once ended the parameter follower (issue 34)
    (length,) = struct.unpack_from("<I", tampered, 5)
    header = json.loads(tampered[9 : 9 + length])
    header["arrays"][0]["shape"] = [2**35, 2**35]
    text = json.dumps(header).encode()
    huge = tampered[:5] + struct.pack("<I", len(text)) + text + tampered[9 + length :]
    with KafkaSink(bootstrap, config) as sink:
        sink.send_raw(config.topic("params"), b"reactor", huge)
    wait_or_dump(
        cluster,
        lambda: _metric(port, "fedrca_deadletters_total", stage="params", reason="bad-artifact") == 2,
        60,
        "the record of a huge shape to be refused",
    )
    assert cluster.workers["all"].starts == 1 and cluster.workers["all"].alive
    with KafkaSink(bootstrap, config) as sink:
        _send_rows(config, sink, range(400, 500))
    wait_or_dump(cluster, lambda: part_done(range(400, 500)), 120, "flags of rows 400..499", interval=0.5)
    flags = _flags_by_key(bootstrap, config)
    assert {flags[(p, t)]["model_version"] for p in config.plant_names for t in range(400, 500)} == {version}
    assert _metric(port, "fedrca_parameter_info", plant="reactor", version="v999") is None
