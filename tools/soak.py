#!/usr/bin/env python3
"""Soak test of the live pipeline: memory, consumer lag and latency over a long run.

Starts (or reuses, under a lease) the broker of ``tools/kafka/broker.py``, a fresh site
(``config/tep.yaml`` under a new name: own topics and consumer groups), one plant worker
(``fedrca run --roles plants,params``, fitted on ``data/tep/d00.dat``) and one RCA worker
(``--roles rca``), then replays the TEP fault files 01, 04, 05, 06 over and over (``seq``
continuing, so the RCA sees one fault episode after the other and keeps issuing
verdicts) into the sensors topics at ``--rate`` sensor messages per second (5 plants per
row) on an absolute schedule, for ``--minutes``. Every ``--kill-every`` minutes one worker
(the plant worker and the RCA worker in turn) is killed with ``kill -9`` and started again
at once with the same name and state directory, as a supervisor would; the first kill comes
half a window early, so that every kill and its restart fall in the middle of one window. With ``--standby``
each worker runs a second process as its hot standby (``fedrca run --standby``): the kill hits the serving
process, the standby takes over, and the process started again becomes the new standby. Every ``--every``
seconds it samples:

* **RSS** of each worker process (``/proc/<pid>/status`` VmRSS, MiB);
* **consumer lag** of each worker's group: end offsets of its input topics minus the
  group's committed offsets (records);
* **latency**: produce -> verdict (a ``read_committed`` consumer's receive time minus the
  send time of the last sensor message of the row the verdict was issued at) and produce ->
  flag committed (the flag's create time). The sensor messages' producer and the two
  readers are librdkafka's clients (:class:`Sender`), which leave the cores to the processes measured.

Every ``--window`` minutes it prints a row; at the end, the table of docs/streams.md in
markdown: per window the messages sent, verdicts, verdict p50 / p99, flag p99, each worker's
RSS at the window's end, the most lag of each group and the kills; then each worker's RSS
slope in MiB per 10 minutes (least squares with one intercept per process life, each life's
first window left out) and every window's verdict p99 against the first window's.
``--markdown FILE`` also writes the table, ``--json FILE`` every sample and window.

    tools/soak.py --minutes 60 --rate 1000 --markdown soak.md    # the hour of docs/streams.md
    tools/soak.py --minutes 6 --window 1 --kill-every 2          # a short check of the tool
    tools/soak.py --minutes 60 --rate 1000 --standby            # the hour, each worker with a hot standby
    tools/soak.py --minutes 60 --rate 1000 --render soak.json   # the table of a run's --json again

Exit status 0 when the run completed (a worker that died or a lag that never came back
is reported, and gives 1), 2 on a setup error.
"""

from __future__ import annotations

