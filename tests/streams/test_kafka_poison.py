"""Poison records on every topic a worker reads, on the repo's real broker: dead letters, never a crash (issue 34).

Anyone who can write one record to a topic could once stop a site: a sensor message of
JSON nested thousands deep killed the plant worker in a loop, a flag with ``"eps": "abc"``
the RCA worker, a params record with a shape of 2^70 the parameter follower, and an RCA
worker without ``--params`` died at start on such a record of the compacted params topic.

Here a plant worker and an RCA worker (no ``--params``: it builds its engine from the params
topic) of the linear two-plant site run against the real broker with, on every topic they
read, at least ten hostile records among the valid ones (deep nesting, huge shapes, wrong
types, truncated records, strings of a million characters):

* ``<site>.sensors.<plant>`` and ``<site>.flags``: between the valid records, while they run;
* ``<site>.params``: after the trained parameters, before the RCA worker starts (it must
  start and use the valid ones) and more while both run;
* ``<site>.state.<plant>`` and ``<site>.state.rca``: under each task's key before the workers
  start (a task reads its state when it takes its partition).

Every hostile record lands on a dead-letter topic with its reason and stage, every valid
flag and verdict appears exactly once and equals the in-process pipeline's on the same
data, and neither worker restarts. The fleet's peer topics are covered by
``tests/application/test_fleet_kafka.py::test_poison_records_on_a_peer_topic_are_dead_lettered_and_the_fleet_ends_as_in_process``,
the control and history topics of a site with ``drift.enabled`` by ``tests/streams/test_drift_kafka.py``.
"""

from __future__ import annotations

import json
import struct
import threading
import urllib.request
from collections import Counter

import numpy as np
import pandas as pd
import pytest
from tools.cluster import Cluster, consumed_everything, group_assignment, publish_site

from fedrca.connectors.kafka import KafkaSink, read_topic
from fedrca.connectors.names import SiteNames
from fedrca.contracts import (
    SensorMessage,
    Verdict,
    decode_flag,
    encode_published_artifact,
    load_artifact,
    make_artifact,
)
from fedrca.contracts.binary import MAGIC, pack_arrays
from fedrca.datasets import linear_multiplant
from fedrca.exceptions import MessageError
from fedrca.streams.loop import state_record
from tests.kafka_broker import wait_until

# a few minutes with its training and two workers: make exhaustive (make test runs the records that crashed the
# workers in tests/streams/test_kafka_deadletter_params.py, on the worker it starts anyway)
pytestmark = [pytest.mark.kafka, pytest.mark.slow, pytest.mark.exhaustive]

ROWS = 300
MIB_STRING = "x" * 1_000_000  # a string as long as a record of Kafka's default limit holds


def _deep(n: int) -> str:
    return "[" * n + "]" * n


