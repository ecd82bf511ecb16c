"""Fleet consensus messages over the real Kafka broker (issue 18, acceptance 5)."""

from __future__ import annotations

import numpy as np
import pytest

from fedrca.application.fleet.kafka import decode_consensus, encode_consensus, kafka_fleet, peer_topic
from fedrca.connectors.kafka import read_topic
from fedrca.contracts.binary import pack_arrays
from fedrca.datasets.fleet import fleet_patterns
from fedrca.exceptions import MessageError
from fedrca.fleet.collabdict import FleetSettings
from fedrca.fleet.consensus import ConsensusMessage
from fedrca.fleet.model import simulate_fleet
from tests.kafka_broker import unique_name


def test_consensus_messages_survive_the_byte_encoding_bit_for_bit():
    rng = np.random.default_rng(0)
    m = ConsensusMessage("fit/it3/c2", 17, "agree", "seg1", "seg4", rng.normal(size=300), [2.0])
    assert decode_consensus(encode_consensus(m)) == m
    with pytest.raises(MessageError, match="bad-type"):
        decode_consensus(pack_arrays("other", {}, {}))
    with pytest.raises(MessageError, match="lacks"):
        decode_consensus(pack_arrays("fleet-consensus", {"session": "s"}, {"value": np.zeros(1), "flood": np.ones(1)}))
    with pytest.raises(MessageError, match="NaN"):
        raw = pack_arrays(
            "fleet-consensus",
            {"session": "s", "round": 0, "phase": "average", "sender": "a", "receiver": "b"},
            {"value": np.array([np.nan]), "flood": np.ones(1)},
        )
        decode_consensus(raw)


@pytest.mark.kafka
def test_five_participants_over_kafka_reach_the_in_process_parameters(kafka_broker):
    fleet = fleet_patterns(n_participants=5, n_samples=100, n_dims=2, n_patterns=2, seed=1)
    # a looser tolerance and three EM iterations keep the rounds (broker round trips) few;
    # equality with the in-process run does not depend on them
    settings = FleetSettings(n_components=2, folds=0, chunks=3, seed=0, tolerance=1e-8, max_iter=3)
    local = simulate_fleet(fleet.datasets, settings, seed=3)
    name = unique_name("fleet")
    remote = kafka_fleet(kafka_broker.bootstrap, fleet.datasets, settings, seed=3, fleet=name, timeout=120.0)
    assert remote.identical
    # same seeds, same messages: the very same parameters as in process
    assert remote.max_parameter_difference() == 0.0
    assert np.array_equal(remote.model.means, local.model.means)
    assert np.array_equal(remote.model.precisions, local.model.precisions)
    assert remote.model.threshold == local.model.threshold
    for n in fleet.datasets:
        assert np.array_equal(remote.results[n].weights, local.results[n].weights)
        assert remote.results[n].calibration == local.results[n].calibration
    assert remote.messages == local.messages
    # each participant's topic holds only messages addressed to it, from its peers
    total = 0
    for n in fleet.datasets:
        records = list(read_topic(kafka_broker.bootstrap, peer_topic(name, n), timeout=30.0))
        total += len(records)
        for r in records:
            m = decode_consensus(r.value)
            assert m.receiver == n and r.key == m.sender.encode()
    assert total == local.messages


@pytest.mark.kafka
def test_fleet_command_runs_over_kafka(kafka_broker, tmp_path, capsys):
    import pandas as pd
    import yaml

    from fedrca.application.fleet.store import load_fleet_model
    from fedrca.cli import main

    fleet = fleet_patterns(n_participants=5, n_samples=60, n_dims=2, n_patterns=2, seed=2)
    for n, X in fleet.datasets.items():
        pd.DataFrame(X, columns=["a", "b"]).to_csv(tmp_path / f"{n}.csv", index=False)
    config = {
        "fleet": unique_name("cli"),
        "data": {"format": "csv"},
        "participants": [{"name": n, "file": str(tmp_path / f"{n}.csv")} for n in fleet.datasets],
        "model": {"components": 2, "max_iter": 2, "n_init": 1},
        "consensus": {"tolerance": 1e-8},
        "threshold": {"folds": 0},
    }
    (tmp_path / "fleet.yaml").write_text(yaml.safe_dump(config), encoding="utf-8")
    args = ["fleet", "--config", str(tmp_path / "fleet.yaml"), "--out", str(tmp_path / "out")]
    assert main([*args, "--kafka", f"kafka://{kafka_broker.bootstrap}"]) == 0
    assert f"(Kafka at kafka://{kafka_broker.bootstrap})" in capsys.readouterr().out
    remote = load_fleet_model(tmp_path / "out" / "model.npz")
    assert main([*args[:-1], str(tmp_path / "local")]) == 0
    local = load_fleet_model(tmp_path / "local" / "model.npz")
    assert remote == local