import argparse
import json
import math
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
    """One ``fedrca run`` process (log in the work directory); restartable with the same name and state.

    With ``standby``, two processes of the name run with ``--standby``: the one holding the worker's lock
    (``fedrca.application.worker_lock``, its pid in the lock file) serves, the other waits to take over; a kill
    -9 hits the serving one, and the one started again in its place becomes the new standby."""

    def __init__(
        self,
        name: str,
        config: Path,
        bootstrap: str,
        roles: str,
        workdir: Path,
        extra: list[str] | None = None,
        standby: bool = False,
    ) -> None:
        self.name = name
        self.log = workdir / f"{name}.log"
        self.lock = workdir / "state" / name / "worker.lock"
        self.standby = standby
        self.procs: list[subprocess.Popen[bytes]] = []
        self.starts = 0
        self.command = [
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
            *(extra or []),
            *(["--standby"] if standby else []),
        ]
        self.start()

    @property
    def proc(self) -> subprocess.Popen[bytes]:
        """The serving process: the lock's holder among this worker's processes (the first one until one holds
        it)."""
        try:
            pid = int(self.lock.read_text(encoding="ascii").strip() or 0)
        except (OSError, ValueError):
            pid = 0
        return next((p for p in self.procs if p.pid == pid and p.poll() is None), self.procs[0])

    def start(self) -> None:
        """Start the worker (a second process of it: its standby, when the first one runs)."""
        self.starts += 1
        with open(self.log, "ab") as out:
            self.procs.append(subprocess.Popen(self.command, stdout=out, stderr=subprocess.STDOUT, cwd=REPO))
        self.started = time.monotonic()

    def kill9(self) -> None:
        """SIGKILL the serving process (no shutdown, no final commit), then wait for it to be gone."""
        victim = self.proc
        victim.kill()
        victim.wait(timeout=60)
        self.procs.remove(victim)

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
        return bool(self.procs) and all(p.poll() is None for p in self.procs)

    def stop(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait(timeout=30)


def wait_for_standbys(workers: list[Worker], deadline: float) -> None:
    """Wait until every worker's second process says it is on standby (its log), so the first kill finds it
    ready."""
    while not all(w.log.read_text(errors="replace").count("on standby, ready") >= 1 for w in workers):
        if time.monotonic() > deadline or not all(w.alive() for w in workers):
            raise SystemExit("soak: the standbys did not start (see their logs with --keep)")
        time.sleep(1.0)


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


class Sender:
    """The sensor messages' producer: librdkafka's (confluent-kafka), kafka-python's settings (acks all, 5 ms
    linger, 64 kB batches). On a site the messages come from the plants' edge machines; a C client leaves
    the two cores to the broker and the workers this run measures (docs/streams.md, "The cores the
    benchmark took from what it measures")."""

    def __init__(self, bootstrap: str) -> None:
        from confluent_kafka import Producer

        self._producer = Producer(
            {"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5, "batch.size": 64 * 1024}
        )
        self.failed = 0

    def _answered(self, error: Any, _message: Any) -> None:
        if error is not None:
            self.failed += 1

    def send(self, topic: str, *, key: bytes, value: bytes) -> None:
        while True:
            try:
                self._producer.produce(topic, value=value, key=key, on_delivery=self._answered)
                return
            except BufferError:  # librdkafka's local queue is full: let it send, then again
                self._producer.poll(0.01)

    def serve(self) -> None:
        """Run the delivery callbacks of the messages answered meanwhile (once a row)."""
        self._producer.poll(0)

    def flush(self, timeout: float = 120.0) -> None:
        left = self._producer.flush(timeout)
        if left or self.failed:
            raise RuntimeError(f"soak: {left + self.failed} sensor messages were not acknowledged")


class Reader(threading.Thread):
    """Reads a topic's committed records as they come; keeps (receive ns, decoded) of the unclaimed ones.

    librdkafka's consumer (confluent-kafka), as :class:`Sender` says why; the receive time is taken when a
    poll hands the first record to Python."""

    def __init__(self, bootstrap: str, topic: str, from_end: bool) -> None:
        super().__init__(daemon=True)
        from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

        self.consumer = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": f"fedrca-soak-{uuid.uuid4().hex[:8]}",  # librdkafka wants one; nothing is committed
                "enable.auto.commit": False,
                "isolation.level": "read_committed",
                "fetch.wait.max.ms": 10,
            }
        )
        start = OFFSET_BEGINNING
        if from_end:
            _, start = self.consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=30, cached=False)
        self.consumer.assign([TopicPartition(topic, 0, start)])
        self.items: deque[tuple[int, int, dict[str, Any]]] = deque()  # (receive ns, create ms, record)
        self.stopping = threading.Event()

    def run(self) -> None:
        while not self.stopping.is_set():
            first = self.consumer.poll(0.05)
            if first is None:
                continue
            # the records fetched already, without waiting (consume with a timeout waits for its whole count)
            records = [first, *self.consumer.consume(num_messages=1000, timeout=0)]
            now = time.time_ns()
            for r in records:
                if r.error() is None:
                    self.items.append((now, r.timestamp()[1], json.loads(r.value())))
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
    parser.add_argument("--window", type=float, default=5.0, help="minutes per row of the table (default 5)")
    parser.add_argument(
        "--kill-every",
        type=float,
        default=10.0,
        help="minutes between two kill -9 of a worker, plant and RCA worker in turn, each restarted at once "
        "(default 10; 0: none)",
    )
    parser.add_argument("--every", type=float, default=10.0, help="seconds between two samples (default 10)")
    parser.add_argument(
        "--worker-option",
        action="append",
        default=[],
        metavar="ARG",
        help="one more argument of both workers' fedrca run (repeat it; e.g. --worker-option=--static-membership=off)",
    )
    parser.add_argument(
        "--standby",
        action="store_true",
        help="run each worker with a hot standby (fedrca run --standby): a kill -9 hits the serving process, its "
        "standby takes over, and the process started again becomes the new standby",
    )
    parser.add_argument("--json", type=Path, default=None, help="write every sample and window to this file")
    parser.add_argument("--markdown", type=Path, default=None, help="also write the table to this file")
    parser.add_argument("--keep", type=Path, default=None, help="copy the workers' logs to this directory")
    parser.add_argument(
        "--render",
        type=Path,
        default=None,
        help="print the table of a run's --json file again (its windows, kills and samples; --window as the run's)",
    )
    args = parser.parse_args(argv)
    if args.render is not None:
        run = json.loads(args.render.read_text(encoding="utf-8"))
        command = run.get("command", "tools/soak.py (command not recorded)")
        print(markdown(run["windows"], run["samples"], run["kills"], args, command, run.get("began", "-")))
        return 0
    if args.minutes <= 0 or args.rate <= 0 or args.every <= 0 or args.window <= 0 or args.kill_every < 0:
        print(
            "soak: --minutes, --rate, --window and --every must be positive, --kill-every not negative", file=sys.stderr
        )
        return 2
    sys.path.insert(0, str(REPO / "src"))
    import logging

    from fedrca.config import load_config
    from fedrca.connectors.kafka import ensure_site_topics

    logging.getLogger("kafka").setLevel(logging.ERROR)
    bootstrap = start_broker()
    workers: list[Worker] = []
    readers: list[Reader] = []
    lags: list[Lag] = []
    samples: list[dict[str, Any]] = []
    windows: list[dict[str, Any]] = []
    kills: list[dict[str, Any]] = []
    problem = None
    began = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
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
                Worker("plants", config_path, bootstrap, "plants,params", workdir, args.worker_option, args.standby),
                Worker("rca", config_path, bootstrap, "rca", workdir, args.worker_option, args.standby),
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
            producer = Sender(bootstrap)
            print(
                f"soak: broker {bootstrap}, site {site}, {args.rate:,.0f} sensor messages/s for {args.minutes:g} min, "
                f"a row every {args.window:g} min, a kill -9 every {args.kill_every:g} min; waiting for the workers",
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
            if args.standby:  # started once the serving processes hold their locks, so they fit nothing twice
                for w in workers:
                    w.start()
                wait_for_standbys(workers, deadline=time.monotonic() + 300)
            # the send time of every row (8 bytes a row): a verdict of a worker far behind still finds its row
            rows_total = int(args.rate / PLANTS_PER_ROW * 60.0 * args.minutes) + 2
            sent_ns = np.zeros(rows_total + 1, dtype=np.int64)
            period = PLANTS_PER_ROW / args.rate
            seq = 1
            t0 = time.monotonic()
            end = t0 + 60.0 * args.minutes
            next_sample = t0 + args.every
            next_kill = t0 + 60.0 * first_kill(args.kill_every, args.window) if args.kill_every > 0 else math.inf
            print(WINDOW_HEADER, flush=True)
            window = Window(0.0)
            sent_in = 0
            while True:
                now = time.monotonic()
                if now >= next_kill:
                    victim = workers[len(kills) % len(workers)]
                    killed_ns = time.time_ns()
                    victim.kill9()
                    victim.start()
                    kills.append({"minute": (now - t0) / 60.0, "worker": victim.name, "ns": killed_ns})
                    window.kills.append(victim.name)
                    next_kill += 60.0 * args.kill_every
                if now >= next_sample or now >= end:
                    verdicts, flags = readers[0].take(), readers[1].take()
                    served_again(kills, {"rca": verdicts, "plants": flags})
                    window.verdict_ms += [
                        (rcv - int(sent_ns[v["seq"]])) / 1e6
                        for rcv, _, v in verdicts
                        if 0 < v["seq"] < len(sent_ns) and sent_ns[v["seq"]]
                    ]
                    window.flag_ms += [
                        ts - int(sent_ns[f["seq"]]) / 1e6
                        for _, ts, f in flags
                        if 0 < f["seq"] < len(sent_ns) and sent_ns[f["seq"]]
                    ]
                    point = {
                        "minute": (now - t0) / 60.0,
                        "sent": sent_in,
                        "rss_mib": {w.name: w.rss_mib() for w in workers},
                        "life": {w.name: w.starts for w in workers},
                        "lag": {"plants": lags[0].records(), "rca": lags[1].records()},
                        "load": os.getloadavg()[0],
                    }
                    samples.append(point)
                    window.samples.append(point)
                    sent_in = 0
                    next_sample += args.every
                    if point["minute"] >= window.start + args.window - 1e-9 or now >= end:
                        windows.append(window.close(point["minute"]))
                        print(window_line(windows[-1]), flush=True)
                        window = Window(point["minute"])
                    if not all(w.alive() for w in workers):
                        problem = "a worker exited: " + ", ".join(w.name for w in workers if not w.alive())
                        break
                    if now >= end:
                        break
                delay = t0 + (seq - 1) * period - time.monotonic()
                if delay > 0:
                    time.sleep(min(delay, max(0.0, min(next_sample, next_kill) - time.monotonic())))
                    continue
                if seq >= len(sent_ns):
                    break  # the rows of the planned duration are sent
                row = rows[(seq - 1) % len(rows)]
                for i, (p, values) in enumerate(row):
                    raw = {"site": site, "plant": p, "ts": seq * 180.0, "seq": seq, "values": values}
                    if i == len(row) - 1:
                        sent_ns[seq] = time.time_ns()
                    producer.send(topics[p], key=keys[p], value=json.dumps(raw, separators=(",", ":")).encode())
                producer.serve()
                sent_in += len(row)
                seq += 1
            producer.flush()
            del producer  # librdkafka's client ends with it, before the broker stops (else it logs its reconnects)
            if args.keep is not None:
                args.keep.mkdir(parents=True, exist_ok=True)
                for w in workers:
                    (args.keep / w.log.name).write_bytes(w.log.read_bytes())
            # the workers stop before their state directory goes: one still writing there (a standby started
            # again, a Faust data directory) made the directory's removal fail and lost the run's table
            for w in workers:
                w.stop()
    finally:
        for reader in readers:
            reader.stopping.set()
        for lag in lags:
            lag.close()
        for w in workers:
            w.stop()
        release_broker()
    command = "tools/soak.py " + " ".join(sys.argv[1:] if argv is None else argv)
    table = markdown(windows, samples, kills, args, command, began)
    print(table)
    if args.markdown is not None:
        args.markdown.write_text(table + "\n", encoding="utf-8")
    if args.json is not None:
        run = {"command": command, "began": began, "samples": samples, "windows": windows, "kills": kills}
        args.json.write_text(json.dumps(run, indent=1))
    if problem is None and samples and samples[-1]["lag"]["plants"] > args.rate * args.every:
        problem = "the plant worker's lag at the end is more than a sample interval's input"
    if problem:
        print(f"soak: {problem}")
        return 1
    return 0


WINDOW_HEADER = (
    f"{'minutes':>9}{'sent':>9}{'verdicts':>9}{'verdict p50':>12}{'p99 ms':>9}{'flag p99 ms':>12}"
    f"{'plants RSS':>11}{'rca RSS':>9}{'plant lag':>10}{'rca lag':>9}  kills"
)


class Window:
    """The samples and latencies of one row of the table."""

    def __init__(self, start: float) -> None:
        self.start = start
        self.samples: list[dict[str, Any]] = []
        self.verdict_ms: list[float] = []
        self.flag_ms: list[float] = []
        self.kills: list[str] = []

    def close(self, end: float) -> dict[str, Any]:
        last = self.samples[-1]

        def most(group: str) -> int:
            return max(p["lag"][group] for p in self.samples)

        return {
            "start": self.start,
            "end": end,
            "sent": sum(p["sent"] for p in self.samples),
            "verdicts": len(self.verdict_ms),
            "verdict_ms": quantiles(self.verdict_ms),
            "flag_ms": quantiles(self.flag_ms),
            "rss_mib": last["rss_mib"],
            "lag_max": {"plants": most("plants"), "rca": most("rca")},
            "kills": self.kills,
            "load": float(np.mean([p["load"] for p in self.samples])),
        }


def window_line(w: dict[str, Any]) -> str:
    return (
        f"{w['start']:>4.0f}-{w['end']:<4.0f}{w['sent']:>9}{w['verdicts']:>9}{w['verdict_ms'][0]:>12.1f}"
        f"{w['verdict_ms'][1]:>9.1f}{w['flag_ms'][1]:>12.1f}{w['rss_mib']['plants']:>11.1f}{w['rss_mib']['rca']:>9.1f}"
        f"{w['lag_max']['plants']:>10}{w['lag_max']['rca']:>9}  {', '.join(w['kills']) or '-'}"
    )


def rss_slope(samples: list[dict[str, Any]], worker: str, warmup: float) -> float:
    """MiB per 10 minutes: least squares of RSS on time with one intercept per life of the worker (a kill -9
    starts a new process), each life's first ``warmup`` minutes left out (imports, first batches, the
    RCA's memory of released rows filling). NaN without two kept samples in one life."""
    lives: dict[int, list[tuple[float, float]]] = {}
    for p in samples:
        lives.setdefault(p["life"][worker], []).append((p["minute"], p["rss_mib"][worker]))
    kept = {
        life: [(t, r) for t, r in points if t - points[0][0] >= warmup and math.isfinite(r)]
        for life, points in lives.items()
    }
    kept = {life: points for life, points in kept.items() if len(points) >= 2}
    if not kept:
        return float("nan")
    rows, values = [], []
    for k, points in enumerate(kept.values()):
        for t, r in points:
            rows.append([t] + [1.0 if j == k else 0.0 for j in range(len(kept))])
            values.append(r)
    coef = np.linalg.lstsq(np.array(rows), np.array(values), rcond=None)[0]
    return float(coef[0]) * 10.0


def served_again(kills: list[dict[str, Any]], outputs: dict[str, list[tuple[int, int, dict[str, Any]]]]) -> None:
    """Set ``served_s`` of every kill not yet served: seconds from the kill -9 to the first output of the worker
    started again (a committed record of its output topic, flags for the plant worker, verdicts for the RCA
    worker, created after the kill: the dead process created none), read as it arrives. ``outputs``: the
    records (receive ns, create ms, value) taken from each worker's output since the last call."""
    for kill in kills:
        if kill.get("served_s") is not None or "ns" not in kill:
            continue
        after = [rcv for rcv, created_ms, _ in outputs.get(kill["worker"], ()) if created_ms * 1_000_000 > kill["ns"]]
        if after:
            kill["served_s"] = (min(after) - kill["ns"]) / 1e9


def backlogs(kills: list[dict[str, Any]], samples: list[dict[str, Any]], caught_up: float) -> list[dict[str, Any]]:
    """Per kill: the killed worker's group's most lag (records) from the kill to the next kill, and the minutes
    until its lag was back at ``caught_up`` records or less (None: not within that time; at the samples'
    resolution, ``--every``)."""
    out = []
    for k, kill in enumerate(kills):
        until = kills[k + 1]["minute"] if k + 1 < len(kills) else math.inf
        lags = [(p["minute"], p["lag"][kill["worker"]]) for p in samples if kill["minute"] <= p["minute"] < until]
        most = max((lag for _, lag in lags), default=-1)
        peak = next((m for m, lag in lags if lag == most), kill["minute"])
        back = next((m for m, lag in lags if m > peak and 0 <= lag <= caught_up), None)
        out.append({"backlog": most, "caught_up_min": None if back is None else back - kill["minute"]})
    return out


#: minutes after a kill -9 that its restart may still show in the latency (the session timeout, the plant
#: worker's fit, the lag caught up): a window that begins within them holds that restart too
RESTART_SPILL = 1.0


def first_kill(kill_every: float, window: float) -> float:
    """Minute of the first kill: ``kill_every`` less half a window, so that every kill falls in the middle of a
    window and its restart (``RESTART_SPILL``) within it, not across the boundary into a window counted calm
    (``tests/tools/test_soak.py``)."""
    return kill_every - window / 2.0 if kill_every > window / 2.0 else kill_every


def killed_windows(windows: list[dict[str, Any]], kills: list[dict[str, Any]]) -> list[list[str]]:
    """Per window, the workers whose kill -9 its latencies may hold: killed in it, or within ``RESTART_SPILL``
    minutes before it began."""
    return [[k["worker"] for k in kills if w["start"] - RESTART_SPILL <= k["minute"] < w["end"]] for w in windows]


def markdown(
    windows: list[dict[str, Any]],
    samples: list[dict[str, Any]],
    kills: list[dict[str, Any]],
    args: Any,
    command: str,
    began: str,
) -> str:
    """The table of docs/streams.md: one row per window, then the RSS slopes and the p99 against the first window."""
    lines = [
        f"`{command}` ({began}, load average {np.mean([w['load'] for w in windows]) if windows else float('nan'):.2f} "
        f"over the run; RSS in MiB, lag in records (the most in the window), latency in ms):",
        "",
        "| minutes | sent | verdicts | verdict p50 / p99 | flag p99 | RSS plant / RCA | lag plant / RCA | kill -9 |",
        "|---|---|---|---|---|---|---|---|",
    ]
    held = killed_windows(windows, kills)
    for w, restarts in zip(windows, held):
        killed = [k["worker"] for k in kills if w["start"] <= k["minute"] < w["end"]]
        shown = ", ".join(killed) or ("(restart of " + ", ".join(restarts) + ")" if restarts else "-")
        lines.append(
            f"| {w['start']:.0f}-{w['end']:.0f} | {w['sent']:,} | {w['verdicts']} | "
            f"{w['verdict_ms'][0]:,.0f} / {w['verdict_ms'][1]:,.0f} | {w['flag_ms'][1]:,.0f} | "
            f"{w['rss_mib']['plants']:.0f} / {w['rss_mib']['rca']:.0f} | "
            f"{w['lag_max']['plants']:,} / {w['lag_max']['rca']:,} | {shown} |"
        )
    warmup = args.window
    lines.append("")
    for name in ("plants", "rca"):
        slope = rss_slope(samples, name, warmup)
        lines.append(
            f"* RSS slope of the {'plant' if name == 'plants' else 'RCA'} worker: {slope:+.2f} MiB per 10 min "
            f"(least squares, one intercept per process life, each life's first {warmup:g} min left out)"
        )
    rate = getattr(args, "rate", 1000.0)
    for kill, after in zip(kills, backlogs(kills, samples, 3 * rate)):
        served = kill.get("served_s")
        back = after["caught_up_min"]
        who = "plant" if kill["worker"] == "plants" else "RCA"
        lines.append(
            f"* kill -9 of the {who} worker at minute {kill['minute']:.1f}: "
            f"served again after {'-' if served is None else f'{served:.1f} s'} (its first output created after the "
            f"kill), most lag {after['backlog']:,} records, back at 3 s of input or less after "
            f"{'-' if back is None else f'{back:.1f} min'}"
        )
    if windows:
        first = windows[0]["verdict_ms"][1]
        ratios = [(w["verdict_ms"][1] / first, bool(h)) for w, h in zip(windows, held)]
        calm = [r for r, h in ratios[1:] if not h and math.isfinite(r)]
        killed = [r for r, h in ratios if h and math.isfinite(r)]

        def most(ratios: list[float]) -> str:
            return f"{max(ratios):.2f}x" if ratios else "n/a"

        lines.append(
            f"* verdict p99 per window against the first ({first:,.0f} ms): at most {most(calm)} in the windows "
            f"without a kill, {most(killed)} in those with one (the killed worker's restart and its group's "
            f"rebalance; a window that began within {RESTART_SPILL:g} min of a kill counts as one)"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
