#!/usr/bin/env python3
"""Soak test of the live pipeline: memory, consumer lag and latency over a long run.

Starts (or reuses, under a lease) the broker of ``tools/kafka/broker.py``, a fresh site
(``config/tep.yaml`` under a new name: own topics and consumer groups), one plant worker
(``fedrca run --roles plants,params``, fitted on ``data/tep/d00.dat``) and one RCA worker
(``--roles rca``), then replays the TEP fault files 01, 04, 05, 06 over and over (``seq``
continuing, so the RCA sees one fault episode after the other and keeps issuing
verdicts) into the sensors topics at ``--rate`` sensor messages per second (5 plants per
row) on an absolute schedule, for ``--minutes``. Every ``--every`` seconds it prints and
records one line:

* **RSS** of each worker process (``/proc/<pid>/status`` VmRSS, MiB);
* **consumer lag** of each worker's group: end offsets of its input topics minus the
  group's committed offsets (records), and how many records behind the sensor stream the
  plants' committed flags are;
* **latency** of the interval: p50 / p99 of produce -> verdict (a ``read_committed``
  consumer's receive time minus the send time of the last sensor message of the row the
  verdict was issued at) and of produce -> flag committed (the flag's create time);
* the messages sent and verdicts received in the interval.

At the end: the first and last quarter's medians side by side and the slope of RSS per
hour (least squares), so "flat or not" is one line. ``--json FILE`` writes every interval.

    tools/soak.py --minutes 60 --rate 1000 --json soak.json     # the hour of docs/streams.md
    tools/soak.py --minutes 2 --rate 1000 --every 10            # a quick look

Exit status 0 when the run completed (a worker that died or a lag that never came back
is reported, and gives 1), 2 on a setup error.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections import deque
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parents[1]
BROKER = REPO / "tools" / "kafka" / "broker.py"
TRAIN = REPO / "data" / "tep" / "d00.dat"
FAULTS = ("01", "04", "05", "06")
PLANTS_PER_ROW = 5  # config/tep.yaml


class Worker:
    """One ``fedrca run`` process (log in the work directory)."""

    def __init__(self, name: str, config: Path, bootstrap: str, roles: str, workdir: Path) -> None:
        self.name = name
        self.log = workdir / f"{name}.log"
        command = [
            sys.executable,
            "-m",
            "fedrca.cli",
            "run",
            "--config",
            str(config),
            "--broker",
            f"kafka://{bootstrap}",
            "--train",
            str(TRAIN),
            "--roles",
            roles,
            "--worker-name",
            name,
            "--data-dir",
            str(workdir / "state"),
        ]
        with open(self.log, "wb") as out:
            self.proc = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, cwd=REPO)

    def rss_mib(self) -> float:
        """Resident memory (MiB), NaN once the process is gone."""
        try:
            for text in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
                if text.startswith("VmRSS:"):
                    return int(text.split()[1]) / 1024
        except OSError:
            pass
        return float("nan")

    def alive(self) -> bool:
        return self.proc.poll() is None

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=30)


def start_broker() -> str:
    proc = subprocess.run(
        [sys.executable, str(BROKER), "start", "--lease", str(os.getpid()), "--json"],
        capture_output=True,
        text=True,
        timeout=1200,
        check=False,
    )
    if proc.returncode != 0:
        raise SystemExit(f"soak: could not start the broker:\n{proc.stderr}")
    return str(json.loads(proc.stdout.strip().splitlines()[-1])["bootstrap"])


def release_broker() -> None:
    subprocess.run([sys.executable, str(BROKER), "release", "--lease", str(os.getpid())], timeout=120, check=False)


def site_config(workdir: Path, site: str) -> Path:
    text = (REPO / "config" / "tep.yaml").read_text(encoding="utf-8")
    lines = [f"site: {site}" if line.startswith("site:") else line for line in text.splitlines()]
    path = workdir / f"{site}.yaml"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


class Lag:
    """Committed offsets of a group against the end offsets of its input topics (one admin client)."""

    def __init__(self, bootstrap: str, group: str, topics: list[str]) -> None:
        from kafka import KafkaAdminClient, KafkaConsumer, TopicPartition

        self.admin = KafkaAdminClient(bootstrap_servers=bootstrap, client_id="fedrca-soak")
        self.consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=None)
        self.group = group
        self.tps = [TopicPartition(t, p) for t in topics for p in self.consumer.partitions_for_topic(t) or ()]

    def records(self) -> int:
        """Records of the input not yet committed by the group (the transactional markers of a
        transactional input count too, at most one per committed batch); -1 until the group has
        committed an offset for every partition."""
        from kafka.errors import KafkaError

        try:
            offsets = self.admin.list_group_offsets(self.group).get(self.group, {})
        except KafkaError:
            return -1
        committed = {tp: m.offset for tp, m in offsets.items() if m is not None and m.offset >= 0}
        if any(tp not in committed for tp in self.tps):
            return -1
        ends = self.consumer.end_offsets(self.tps)
        return int(sum(max(0, ends[tp] - committed[tp]) for tp in self.tps))

    def close(self) -> None:
        self.admin.close()
        self.consumer.close()


class Reader(threading.Thread):
    """Reads a topic's committed records as they come; keeps (receive ns, decoded) of the unclaimed ones."""

    def __init__(self, bootstrap: str, topic: str, from_end: bool) -> None:
        super().__init__(daemon=True)
        from kafka import KafkaConsumer, TopicPartition

        self.consumer = KafkaConsumer(
            bootstrap_servers=bootstrap,
            group_id=None,
            enable_auto_commit=False,
            fetch_max_wait_ms=10,
            isolation_level="read_committed",
        )
        self.tp = TopicPartition(topic, 0)
        self.consumer.assign([self.tp])
        if from_end:
            self.consumer.seek_to_end(self.tp)
        else:
            self.consumer.seek_to_beginning(self.tp)
        self.consumer.position(self.tp)
        self.items: deque[tuple[int, int, dict[str, Any]]] = deque()  # (receive ns, create ms, record)
        self.stopping = threading.Event()

    def run(self) -> None:
        while not self.stopping.is_set():
            for records in self.consumer.poll(timeout_ms=50).values():
                now = time.time_ns()
                for r in records:
                    self.items.append((now, r.timestamp, json.loads(r.value)))
        self.consumer.close()

    def take(self) -> list[tuple[int, int, dict[str, Any]]]:
        out = []
        while self.items:
            out.append(self.items.popleft())
        return out


