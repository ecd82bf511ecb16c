"""Kafka tooling and replay benchmark (``make bench``).

* starts (or reuses) the test broker with ``tools/kafka/broker.py`` and reports how long it took;
* the plain kafka-python produce/consume loop (``kafka_peer.run_peer``): end-to-end messages/s
  and produce->consume latency p50/p99 at a fixed offered load — the ceiling the streams
  benchmark compares its workers against;
* fedrca's replay (``fedrca.connectors.replay.replay`` into ``KafkaSink``, as fast as possible)
  of TEP rows into the five sensors topics, next to the peer's producer loop in the same run.

Target: the replay sends at least half the rate of the plain producer loop (it builds the
contract messages from a data frame and checks every acknowledgement; the peer only sends).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
SCRIPT = REPO / "tools" / "kafka" / "broker.py"

PEER_MESSAGES = 50_000
OFFERED_RATE = 1000.0
PACED_SECONDS = 5.0
REPLAY_ROWS = 10_000  # x 5 plants = 50k messages
TARGET_RATIO = 0.5
SMOKE = {"PEER_MESSAGES": 2_000, "PACED_SECONDS": 1.0, "REPLAY_ROWS": 400}  # bench/run.py --smoke


def start_broker() -> tuple[str, dict[str, object], float]:
    began = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "start", "--lease", str(os.getpid()), "--json"],
        capture_output=True,
        text=True,
        timeout=1200,
        check=False,
    )
    if proc.returncode != 0:
        raise SystemExit(f"bench_kafka: could not start the broker:\n{proc.stderr}")
    state = json.loads(proc.stdout.strip().splitlines()[-1])
    return str(state["bootstrap"]), state, time.perf_counter() - began


def release_broker() -> None:
    subprocess.run(
        [sys.executable, str(SCRIPT), "release", "--lease", str(os.getpid())],
        capture_output=True,
        timeout=120,
        check=False,
    )


def replay_rate(bootstrap: str) -> tuple[float, int, int]:
    """Replay REPLAY_ROWS TEP rows asap into fresh sensors topics; (msg/s, sent, counted in topics)."""
    import uuid

    from kafka import KafkaConsumer, TopicPartition

    from fedrca.config import load_config
    from fedrca.connectors.kafka import KafkaSink, ensure_site_topics
    from fedrca.connectors.replay import replay
    from fedrca.datasets import Dataset
    from fedrca.datasets.tep import load_tep

    config = load_config(REPO / "config" / "tep.yaml")
    config = config.model_copy(update={"site": f"bench{uuid.uuid4().hex[:8]}"})
    frame = load_tep(REPO / "data" / "tep" / "d01_te.dat")
    reps = -(-REPLAY_ROWS // len(frame))
    tiled = pd.DataFrame(np.tile(frame.to_numpy(), (reps, 1))[:REPLAY_ROWS], columns=frame.columns)
    data = Dataset(tiled, np.arange(REPLAY_ROWS) * 180.0, None, "d01_te.dat (tiled)", "tep")
    ensure_site_topics(bootstrap, config)  # one partition per topic (connectors/names.py)
    groups = {p.name: p.sensors for p in config.plants}
    sink = KafkaSink(bootstrap, config)
    started = time.perf_counter()
    stats = replay(data, groups, sink, site=config.site)  # flushes: every message acknowledged
    seconds = time.perf_counter() - started
    sink.close()
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=None)
    tps = [TopicPartition(config.topic("sensors", plant=p), 0) for p in config.plant_names]
    counted = sum(consumer.end_offsets(tps).values())
    consumer.close()
    return stats.messages / seconds, stats.messages, counted


def main() -> int:
    """Print broker start time, the peer figures and the replay rate; 0 when the target is met."""
    sys.path.insert(0, str(HERE))
    import logging

    from kafka_peer import run_peer

    logging.getLogger("kafka").setLevel(logging.ERROR)
    bootstrap, state, took = start_broker()
    how = "reused the running broker"
    if not state["reused"]:
        how = f"started a new broker (format + start until it answers: {state['start_seconds']} s)"
    print(f"broker {bootstrap}: {how}; start command took {took:.2f} s")
    try:
        peer = run_peer(bootstrap, messages=PEER_MESSAGES, rate=OFFERED_RATE, seconds=PACED_SECONDS)
        for line in peer.lines():
            print(line)
        rate, sent, counted = replay_rate(bootstrap)
    finally:
        release_broker()
    ratio = rate / peer.produce_rate
    print(
        f"fedrca replay -> KafkaSink (TEP rows, 5 plants): {rate:>10,.0f} msg/s ({sent:,} sent, {counted:,} in the "
        f"topics) = {ratio:.2f}x the kafka-python producer loop (target >= {TARGET_RATIO}x)"
    )
    if counted != sent:
        print(f"bench_kafka: {sent - counted} replayed messages are missing from the topics")
        return 1
    return 0 if ratio >= TARGET_RATIO else 1


if __name__ == "__main__":
    sys.exit(main())
