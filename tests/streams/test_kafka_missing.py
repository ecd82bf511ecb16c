"""Data with gaps through the real broker: a `fedrca run` worker publishes the flags and verdicts of `fedrca replay`.

TEP fault 04 as plant data really arrives (``tools.faults.with_gaps``: values missing at
random, a dead sensor per plant, the feed with nothing for three rows) is replayed into
the sensors topics with ``null`` values (``dataset.missing: allow``). No sensor message is
dead-lettered; every (plant, seq) flag is on the flags topic once, with the bits and the
``degraded`` mark of ``fedrca replay``'s pipeline on the same file, and so is every
verdict. ``tools/faults.py --gaps`` repeats this under worker kills and broker restarts.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
from tools.cluster import Cluster, consumed_everything, group_assignment, json_records, replay_file, site_config
from tools.faults import with_gaps

from fedrca.application.site import prepare_site, run_pipeline
from fedrca.config import load_config
from fedrca.connectors.kafka import ensure_site_topics, read_topic
from fedrca.contracts import Verdict
from fedrca.datasets.loader import load_frame
from tests.kafka_broker import unique_name, wait_until

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
TRAIN = REPO / "data" / "tep" / "d00.dat"
FAULT = REPO / "data" / "tep" / "d04_te.dat"
ROWS = 400


def test_a_worker_on_data_with_gaps_publishes_what_replay_computes(kafka_broker, tmp_path):
    bootstrap = kafka_broker.bootstrap
    config_path = site_config(tmp_path, unique_name("gap"), missing=True)
    config = load_config(config_path)
    plants = {p.name: list(p.sensors) for p in config.plants}
    gappy = with_gaps(FAULT, tmp_path / "d04_te.dat", plants, dark=range(200, 203))
    frame = load_frame(config, gappy).iloc[:ROWS].reset_index(drop=True)
    assert frame.isna().to_numpy().mean() > 0.05
    offline = run_pipeline(prepare_site(config, TRAIN), frame)  # fedrca replay's pipeline

    ensure_site_topics(bootstrap, config)
    cluster = Cluster(config_path, bootstrap, TRAIN, tmp_path)
    cluster.add("all", "plants,rca")
    try:
        for group in (f"fedrca-{config.site}-plants", f"fedrca-{config.site}-rca"):
            wait_until(lambda g=group: group_assignment(bootstrap, g) is not None, 180, f"the worker in {group}")
        replay_file(config, bootstrap, gappy, "asap", stop=ROWS)
        flags_topic = config.topic("flags")
        wait_until(lambda: len(json_records(bootstrap, flags_topic)) >= ROWS * len(plants), 180, "every flag", 0.5)
        wait_until(
            lambda: consumed_everything(bootstrap, f"fedrca-{config.site}-rca", flags_topic), 120, "the RCA", 0.5
        )
        flags = json_records(bootstrap, flags_topic)
        verdicts = json_records(bootstrap, config.topic("verdicts"))
        dead = [list(read_topic(bootstrap, config.topic("plant_deadletter", plant=p))) for p in plants]
    except BaseException:
        print(cluster.diagnostics())
        raise
    finally:
        cluster.stop_all()

    assert not any(dead), "a message with null values was dead-lettered"
    keys = Counter((f["plant"], f["seq"]) for f in flags)
    assert set(keys) == {(p, t) for p in plants for t in range(ROWS)} and max(keys.values()) == 1
    got = {(f["plant"], f["seq"]): (f["zc"], f["za"], bool(f.get("degraded"))) for f in flags}
    want = {
        (p, t): (int(r.zc_pub[t]), int(r.za_pub[t]), bool(r.degraded[t]))
        for p, r in offline.results.items()
        for t in range(ROWS)
    }
    assert got == want
    first = next(iter(plants))
    assert all(got[(first, t)][2] for t in range(200, 203)), "the feed's dark rows are degraded"
    assert Counter(v["id"] for v in verdicts) == Counter(v.id for v in offline.verdicts)
    by_id = {v["id"]: Verdict.from_dict(v) for v in verdicts}
    assert all(by_id[v.id] == v for v in offline.verdicts)