def encode_rows(site: str, plants: dict[str, list[str]]) -> list[list[tuple[str, list[float]]]]:
    """The fault files' rows as (plant, values) per row, values rounded as in the TEP files."""
    import pandas as pd

    from fedrca.datasets.tep import load_tep

    columns = [c for cols in plants.values() for c in cols]
    frame = pd.concat([load_tep(REPO / "data" / "tep" / f"d{n}_te.dat")[columns] for n in FAULTS])
    arrays = {p: np.round(frame[cols].to_numpy(dtype=np.float64), 5).tolist() for p, cols in plants.items()}
    return [[(p, arrays[p][i]) for p in plants] for i in range(len(frame))]


def quantiles(values: list[float]) -> tuple[float, float]:
    if not values:
        return float("nan"), float("nan")
    arr = np.asarray(values)
    return float(np.percentile(arr, 50)), float(np.percentile(arr, 99))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=60.0, help="how long to stream (default 60)")
    parser.add_argument("--rate", type=float, default=1000.0, help="sensor messages per second (default 1000)")
    parser.add_argument("--every", type=float, default=60.0, help="seconds per reported interval (default 60)")
    parser.add_argument("--json", type=Path, default=None, help="write every interval to this file (JSON lines)")
    parser.add_argument("--keep", type=Path, default=None, help="copy the workers' logs to this directory")
    args = parser.parse_args(argv)
    if args.minutes <= 0 or args.rate <= 0 or args.every <= 0:
        print("soak: --minutes, --rate and --every must be positive", file=sys.stderr)
        return 2
    sys.path.insert(0, str(REPO / "src"))
    import logging

    from kafka import KafkaProducer

    from fedrca.config import load_config
    from fedrca.connectors.kafka import ensure_site_topics

    logging.getLogger("kafka").setLevel(logging.ERROR)
    bootstrap = start_broker()
    workers: list[Worker] = []
    readers: list[Reader] = []
    lags: list[Lag] = []
    intervals: list[dict[str, Any]] = []
    problem = None
    try:
        with tempfile.TemporaryDirectory(prefix="fedrca-soak-") as tmp:
            workdir = Path(tmp)
            site = f"soak{uuid.uuid4().hex[:8]}"
            config_path = site_config(workdir, site)
            config = load_config(config_path)
            ensure_site_topics(bootstrap, config)
            plants = {p.name: list(p.sensors) for p in config.plants}
            topics = {p: config.topic("sensors", plant=p) for p in plants}
            keys = {p: p.encode() for p in plants}
            rows = encode_rows(site, plants)
            workers = [
                Worker("plants", config_path, bootstrap, "plants,params", workdir),
                Worker("rca", config_path, bootstrap, "rca", workdir),
            ]
            readers = [
                Reader(bootstrap, config.topic("verdicts"), True),
                Reader(bootstrap, config.topic("flags"), False),
            ]
            for reader in readers:
                reader.start()
            lags = [
                Lag(bootstrap, f"fedrca-{site}-plants", sorted(topics.values())),
                Lag(bootstrap, f"fedrca-{site}-rca", [config.topic("flags")]),
            ]
            producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=5, batch_size=64 * 1024)
            print(
                f"soak: broker {bootstrap}, site {site}, {args.rate:,.0f} sensor messages/s for {args.minutes:g} min, "
                f"a line every {args.every:g} s; waiting for the workers to start",
                flush=True,
            )
            # the workers fit their detectors and join their groups: send nothing until both read
            deadline = time.monotonic() + 300
            while lags[0].records() < 0 or lags[1].records() < 0:
                if time.monotonic() > deadline or not all(w.alive() for w in workers):
                    raise SystemExit("soak: the workers did not start (see their logs with --keep)")
                # an unpaced first row: both groups commit an offset once they process it
                for p, values in rows[0]:
                    raw = {"site": site, "plant": p, "ts": 0.0, "seq": 0, "values": values}
                    producer.send(topics[p], key=keys[p], value=json.dumps(raw, separators=(",", ":")).encode())
                producer.flush()
                time.sleep(2.0)
            # the send time of every row (8 bytes a row): a verdict of a worker far behind still finds its row
            rows_total = int(args.rate / PLANTS_PER_ROW * 60.0 * args.minutes) + 2
            sent_ns = np.zeros(rows_total + 1, dtype=np.int64)
            period = PLANTS_PER_ROW / args.rate
            seq = 1
            t0 = time.monotonic()
            end = t0 + 60.0 * args.minutes
            next_report = t0 + args.every
            header = (
                f"{'minute':>7}{'sent':>8}{'verdicts':>9}{'verdict p50':>12}{'p99 ms':>8}{'flag p50':>9}{'p99 ms':>8}"
                f"{'plants RSS':>11}{'rca RSS':>9}{'plant lag':>10}{'rca lag':>8}"
            )
            print(header, flush=True)
            sent_in = 0
            out = None if args.json is None else args.json.open("w", encoding="utf-8")
            while True:
                now = time.monotonic()
                if now >= next_report or now >= end:
                    verdict_ms = [
                        (rcv - int(sent_ns[v["seq"]])) / 1e6
                        for rcv, _, v in readers[0].take()
                        if 0 < v["seq"] < len(sent_ns) and sent_ns[v["seq"]]
                    ]
                    flag_ms = [
                        ts - int(sent_ns[f["seq"]]) / 1e6
                        for _, ts, f in readers[1].take()
                        if 0 < f["seq"] < len(sent_ns) and sent_ns[f["seq"]]
                    ]
                    point = {
                        "minute": (now - t0) / 60.0,
                        "sent": sent_in,
                        "verdicts": len(verdict_ms),
                        "verdict_ms": quantiles(verdict_ms),
                        "flag_ms": quantiles(flag_ms),
                        "rss_mib": {w.name: w.rss_mib() for w in workers},
                        "lag": {"plants": lags[0].records(), "rca": lags[1].records()},
                        "load": os.getloadavg()[0],
                    }
                    intervals.append(point)
                    if out is not None:
                        out.write(json.dumps(point) + "\n")
                        out.flush()
                    print(
                        f"{point['minute']:>7.1f}{sent_in:>8}{len(verdict_ms):>9}{point['verdict_ms'][0]:>12.1f}"
                        f"{point['verdict_ms'][1]:>8.1f}{point['flag_ms'][0]:>9.1f}{point['flag_ms'][1]:>8.1f}"
                        f"{point['rss_mib']['plants']:>11.1f}{point['rss_mib']['rca']:>9.1f}"
                        f"{point['lag']['plants']:>10}{point['lag']['rca']:>8}",
                        flush=True,
                    )
                    sent_in = 0
                    next_report += args.every
                    if not all(w.alive() for w in workers):
                        problem = "a worker exited: " + ", ".join(w.name for w in workers if not w.alive())
                        break
                    if now >= end:
                        break
                delay = t0 + (seq - 1) * period - time.monotonic()
                if delay > 0:
                    time.sleep(min(delay, max(0.0, next_report - time.monotonic())))
                    continue
                if seq >= len(sent_ns):
                    break  # the rows of the planned duration are sent
                row = rows[(seq - 1) % len(rows)]
                for i, (p, values) in enumerate(row):
                    raw = {"site": site, "plant": p, "ts": seq * 180.0, "seq": seq, "values": values}
                    if i == len(row) - 1:
                        sent_ns[seq] = time.time_ns()
                    producer.send(topics[p], key=keys[p], value=json.dumps(raw, separators=(",", ":")).encode())
                sent_in += len(row)
                seq += 1
            producer.flush()
            producer.close()
            if out is not None:
                out.close()
            if args.keep is not None:
                args.keep.mkdir(parents=True, exist_ok=True)
                for w in workers:
                    (args.keep / w.log.name).write_bytes(w.log.read_bytes())
    finally:
        for reader in readers:
            reader.stopping.set()
        for lag in lags:
            lag.close()
        for w in workers:
            w.stop()
        release_broker()
    print(summary(intervals))
    if problem is None and intervals and intervals[-1]["lag"]["plants"] > args.rate * args.every:
        problem = "the plant worker's lag at the end is more than an interval's input"
    if problem:
        print(f"soak: {problem}")
        return 1
    return 0


