"""A live simulated plant on the real broker: ``fedrca simulate --to kafka://`` feeding a ``fedrca run`` worker.

The worker (plants, params and RCA roles, ``config/tep-sim.yaml``) is fitted on a simulated
nominal run; the simulator then streams a run with IDV 4 (reactor cooling water inlet
temperature step) switched on at 1 h, paced at x3000, into the sensor topics. The verdicts
after the onset name the reactor, none before it names a root.
"""

from __future__ import annotations

import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
from tools.cluster import Cluster, json_records, site_config

from fedrca.connectors.simulator import SimulationSpec, cached_run, write_tep_dat
from tests.kafka_broker import KafkaBroker, unique_name, wait_until

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
ONSET_H, HOURS = 1.0, 6.0
ONSET = round(ONSET_H * 20)  # 3-minute samples: sample k holds the plant at (k + 1) * 3 min


def test_simulated_disturbance_streamed_to_a_worker_is_named_by_its_verdicts(
    kafka_broker: KafkaBroker, tmp_path: Path
) -> None:
    nominal = cached_run(SimulationSpec(hours=25.0, seed=200))  # the worker's nominal data (cached once run)
    assert nominal is not None
    train = write_tep_dat(nominal.values, tmp_path / "nominal.dat")
    config = site_config(tmp_path, unique_name("sim"), base="config/tep-sim.yaml")
    cluster = Cluster(config, kafka_broker.bootstrap, train, tmp_path)
    site = config.stem
    try:
        cluster.add("w1", "plants,params,rca")
        feed = subprocess.run(
            [sys.executable, "-m", "fedrca.cli", "simulate", "--config", str(config), "--hours", str(HOURS),
             "--seed", "7", "--idv", f"4@{ONSET_H:g}", "--to", kafka_broker.url, "--speed", "x3000"],
            capture_output=True, text=True, timeout=600, cwd=REPO, check=False,
        )  # fmt: skip
        assert feed.returncode == 0, feed.stderr
        assert f"streamed {round(HOURS * 20)} samples x 5 plants" in feed.stdout, feed.stdout

        def named() -> list[str]:
            records = json_records(kafka_broker.bootstrap, f"{site}.verdicts")
            return [v["root_cause"] for v in records if v["root_cause"]]

        wait_until(lambda: len(named()) >= 5, 300, "verdicts naming a root cause", interval=1.0)
        verdicts = json_records(kafka_broker.bootstrap, f"{site}.verdicts")
    except BaseException:
        print(cluster.diagnostics())
        raise
    finally:
        cluster.stop_all()
    before = [v for v in verdicts if v["seq"] < ONSET and v["root_cause"]]
    after = Counter(v["root_cause"] for v in verdicts if v["seq"] >= ONSET and v["root_cause"])
    assert not before, f"roots named before the disturbance: {before}"
    assert after.most_common(1)[0][0] == "reactor", after
    assert after["reactor"] >= 0.9 * sum(after.values()), after
