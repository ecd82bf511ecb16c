"""A plant of 1,000 sensors through the Kafka pipeline on a broker with default record limits.

Kafka refuses records above ``message.max.bytes`` (1 MiB by default; the producer's
``max.request.size`` alike). A plant worker writes the plant's state with every batch, so
that state must stay linear in the sensor count: it names the detector's parameters
(version and digest) instead of carrying its D x D matrices (tens of MB at 1,000 sensors;
``docs/sizing.md``). The repo's broker keeps Kafka's default limits
(``tools/kafka/broker.py`` sets none). The model is kept small (``n_states: 8``) so the fit
is quick: the test is about what the worker writes, not about detection.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import yaml
from tools.cluster import REPO, Cluster, group_assignment

from fedrca.config import load_config
from fedrca.connectors.kafka import KafkaSink, ensure_site_topics, read_topic
from fedrca.contracts import SensorMessage
from tests.kafka_broker import unique_name, wait_until

pytestmark = pytest.mark.slow

SENSORS = 1000
ROWS = 40
DEFAULT_RECORD_LIMIT = 1_048_588  # Kafka's message.max.bytes default


def nominal(rows: int, seed: int) -> np.ndarray:
    """(rows, SENSORS): a latent AR(1) of 20 factors mixed into the sensors, plus sensor noise."""
    rng = np.random.default_rng(seed)
    x = np.zeros((rows, 20))
    for t in range(1, rows):
        x[t] = 0.9 * x[t - 1] + rng.standard_normal(20)
    mix = rng.standard_normal((20, SENSORS)) / np.sqrt(20)
    return np.round(50.0 + x @ mix + 0.3 * rng.standard_normal((rows, SENSORS)), 5)


def test_a_1000_sensor_plant_runs_with_default_record_limits(kafka_broker, tmp_path: Path):
    doc = yaml.safe_load((REPO / "config" / "tep.yaml").read_text(encoding="utf-8"))
    doc["site"] = unique_name("big")
    doc["dataset"] = {"format": "csv", "time_column": "t", "sample_seconds": 1}
    doc["plants"] = [{"name": "p0", "sensors": [f"s{i}" for i in range(SENSORS)]}]
    doc["defaults"]["model"]["n_states"] = 8
    doc.pop("rca", None)  # TEP's RCA and edge settings name TEP's plants
    doc.pop("edge", None)
    # the re-baselining loop keeps D x D baselines in one Kafka record: fedrca run refuses it for 1,000 sensors
    doc.pop("drift", None)
    config_path = tmp_path / "big.yaml"
    config_path.write_text(yaml.safe_dump(doc), encoding="utf-8")
    train = tmp_path / "nominal.csv"
    values = nominal(1200, seed=1)
    header = ",".join(["t", *(f"s{i}" for i in range(SENSORS))])
    rows = "\n".join(",".join([str(t), *map(repr, row)]) for t, row in enumerate(values.tolist()))
    train.write_text(header + "\n" + rows + "\n", encoding="utf-8")
    config = load_config(config_path)
    bootstrap = kafka_broker.bootstrap
    ensure_site_topics(bootstrap, config)

    cluster = Cluster(config_path, bootstrap, train, tmp_path)
    try:
        cluster.add("w1", "plants,params")
        group = f"fedrca-{config.site}-plants"
        wait_until(lambda: bool(group_assignment(bootstrap, group)), 900, "the plant worker to fit and join its group")
        stream = nominal(ROWS, seed=2)
        with KafkaSink(bootstrap, config) as sink:
            for seq, row in enumerate(stream):
                sink.send(SensorMessage(config.site, "p0", float(seq), seq, row))
        flags_topic = config.topic("flags")

        def flags() -> list[dict]:
            return [json.loads(r.value) for r in read_topic(bootstrap, flags_topic)]

        try:
            wait_until(lambda: len(flags()) >= ROWS, 180, "the flags of every row", interval=1.0)
        except BaseException:
            print(cluster.diagnostics())
            raise
        assert sorted(f["seq"] for f in flags()) == list(range(ROWS))  # each exactly once
        states = list(read_topic(bootstrap, config.topic("state", plant="p0")))
        assert states, "no state record was committed"
        largest = max(len(r.value) for r in states)
        # linear in D: about 5 floats per sensor (last sample, EWMA memories), far below the limit
        assert largest < DEFAULT_RECORD_LIMIT / 4, largest
        doc_state = json.loads(states[-1].value)["state"]["detector"]
        assert "theta" not in doc_state and doc_state["parameter_digest"]
        assert not list(read_topic(bootstrap, config.topic("plant_deadletter", plant="p0")))
    finally:
        cluster.stop_all()
