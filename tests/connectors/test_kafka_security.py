"""The Kafka security options on a real SASL/SCRAM broker: every client of fedrca authenticates.

A broker of its own (``tools/kafka/broker.py --home <tmp> start --scram USER=PASSWORD``:
a SASL_PLAINTEXT listener with a SCRAM-SHA-256 user, as a secured production cluster
has) is started for this module. The configuration's ``kafka`` section names the
mechanism and the user; the password comes from the environment variable it names.
Through it, ``fedrca replay-to-kafka`` (kafka-python), ``fedrca publish-params``
(kafka-python) and a ``fedrca run`` worker (aiokafka: consumer group, transactional
producers, the params follower) all work; a wrong password or a missing one is refused
with one clear line.
"""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from tools.cluster import Cluster, own_broker, site_config

from fedrca.config import load_config
from fedrca.connectors.kafka import KafkaOptions, read_topic
from tests.kafka_broker import unique_name, wait_until

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
TRAIN = REPO / "data" / "tep" / "d00.dat"
FAULT = REPO / "data" / "tep" / "d04_te.dat"
FEDRCA = [sys.executable, "-m", "fedrca.cli"]
USER = "fedrca-plant"
PASSWORD_ENV = "FEDRCA_TEST_KAFKA_PASSWORD"


@dataclass(frozen=True)
class ScramBroker:
    sasl_bootstrap: str
    password: str


@pytest.fixture(scope="module")
def scram_broker(tmp_path_factory, kafka_broker) -> Iterator[ScramBroker]:
    # kafka_broker: the jars and Java are checked (and fetched) by the shared fixture first
    password = uuid.uuid4().hex
    with own_broker(tmp_path_factory.mktemp("scram-broker"), "--scram", f"{USER}={password}") as state:
        yield ScramBroker(state["sasl_bootstrap"], password)


def _secured_config(tmp: Path) -> Path:
    path = site_config(tmp, unique_name("sec"))
    with path.open("a", encoding="utf-8") as f:
        f.write(
            "kafka:\n"
            "  security_protocol: SASL_PLAINTEXT\n"
            "  sasl_mechanism: SCRAM-SHA-256\n"
            f"  sasl_username: {USER}\n"
            f"  sasl_password_env: {PASSWORD_ENV}\n"
        )
    return path


def test_every_fedrca_client_authenticates_with_scram(scram_broker, tmp_path, monkeypatch):
    monkeypatch.setenv(PASSWORD_ENV, scram_broker.password)
    config_path = _secured_config(tmp_path)
    config = load_config(config_path)
    options = KafkaOptions.from_settings(config.kafka)
    bootstrap = scram_broker.sasl_bootstrap
    broker = ["--broker", f"kafka://{bootstrap}"]
    params = tmp_path / "params"
    subprocess.run(
        [*FEDRCA, "train", "--config", str(config_path), "--data", str(TRAIN), "--out", str(params), "--quiet"],
        check=True,
        capture_output=True,
        cwd=REPO,
    )
    # kafka-python: the artifacts and the sensor messages
    published = subprocess.run(
        [*FEDRCA, "publish-params", "--config", str(config_path), "--params", str(params), *broker],
        capture_output=True,
        text=True,
        cwd=REPO,
        check=False,
    )
    assert published.returncode == 0, published.stderr
    replayed = subprocess.run(
        [*FEDRCA, "replay-to-kafka", "--config", str(config_path), "--input", str(FAULT), *broker, "--stop", "40"],
        capture_output=True,
        text=True,
        cwd=REPO,
        check=False,
    )
    assert replayed.returncode == 0, replayed.stderr
    assert "replayed 40 rows x 5 plants" in replayed.stdout
    # aiokafka: a worker with both roles (consumer groups, one transactional producer per partition,
    # the params follower) over the same authenticated listener
    cluster = Cluster(config_path, bootstrap, TRAIN, tmp_path)
    cluster.add("secure", "plants,rca,params", ["--allowed-lateness", "100"])
    try:

        def flags_in() -> bool:
            keys = {(f["plant"], f["seq"]) for f in map(json.loads, _values(bootstrap, config.topic("flags"), options))}
            return keys == {(p, t) for p in config.plant_names for t in range(40)}

        try:
            wait_until(flags_in, 240, "the worker's flags of 40 rows x 5 plants", interval=1.0)
        except BaseException:
            print(cluster.diagnostics())
            raise
        versions = {json.loads(v)["model_version"] for v in _values(bootstrap, config.topic("flags"), options)}
        assert versions != {"proprietary"}, "the published artifacts were read over SASL too"
    finally:
        cluster.stop_all()


def _values(bootstrap: str, topic: str, options: KafkaOptions) -> list[bytes]:
    return [r.value for r in read_topic(bootstrap, topic, timeout=30, options=options)]


def test_a_wrong_password_is_one_clear_line(scram_broker, tmp_path, monkeypatch):
    monkeypatch.setenv(PASSWORD_ENV, "not-" + scram_broker.password)
    config_path = _secured_config(tmp_path)
    proc = subprocess.run(
        [*FEDRCA, "replay-to-kafka", "--config", str(config_path), "--input", str(FAULT),
         "--broker", f"kafka://{scram_broker.sasl_bootstrap}", "--stop", "5"],
        capture_output=True, text=True, cwd=REPO, check=False, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "fedrca replay-to-kafka" in lines[0], proc.stderr


def test_a_missing_password_names_the_variable(tmp_path, monkeypatch):
    monkeypatch.delenv(PASSWORD_ENV, raising=False)
    config_path = _secured_config(tmp_path)
    proc = subprocess.run(
        [*FEDRCA, "replay-to-kafka", "--config", str(config_path), "--input", str(FAULT),
         "--broker", "kafka://127.0.0.1:9", "--stop", "5"],
        capture_output=True, text=True, cwd=REPO, check=False, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 2
    assert PASSWORD_ENV in proc.stderr and "kafka.sasl_password_env" in proc.stderr
    assert "Traceback" not in proc.stderr