def hostile_json(base: dict, text_fields: tuple[str, ...]) -> list[bytes]:
    """Records of a JSON topic that break its contract: nesting, size, types, truncation, binary."""
    valid = json.dumps(base)

    def with_(field: str, raw: str) -> bytes:
        return valid.replace(
            json.dumps(field) + ": " + json.dumps(base[field]), json.dumps(field) + ": " + raw, 1
        ).encode()

    first = text_fields[0]
    return [
        with_(first, _deep(100_000)),  # deep nesting in a field
        b'{"a":' * 50_000 + b"1" + b"}" * 50_000,  # deep nesting of objects
        b"[" * 1_000_000,  # a megabyte of brackets, never closed
        with_(first, json.dumps(MIB_STRING)),  # a string of a million characters
        with_("seq", json.dumps(str(base["seq"]))),  # wrong type
        with_("seq", str(2**70)),  # beyond any sample number
        with_("ts", "[1.0]"),  # wrong type
        with_("seq", "9" * 5_000),  # an integer of 5,000 digits
        valid.encode()[: len(valid) // 2],  # truncated
        pack_arrays("artifact", {"plant": "x"}, {"a": np.zeros(3)}),  # a binary record on a JSON topic
        b"\xff\xfe\x00garbage",
        b"",
        valid.replace("{", "[", 1).encode(),  # not an object
    ]


def hostile_sensors(site: str, plant: str, n: int) -> list[bytes]:
    base = {"site": site, "plant": plant, "ts": 5.0, "seq": 10_000, "values": [1.25] * n}
    out = hostile_json(base, ("values", "site"))
    out += [
        json.dumps({**base, "values": [1.25] * (n - 1) + [1e300]}).encode(),  # beyond the detector's bound
        json.dumps({**base, "values": {"a": 1}}).encode(),
        json.dumps({**base, "site": MIB_STRING}).encode(),
    ]
    return out


def hostile_flags(site: str) -> list[bytes]:
    base = {"site": site, "plant": "plant1", "ts": 1.0, "seq": 7, "zc": 1, "za": 0, "eps": None, "model_version": "v"}
    out = hostile_json(base, ("plant", "model_version"))
    out += [
        json.dumps({**base, key: value}).encode()
        for key, value in (
            ("eps", "abc"), ("eps", [1]), ("level_eps", {"a": 1}), ("zc", True), ("withheld", 1),
            ("level", 10**6), ("model_version", MIB_STRING),
        )
    ]  # fmt: skip
    return out


def _binary(header: dict, body: bytes) -> bytes:
    text = json.dumps(header).encode()
    return MAGIC + b"\x01" + struct.pack("<I", len(text)) + text + body


def hostile_params(good: bytes) -> list[tuple[bytes | None, bytes]]:
    """(key, value) of params records that are not artifacts of this site, or lie about their arrays."""
    (length,) = struct.unpack_from("<I", good, 5)
    header, body = json.loads(good[9 : 9 + length]), good[9 + length :]

    def spec(**change) -> bytes:
        h = json.loads(json.dumps(header))
        h["arrays"][0].update(change)
        return _binary(h, body)

    nested = json.loads(json.dumps(header))
    nested["meta"]["manifest"]["metrics"] = "@DEEP@"
    deep = _binary(nested, body).replace(b'"@DEEP@"', _deep(20_000).encode())
    other = make_artifact("_server", 97, {"A": np.eye(2)}, config_hash="another configuration")
    edited = json.loads(json.dumps(header))
    edited["meta"]["manifest"]["created"] = "2000-01-01T00:00:00+00:00"  # not what its digest covers
    big_header = json.loads(json.dumps(header))
    big_header["meta"]["manifest"]["created"] = MIB_STRING[:900_000]
    return [
        (b"_server", spec(shape=[2**35, 2**35])),
        (b"_server", spec(shape=[-1, 4])),
        (b"_server", spec(shape=[2**70])),
        (b"_server", spec(dtype="|V8")),
        (b"_server", spec(dtype="(2,2)f8")),
        (b"_server", spec(offset=-5)),
        (b"_server", deep),
        (b"_server", good[: len(good) // 2]),  # truncated
        (b"_server", b'{"not": "an artifact"}'),
        (b"_server", _binary(big_header, body)),  # a string of 900,000 characters in the manifest
        (b"junk", b"FRCA\x01\xff\xff\xff\xff"),
        (b"\xff\xfe", b"\x00" * 64),  # a key that is not UTF-8
        (b"_server", encode_published_artifact(other)),  # trained under another configuration
        (b"_server", _binary(edited, body)),  # edited after training
    ]


def hostile_states() -> list[bytes]:
    """Records under a task's state key that are not its state."""
    return [
        b"garbage",
        b"",
        b'{"offset":"5","state":{}}',
        b'{"offset":-1,"state":{}}',
        b'{"offset":0,"state":' + b"[" * 100_000,
        b'{"offset":0,"state":' + _deep(40).encode() + b"}",
        b'{"offset":0,"state":{"detector":1}}',
        b'{"offset":0,"state":null}',
        b'{"offset":0,"state":"' + MIB_STRING.encode() + b'"}',
        b'{"offset":0,"state":{},"extra":1}',
        state_record(0, b"[1,2,3]"),
        b'{"offset":0,"sta',
    ]


def _metric(port: int, name: str, **labels: str) -> float:
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    want = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
    total = 0.0
    for line in text.splitlines():
        if line.startswith(f"{name}{{"):
            series, _, value = line.rpartition(" ")
            got = ",".join(sorted(p for p in series[len(name) + 1 : -1].split(",") if p.split("=")[0] in labels))
            if got == want:
                total += float(value)
    return total


def _port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _objects(bootstrap: str, topic: str) -> list[dict]:
    """The records of ``topic`` that are JSON objects (the injected hostile ones are not, or say so)."""
    out = []
    for record in read_topic(bootstrap, topic, timeout=30):
        try:
            value = json.loads(record.value)
        except (ValueError, RecursionError, TypeError):
            continue
        if isinstance(value, dict):
            out.append(value)
    return out


def _valid_flag(flag: dict, site: str) -> bool:
    """A flag of the contract (the injected hostile ones are not)."""
    try:
        decode_flag(json.dumps(flag), site, {"plant1", "plant2"})
    except (MessageError, ValueError):
        return False
    return True


def _dead(bootstrap: str, topic: str) -> list:
    return list(read_topic(bootstrap, topic, timeout=30))


def test_poison_records_on_every_topic_are_dead_lettered_and_the_workers_go_on(kafka_broker, tmp_path):
    bootstrap = kafka_broker.bootstrap
    nominal, test = tmp_path / "nominal.csv", tmp_path / "test.csv"
    for path, data in ((nominal, linear_multiplant(n_samples=600, seed=0)),
                       (test, linear_multiplant(n_samples=ROWS, seed=1, n_events=3))):  # fmt: skip
        pd.DataFrame(data.Y, columns=data.columns()).to_csv(path, index=False)
    # trained, topics made, parameters published, and what the in-process pipeline makes of the same rows
    published = publish_site(tmp_path, bootstrap, "poison", nominal, test, base="config/synthetic_linear.yaml",
                             train_options=("--rounds", "2"), sample_seconds=1.0)  # fmt: skip
    config_path, config, expected = published.config_path, published.config, published.expected
    site = config.site
    assert expected.verdicts, "the events make verdicts"

    names = {p: config.topic("sensors", plant=p) for p in config.plant_names}
    good_server = encode_published_artifact(load_artifact(published.params, "_server"))
    poison_params = hostile_params(good_server)
    state_poison = hostile_states()
    with KafkaSink(bootstrap, config) as sink:
        for key, value in poison_params[:7]:  # already there when the RCA worker starts
            sink.send_raw(config.topic("params"), key, value)
        for plant in config.plant_names:
            for value in state_poison:
                sink.send_raw(SiteNames(config).state(plant), f"{names[plant]}:0".encode(), value)
        for value in state_poison:
            sink.send_raw(config.topic("rca_state"), f"{config.topic('flags')}:0".encode(), value)
        sink.flush()

    plant_port, rca_port = _port(), _port()
    cluster = Cluster(config_path, bootstrap, nominal, tmp_path)
    try:
        cluster.add("plants", "plants,params", ["--metrics-port", str(plant_port)])
        cluster.add("rca", "rca", ["--metrics-port", str(rca_port)], plant_data=False)
        for group in (f"fedrca-{site}-plants", f"fedrca-{site}-rca"):
            wait_until(lambda g=group: group_assignment(bootstrap, g) is not None, 300, f"the worker of {group}")

        bad_sensors = {p: hostile_sensors(site, p, len(config.plant(p).sensors)) for p in config.plant_names}
        bad_flags = hostile_flags(site)
        values = pd.read_csv(test)
        feeding_done = threading.Event()

        def feed() -> None:
            with KafkaSink(bootstrap, config) as sink:
                for seq in range(ROWS):
                    for plant in config.plant_names:
                        row = values[list(config.plant(plant).sensors)].iloc[seq].to_numpy(dtype=np.float64)
                        sink.send(SensorMessage(site, plant, float(seq), seq, row))
                        poison = bad_sensors[plant]
                        if seq % 15 == 7 and seq // 15 < len(poison):
                            sink.send_raw(names[plant], plant.encode(), poison[seq // 15])
                    if seq % 15 == 11 and seq // 15 < len(bad_flags):
                        sink.send_raw(config.topic("flags"), b"plant1", bad_flags[seq // 15])
                    if seq % 30 == 3 and 7 + seq // 30 < len(poison_params):
                        key, value = poison_params[7 + seq // 30]
                        sink.send_raw(config.topic("params"), key, value)
                for k in range(ROWS // 15, len(bad_flags)):  # the rest of the flags
                    sink.send_raw(config.topic("flags"), b"plant1", bad_flags[k])
                for key, value in poison_params[7 + ROWS // 30 :]:
                    sink.send_raw(config.topic("params"), key, value)
                sink.flush()
            feeding_done.set()

        feeder = threading.Thread(target=feed)
        feeder.start()
        feeder.join(timeout=300)
        assert feeding_done.is_set()
        site_dead = config.topic("deadletter")
        plant_dead = {p: config.topic("plant_deadletter", plant=p) for p in config.plant_names}
        expected_ids = {v.id for v in expected.verdicts}

        def everything_in() -> bool:
            verdicts = {json.loads(r.value)["id"] for r in read_topic(bootstrap, config.topic("verdicts"))}
            return (
                expected_ids <= verdicts
                and all(
                    len(_dead(bootstrap, plant_dead[p])) >= len(bad_sensors[p]) + len(state_poison) for p in plant_dead
                )
                and len(_dead(bootstrap, site_dead)) >= len(bad_flags) + len(poison_params) - 7 + len(state_poison)
            )

        wait_until(everything_in, 300, "every verdict and every dead letter", interval=1.0)
        wait_until(lambda: consumed_everything(bootstrap, f"fedrca-{site}-rca", config.topic("flags")), 120,
                   "the RCA to consume every flag")  # fmt: skip

        # every hostile record dead-lettered once, with its reason and its stage
        for plant in config.plant_names:
            records = _dead(bootstrap, plant_dead[plant])
            by_stage = Counter(r.headers["fedrca-stage"].decode() for r in records)
            assert by_stage == {"plant": len(bad_sensors[plant]), "state": len(state_poison)}, by_stage
            sent = Counter(v[:1_000_000] for v in [*bad_sensors[plant], *state_poison])
            assert Counter(r.value for r in records) == sent
            assert all(r.headers["fedrca-reason"] and r.headers["fedrca-detail"] for r in records)
        records = _dead(bootstrap, site_dead)
        by_stage = Counter(r.headers["fedrca-stage"].decode() for r in records)
        # params records published before the RCA worker started are skipped and counted, not dead-lettered again
        assert by_stage == {"rca": len(bad_flags), "params": len(poison_params) - 7, "state": len(state_poison)}, (
            by_stage
        )
        assert Counter(r.value for r in records if r.headers["fedrca-stage"] == b"rca") == Counter(
            f[:1_000_000] for f in bad_flags
        )
        reasons = Counter(r.headers["fedrca-reason"].decode() for r in records)
        assert {"too-deep", "too-large", "malformed-json", "bad-flag", "bad-artifact", "bad-state"} & set(reasons)
        assert all(len(r.value) <= 1_000_000 for r in records)
        # the metrics count them: the RCA worker's params refusals include the ones it skipped at start
        assert _metric(rca_port, "fedrca_deadletters_total", stage="params") >= len(poison_params)
        assert _metric(plant_port, "fedrca_deadletters_total", stage="plant") == sum(map(len, bad_sensors.values()))

        # every valid flag and verdict exactly once, as the in-process pipeline makes them
        produced = [f for f in _objects(bootstrap, config.topic("flags")) if _valid_flag(f, site)]
        keys = Counter((f["plant"], f["seq"]) for f in produced)
        assert set(keys) == {(p, t) for p in config.plant_names for t in range(ROWS)} and max(keys.values()) == 1
        want = {(f.plant, f.seq): (f.zc, f.za) for f in expected.flags}
        assert {(f["plant"], f["seq"]): (f["zc"], f["za"]) for f in produced} == want
        verdicts = [json.loads(r.value) for r in read_topic(bootstrap, config.topic("verdicts"))]
        ids = Counter(v["id"] for v in verdicts)
        assert set(ids) == expected_ids and max(ids.values()) == 1
        by_id = {v["id"]: v for v in verdicts}
        assert all(Verdict.from_dict(by_id[v.id]) == v for v in expected.verdicts)

        # no worker restarted or crashed: one process each, still alive, no traceback in its log
        for worker in cluster.workers.values():
            assert worker.alive and worker.starts == 1, worker.log_tail()
            assert "Traceback" not in worker.log_tail(100_000), worker.log_tail()
        assert "RCA engine from the published parameters" in cluster.workers["rca"].log_tail(100_000)
    except BaseException:
        print(cluster.diagnostics())
        raise
    finally:
        cluster.stop_all()
