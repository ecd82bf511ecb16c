"""``fedrca demo --source mqtt``'s protocol path: a file's rows published to mosquitto (JSON per tag and
Sparkplug B), read by the edge into Kafka and read back from the sensor topics: identical rows."""

from __future__ import annotations

import numpy as np
import pytest

from fedrca.application.protocol_demo import through_mqtt
from fedrca.cli.bundled import bundled_config, bundled_data_dir
from fedrca.config import load_config
from fedrca.datasets.loader import load_frame, plant_frames
from fedrca.datasets.tep import TEP_COLUMNS
from tests.kafka_broker import KafkaBroker
from tests.mqtt_broker import MqttBroker

pytestmark = [pytest.mark.mqtt, pytest.mark.kafka]
ROWS = 12


# Sparkplug's rows are checked without Kafka in make test (tests/edge/test_mqtt_plant.py): here in make exhaustive
SPARKPLUG = pytest.param(True, marks=pytest.mark.exhaustive, id="sparkplug")


@pytest.mark.parametrize("sparkplug", [pytest.param(False, id="json"), SPARKPLUG])
def test_rows_through_mqtt_edge_and_kafka_are_the_file_rows(
    mqtt_broker: MqttBroker, kafka_broker: KafkaBroker, sparkplug: bool
) -> None:
    config = load_config(bundled_config("tep.yaml"))
    path = bundled_data_dir() / "tep" / "d04_te.dat"
    frame = load_frame(config, path).iloc[:ROWS]
    expected = {p: d.Y for p, d in plant_frames(config, frame, str(path)).items()}
    table = frame[list(TEP_COLUMNS)].to_numpy(dtype=np.float64)
    # a row waits 3 s for late updates: a machine busy with other jobs may stall this process that long
    served = through_mqtt(config, list(TEP_COLUMNS), table, kafka_broker.bootstrap, 0.1, mqtt_broker.url,
                          sparkplug=sparkplug, grace=3.0)  # fmt: skip
    assert served.rows_published >= ROWS * len(config.plants)  # and the rows on the clock before and after
    for plant in config.plant_names:
        differ = [k for k in range(ROWS) if not np.array_equal(served.values[plant][k], expected[plant][k])]
        assert differ == [], (plant, differ, served.late_updates)
