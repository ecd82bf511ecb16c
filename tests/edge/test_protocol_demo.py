"""``fedrca demo --source opcua|mqtt`` whole: the nominal file and a fault file through the protocol, the edge and
Kafka give the files path's verdicts, every one (issue 31, acceptance point 1).

The files path is a twin runtime that replays the same files in the same order: the plants re-baseline on the
nominal file (``drift:`` in config/tep.yaml), so a comparison that replayed the file on the demo's own runtime
first would judge the protocol path's rows with baselines moved by that first pass (0 of 6 nominal verdicts
equal). A few minutes each: ``make exhaustive``; the rows alone are checked in make test
(``test_protocol_demo_mqtt.py``).
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.kafka_broker import KafkaBroker
from tests.mqtt_broker import MqttBroker

pytestmark = [pytest.mark.exhaustive, pytest.mark.kafka]

#: seconds between two served rows. MQTT queues every message: 0.05 s (48 s a file). The OPC UA subscription
#: samples its tags every half period: a row served faster than the loaded event loop turns round can be skipped
#: (its neighbour's values, which the demo refuses as "the machine is too busy"), so OPC UA keeps the demo's
#: default, 0.2 s (192 s a file).
PERIOD = {"opcua": "0.2", "mqtt": "0.05"}


def _demo(tmp_path: Path, *source: str) -> str:
    period = PERIOD[source[1]]
    cmd = [sys.executable, "-m", "fedrca.cli", "demo", *source, "--faults", "04", "--period", period,
           "--metrics-port", "0", "--out", str(tmp_path / "out")]  # fmt: skip
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done.stdout


def _assert_every_verdict_equal(stdout: str) -> None:
    identical = re.findall(r"rows identical to the file: (\w+)", stdout)
    assert identical == ["yes", "yes"], stdout[-3000:]
    line = next(x for x in stdout.splitlines() if x.startswith("verdicts through "))
    counts = re.findall(r"(d\d\d_te\.dat): (\d+)/(\d+)", line)
    assert [name for name, _, _ in counts] == ["d00_te.dat", "d04_te.dat"], line
    for name, agree, total in counts:
        assert agree == total, f"{name}: {agree} of {total} verdicts equal the files path's ({line})"
    assert int(counts[1][2]) > 0, line  # the fault file has verdicts to compare


def test_demo_over_opcua_gives_the_files_verdicts(tmp_path: Path, kafka_broker: KafkaBroker) -> None:
    _assert_every_verdict_equal(_demo(tmp_path, "--source", "opcua", "--broker", kafka_broker.url))


@pytest.mark.mqtt
def test_demo_over_mqtt_gives_the_files_verdicts(
    tmp_path: Path, kafka_broker: KafkaBroker, mqtt_broker: MqttBroker
) -> None:
    out = _demo(tmp_path, "--source", "mqtt", "--broker", kafka_broker.url,
                "--mqtt", mqtt_broker.url)  # fmt: skip
    _assert_every_verdict_equal(out)