def summary(intervals: list[dict[str, Any]]) -> str:
    """First quarter against last quarter (medians over their intervals) and the RSS slope per hour."""
    if len(intervals) < 4:
        return "soak: too few intervals for a summary"
    q = len(intervals) // 4
    first, last = intervals[:q], intervals[-q:]
    lines = ["soak summary (median over the first and the last quarter of the intervals):"]

    def med(points: list[dict[str, Any]], get: Any) -> float:
        values = [get(p) for p in points]
        return float(np.nanmedian(values)) if np.isfinite(values).any() else float("nan")

    for label, get in (
        ("verdict p99 ms", lambda p: p["verdict_ms"][1]),
        ("verdict p50 ms", lambda p: p["verdict_ms"][0]),
        ("flag p99 ms", lambda p: p["flag_ms"][1]),
        ("plant worker RSS MiB", lambda p: p["rss_mib"]["plants"]),
        ("RCA worker RSS MiB", lambda p: p["rss_mib"]["rca"]),
        ("plant group lag", lambda p: p["lag"]["plants"]),
        ("RCA group lag", lambda p: p["lag"]["rca"]),
    ):
        lines.append(f"  {label:<24}{med(first, get):>10.1f}{med(last, get):>10.1f}")
    # the first quarter is the warm-up (imports, the first batches, the RCA's memory filling)
    minutes = np.array([p["minute"] for p in intervals[q:]])
    for name in ("plants", "rca"):
        rss = np.array([p["rss_mib"][name] for p in intervals[q:]])
        slope = float(np.polyfit(minutes, rss, 1)[0]) * 60.0
        lines.append(f"  {name} RSS slope: {slope:+.1f} MiB per hour (least squares after the first quarter)")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