def _binary(header: dict, body: bytes) -> bytes:
    import json
    import struct

    from fedrca.contracts.binary import MAGIC

    text = json.dumps(header).encode()
    return MAGIC + b"\x01" + struct.pack("<I", len(text)) + text + body


def _hostile_consensus(receiver: str, sender: str) -> list[bytes]:
    """Records of a participant's topic that are not consensus messages for it (issue 34)."""
    import json
    import struct

    meta = {"session": "fit/it0/c0", "round": 0, "phase": "average", "sender": sender, "receiver": receiver}
    good = pack_arrays("fleet-consensus", meta, {"value": np.ones(3), "flood": np.ones(3)})
    (length,) = struct.unpack_from("<I", good, 5)
    header, body = json.loads(good[9 : 9 + length]), good[9 + length :]

    def spec(**change: object) -> bytes:
        h = json.loads(json.dumps(header))
        h["arrays"][0].update(change)
        return _binary(h, body)

    def with_meta(**change: object) -> bytes:
        return pack_arrays("fleet-consensus", {**meta, **change}, {"value": np.ones(3), "flood": np.ones(3)})

    deep = json.loads(json.dumps(header))
    deep["meta"]["session"] = "@"
    return [
        b"",
        b"garbage",
        good[: len(good) // 2],
        pack_arrays("other", {}, {}),
        pack_arrays("fleet-consensus", {"session": "s"}, {"value": np.zeros(1), "flood": np.ones(1)}),
        pack_arrays("fleet-consensus", meta, {"value": np.array([np.nan]), "flood": np.ones(1)}),
        spec(shape=[2**35, 2**35]),
        spec(dtype="|V8"),
        spec(shape=[-1]),
        _binary(deep, body).replace(b'"@"', b"[" * 50_000 + b"]" * 50_000),
        with_meta(round="x"),
        with_meta(session="s" * 1_000_000),
        with_meta(receiver=sender),  # sender and receiver the same
        with_meta(receiver="nobody"),  # addressed to another participant
    ]


@pytest.mark.kafka
@pytest.mark.slow
@pytest.mark.exhaustive
def test_poison_records_on_a_peer_topic_are_dead_lettered_and_the_fleet_ends_as_in_process(kafka_broker):
    from fedrca.application.fleet.kafka import dead_topic, ensure_peer_topics

    fleet = fleet_patterns(n_participants=3, n_samples=80, n_dims=2, n_patterns=2, seed=4)
    # three participants are a complete graph: chunking is refused there (docs/fleet.md, session_labellings),
    # so this fleet runs unchunked; the poison is the subject, and the session "fit/it0/c0" exists
    settings = FleetSettings(n_components=2, folds=0, chunks=1, seed=0, tolerance=1e-8, max_iter=2)
    local = simulate_fleet(fleet.datasets, settings, seed=5)
    name = unique_name("poison")
    names = list(fleet.datasets)
    ensure_peer_topics(kafka_broker.bootstrap, name, names)
    hostile = _hostile_consensus(names[0], names[1])
    from kafka import KafkaProducer

    raw = KafkaProducer(bootstrap_servers=kafka_broker.bootstrap, acks="all", max_request_size=2 << 20)
    try:
        for value in hostile:
            raw.send(peer_topic(name, names[0]), key=names[1].encode(), value=value)
        raw.flush(timeout=60)
    finally:
        raw.close()
    remote = kafka_fleet(kafka_broker.bootstrap, fleet.datasets, settings, seed=5, fleet=name, timeout=120.0)
    assert remote.max_parameter_difference() == 0.0
    assert np.array_equal(remote.model.means, local.model.means) and remote.model.threshold == local.model.threshold
    dead = list(read_topic(kafka_broker.bootstrap, dead_topic(name, names[0]), timeout=30.0))
    assert len(dead) == len(hostile), [r.headers.get("fedrca-detail") for r in dead]
    assert [r.value for r in dead] == [v[:1_000_000] for v in hostile]
    assert all(r.headers["fedrca-reason"] and r.headers["fedrca-stage"] == b"fleet" for r in dead)
