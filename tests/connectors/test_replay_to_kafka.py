"""``fedrca replay-to-kafka`` end to end against the real broker (TEP, HAI with rules + label file, every sample)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml

from fedrca.config import load_config, resolve_plants
from fedrca.connectors.kafka import read_topic
from fedrca.datasets import load_dataset
from fedrca.datasets.tep import load_tep
from tests.kafka_broker import unique_name

REPO = Path(__file__).resolve().parents[2]
HAI_2305 = REPO / "data" / "samples" / "hai" / "hai-23.05-test1.csv"
HAI_2305_LABELS = REPO / "data" / "samples" / "hai" / "hai-23.05-label-test1.csv"


def config_copy(tmp_path: Path, name: str) -> Path:
    """The shipped configuration under a fresh site name (fresh topics)."""
    data = yaml.safe_load((REPO / "config" / name).read_text())
    data["site"] = unique_name(data["site"])
    path = tmp_path / name
    path.write_text(yaml.safe_dump(data))
    return path


def fedrca(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "fedrca.cli", *args], capture_output=True, text=True, timeout=300, check=False
    )


def messages(bootstrap: str, topic: str) -> list[dict]:
    return [json.loads(r.value) for r in read_topic(bootstrap, topic, timeout=60)]


@pytest.mark.kafka
def test_tep_file_replayed_into_the_sensors_topics(kafka_broker, tmp_path, tep_dir):
    config_path = config_copy(tmp_path, "tep.yaml")
    cfg = load_config(config_path)
    data = tep_dir / "d04_te.dat"
    proc = fedrca(
        "replay-to-kafka", "--config", str(config_path), "--input", str(data), "--broker", kafka_broker.url,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert f"replayed 960 rows x 5 plants = 4800 messages to {cfg.site}.sensors.*" in proc.stdout
    frame = load_tep(data)
    for plant in cfg.plants:
        got = messages(kafka_broker.bootstrap, cfg.topic("sensors", plant=plant.name))
        assert len(got) == 960
        assert [m["seq"] for m in got] == list(range(960))
        assert {(m["site"], m["plant"]) for m in got} == {(cfg.site, plant.name)}
        assert [m["ts"] for m in got] == [seq * 180.0 for seq in range(960)]
        # values in the plant's configured column order, bit for bit
        np.testing.assert_array_equal(np.array([m["values"] for m in got]), frame[plant.sensors].to_numpy())


@pytest.mark.kafka
def test_hai_rules_label_file_and_row_range(kafka_broker, tmp_path):
    config_path = config_copy(tmp_path, "hai.yaml")
    proc = fedrca(
        "replay-to-kafka", "--config", str(config_path), "--input", str(HAI_2305), "--labels", str(HAI_2305_LABELS),
        "--broker", kafka_broker.url, "--start", "10", "--stop", "40", "--speed", "x1000",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert "replayed 30 rows x 4 plants = 120 messages" in proc.stdout
    cfg = load_config(config_path)
    data = load_dataset(cfg.dataset, HAI_2305, labels_path=HAI_2305_LABELS)  # KST times, as replayed
    cfg = resolve_plants(cfg, data.columns)
    for plant, prefix in zip(cfg.plants, (("P1_", "x10"), "P2_", "P3_", "P4_")):
        columns = [c for c in data.columns if c.startswith(prefix)]
        assert plant.sensors == columns
        got = messages(kafka_broker.bootstrap, cfg.topic("sensors", plant=plant.name))
        assert [m["seq"] for m in got] == list(range(10, 40))
        assert [m["ts"] for m in got] == data.timestamps[10:40].tolist()
        np.testing.assert_array_equal(np.array([m["values"] for m in got]), data.frame[columns].to_numpy()[10:40])


def test_replay_to_kafka_input_errors_are_one_clear_line(tmp_path):
    # the file is read before the broker is contacted: no broker needed for these
    config_path = config_copy(tmp_path, "hai.yaml")
    proc = fedrca(
        "replay-to-kafka", "--config", str(config_path), "--input", str(tmp_path / "nope.csv"),
        "--broker", "kafka://127.0.0.1:1",
    )  # fmt: skip
    assert proc.returncode == 2
    assert proc.stderr.strip() == (
        f"fedrca replay-to-kafka: error: {tmp_path / 'nope.csv'}: no such file; "
        "pass the path of a HAI CSV (first column time/timestamp) file"
    )
    proc = fedrca(
        "replay-to-kafka", "--config", str(config_path), "--input", str(HAI_2305), "--broker", "kafka://x:1",
        "--speed", "warp",
    )  # fmt: skip
    assert proc.returncode == 2
    assert "unknown replay speed 'warp'; use asap, realtime, or xN such as x60" in proc.stderr
