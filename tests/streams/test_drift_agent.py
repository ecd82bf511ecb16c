"""The plant agent across a refresh and a restart, without a broker (the fast twin of test_drift_kafka.py).

The real :class:`~fedrca.streams.agents.PlantAgent` processes TEP rows in batches and returns what
the transactional loop would commit: flags, history records and the state. The worker is "killed"
after a refresh (its runtime dropped); a new runtime fitted on the same nominal data takes the
committed records back (``load`` reads the compacted history topic: here the newest record per key)
and continues. Every flag (bits and baseline version) must be those of ``fedrca replay``
(``run_pipeline``) on the same rows, and the restored worker must refresh where replay does.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from fedrca.application.site import plant_runtime, prepare_site, run_pipeline
from fedrca.config import load_config
from fedrca.connectors.names import SiteNames
from fedrca.contracts import SensorMessage
from fedrca.datasets.loader import load_frame, plant_frames
from fedrca.streams.agents import PlantAgent
from fedrca.streams.loop import InputRecord

REPO = Path(__file__).resolve().parents[2]
TRAIN = REPO / "data" / "tep" / "d00.dat"
STREAM = REPO / "data" / "tep" / "d00_te.dat"
ROWS = 600
DRIFT = {"enabled": True, "every": 150, "window": 150, "history": 600, "min_rows": 60}


@pytest.fixture(scope="module")
def config_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    data = yaml.safe_load((REPO / "config" / "tep.yaml").read_text(encoding="utf-8"))
    data["drift"] = DRIFT
    # the reactor alone: one plant's worker is what restarts
    data["plants"] = [p for p in data["plants"] if p["name"] == "reactor"]
    data["rca"]["unobserved_entry"] = []
    data["rca"].pop("calibration", None)  # the shipped map is for the five TEP plants
    data.pop("edge", None)
    path = tmp_path_factory.mktemp("drift-agent") / "tep-drift.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    return path


def _records(config: Any, plant: str, values: Any, lo: int, hi: int) -> list[InputRecord]:
    return [
        InputRecord(t, plant.encode(), SensorMessage(config.site, plant, 180.0 * t, t, values[t]).encode(), 0)
        for t in range(lo, hi)
    ]


def test_a_restarted_plant_worker_continues_the_flags_and_refreshes_of_replay(config_path: Path) -> None:
    config = load_config(config_path)
    plant = "reactor"
    frame = load_frame(config, STREAM).iloc[:ROWS]
    values = plant_frames(config, frame)[plant].Y
    site = prepare_site(config, TRAIN)
    expected = run_pipeline(site, frame)
    replay_bits = list(zip(expected.results[plant].zc_pub.tolist(), expected.results[plant].za_pub.tolist(),
                           strict=True))  # fmt: skip
    changes = [r for r in site.keepers[plant].reports if r.outcome in ("applied", "limited")]
    assert {r.seq for r in changes} == {150, 300, 450}

    names = SiteNames(config)
    topic: dict[bytes, bytes] = {}  # the plant's compacted history topic: the newest value per key
    flags: list[dict[str, Any]] = []
    state: bytes | None = None
    cut = 333  # after two refreshes, inside a batch's rows
    for lo, hi in ((0, 100), (100, 170), (170, cut), (cut, 450), (450, ROWS)):
        if lo in (0, cut):  # a worker takes the partition: a fresh runtime, the committed records read back
            runtime = plant_runtime(config, TRAIN, plants=[plant])
            agent = PlantAgent(runtime, plant, names)
            agent._history = dict(topic)  # what load() reads from the topic (committed records only)
            agent.restore(state)
        out = agent.process(_records(config, plant, values, lo, hi))
        for record in out.outputs:
            if record.topic == names.history(plant):
                topic[record.key or b""] = record.value
            elif record.topic == config.topic("flags"):
                flags.append(json.loads(record.value))
        state = out.state
    assert [f["seq"] for f in flags] == list(range(ROWS))
    assert [(f["zc"], f["za"]) for f in flags] == replay_bits
    # the version each flag carries is the baseline replay scored the row with
    version = {f["seq"]: f["model_version"] for f in flags}
    for r in changes:
        assert version[r.seq] == f"proprietary+b{r.version}"
        assert version[r.seq - 1] == ("proprietary" if r.version == 1 else f"proprietary+b{r.version - 1}")
    assert any(k.startswith(b"baseline/") for k in topic) and any(k.startswith(b"rows/") for k in topic)
