"""The streaming runtime on a real broker: plant worker throughput and produce->verdict latency (issue 14).

Starts (or reuses, under a lease) the broker of ``tools/kafka/broker.py``. One *run*
is the three phases below, each fedrca phase on a fresh site (own topics and
consumer groups, ``config/tep.yaml`` under a new name, five TEP plants, 52
sensors); ``--repeat N`` does N runs and reports the median of every figure (the
machine is shared: the ratio against the peer *of the same run* is the figure to
read).

1. **throughput of one plant worker**: ``THROUGHPUT_ROWS`` rows x 5 plants of sensor
   messages synthesised from the statistics of ``data/tep/d00.dat`` (the VAR(1) of
   ``bench_detect.synthesize``, 5 decimals as in the TEP files) are preloaded into the
   sensors topics, then ONE ``fedrca run --roles plants,params`` worker process (the
   transactional loop of :mod:`fedrca.streams.loop`) works through the backlog. Done
   when the plant group's committed offsets reach the sensor topics' ends. The flags
   are then read with ``isolation_level=read_committed`` and accounted by (plant, seq):
   every one exactly once. Rate = flags per second of the flags' own create timestamps
   over the middle 80% of them ("steady"). Then the plant handlers alone, in process, on the first
   ``PLANT_HANDLER_ROWS`` rows of the same messages in batches of ``PLANT_HANDLER_BATCH`` per plant
   (decode, check, detect, flags, history records, state: the worker's CPU besides its Kafka client),
   with the site's re-baselining loop (``drift``) and, as its ablation in the same run, without it:
   CPU per message, and the CPU of one refresh. The schedule counts samples (``drift.every`` of
   plant time: 160 rows of TEP's 180 s at 8 h), so a refresh's share per message is the site's
   whatever the replay's speed, while a refresh's stall (every plant at the same seq refreshes in
   the same fetch) recurs every ``every`` rows of the replay: 0.8 s at 1,000 msgs/s here, 8 h on
   the plant.
2. **throughput of one RCA worker**: the flags the in-process cores publish for ``RCA_ROWS``
   rows of the TEP fault files 01, 04, 05, 06 (repeated) are preloaded into the flags topic,
   then ONE ``fedrca run --roles rca`` worker works through the backlog. Its progress is read
   off its state records (one per committed batch: next input offset, create time): flags per
   second over the middle 80 % of them, and its CPU per flag over the same span. Every verdict
   the same cores issue in-process on the same flags must be committed exactly once. Then the
   worker's handler alone, in process, on the first ``HANDLER_FLAGS`` of the same flags in batches
   of 2,000 (decode, align, judge, verdicts, state record: the worker's CPU besides its Kafka
   client; the benchmark's own objects frozen out of the garbage collector, as the worker freezes its
   start-up heap), with the block engine and, as its peer in the same run, the per-row engine
   (:meth:`fedrca.rca.RCAEngine.update_rows`): CPU per flag and their ratio, the same verdicts.
3. **end-to-end latency**: a plant worker and an RCA worker (``--roles rca``) running;
   10,000 unpaced warm-up rows (the RCA's memory of released rows fills, as after
   minutes of operation), then TEP fault files 01, 04, 05, 06 (``data/tep/dNN_te.dat``)
   paced on an absolute schedule at 1,000 sensor messages/s (200 rows/s x 5 plants),
   then the same files again (seq continuing) at 5,000 messages/s. Latency of a verdict
   = time a separate consumer process (``read_committed``, ``time.time_ns``, one host
   clock) receives it minus the send time of the last sensor message of the row (seq)
   it was issued at. The load generator and that consumer are librdkafka's clients
   (confluent-kafka, :class:`Generator`): on a site the sensors come from the plants' edge
   machines, so the generator should leave the two cores to the broker and the workers it
   measures (with kafka-python's clients the two took 0.38 of a core at 1,000 msgs/s);
   each segment prints the cores every process kept busy (:func:`cores_line`). Every
   verdict the same cores issue in-process on the same data
   (:func:`fedrca.streams.embedded.replay_frame`) must arrive, exactly once, and every
   (plant, seq) flag exactly once. Per stage, the workers' own
   ``fedrca_stage_latency_seconds{stage}`` histograms (scraped from ``/metrics`` before
   and after each paced segment, the difference is the segment's) give p50/p99/p99.9
   (interpolated within buckets, as PromQL ``histogram_quantile``): ``consume`` (sensor
   record created -> fetched by the plant worker), ``flags`` (-> its flag committed),
   ``aligned`` (flag created -> aligned and judged by the RCA worker), ``verdict`` (flag
   created -> the verdicts of its batch committed).
4. **peer**: the plain kafka-python produce/consume loop (``kafka_peer.run_peer``) on
   the same broker, in the same run: its end-to-end messages/s and its latency at the
   same offered loads.

Targets (issues 14 and 32): plant worker >= 1.2x the kafka-python loop; RCA worker >= 50,000
flags/s; p99 produce->verdict < 100 ms at 1,000 messages/s and < 150 ms at 5,000 messages/s.

    python bench/bench_streams.py --repeat 3      # what ``make bench`` runs
    python bench/bench_streams.py --order-only    # phase 3's account alone: the flags' order, exactly once
    python bench/bench_streams.py --latency-only  # phase 3 alone, per run: latency, stages, CPU, transactions
    python bench/bench_streams.py --latency-only --trace DIR  # and where the slowest verdicts spent their time

``FEDRCA_BENCH_PROFILE=<dir>`` runs the workers under cProfile (``<dir>/<worker>.prof``;
the figures are then slower than normal).
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import multiprocessing
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
TRAIN = REPO / "data" / "tep" / "d00.dat"
FAULTS = ("01", "04", "05", "06")

THROUGHPUT_ROWS = 12_000  # x 5 plants = 60,000 sensor messages
RCA_ROWS = 40_000  # x 5 plants = 200,000 flags preloaded for the RCA worker
HANDLER_FLAGS = 20_000  # of them, through the RCA handler in process (block and per-row engine)
HANDLER_REPEAT = 3
HANDLER_BATCH = 2_000  # records per batch: fedrca run's --batch-size default
PLANT_HANDLER_ROWS = 3_000  # x 5 plants, through the plant handlers in process (drift loop on and off)
PLANT_HANDLER_BATCH = 100  # records per plant partition batch
RATES = (200.0, 1000.0)  # rows/s x 5 plants = 1,000 and 5,000 sensor messages/s offered
WARMUP_ROWS = 10_000  # rows before the paced ones: fills the RCA's memory of released rows (10,000)
PEER_MESSAGES = 50_000
PEER_SECONDS = 10.0
TARGET_RATIO = 1.2
SMOKE = {
    "THROUGHPUT_ROWS": 400,
    "RCA_ROWS": 600,
    "HANDLER_REPEAT": 1,
    "HANDLER_FLAGS": 1_000,
    "PLANT_HANDLER_ROWS": 400,
    "RATES": (200.0,),
    "WARMUP_ROWS": 200,
    "PEER_MESSAGES": 2_000,
    "PEER_SECONDS": 1.0,
}  # bench/run.py --smoke
TARGET_P99_MS = (100.0, 150.0)  # per offered rate (RATES)
TARGET_RCA = 50_000.0  # flags/s of one RCA worker through a backlog
STAGES = ("consume", "flags", "aligned", "verdict")
PROFILE_ENV = "FEDRCA_BENCH_PROFILE"
_METRICS_LINE = re.compile(rb"metrics on (http://[0-9.:]+)/metrics")
#: The plant detectors fitted in process, shared by the phases (every site of a run has config/tep.yaml's design
#: under its own name: :func:`fedrca.application.site.plant_runtime` copies a detector fitted before, as fitting
#: again would give it)
FITTED: dict[Any, Any] = {}
#: More arguments of every worker's ``fedrca run`` (``--worker-option``, e.g. ``--batch-every=0.02``): a lever
#: tried on the same code (the report names them)
WORKER_OPTIONS: list[str] = []


# -- workers ----------------------------------------------------------------------------------
class Worker:
    """One ``fedrca run`` process of the benchmark (log in the work directory, metrics on a free port)."""

    def __init__(
        self, name: str, config: Path, bootstrap: str, roles: str, workdir: Path, trace: Path | None = None
    ) -> None:
        self.name = name
        self.log = workdir / f"{name}.log"
        prefix = [sys.executable]
        profile_dir = os.environ.get(PROFILE_ENV)
        if trace is not None:  # fedrca run through bench/latency_trace.py, its trace written to ``trace``
            prefix += [str(HERE / "latency_trace.py"), str(trace)]
        elif profile_dir:
            Path(profile_dir).mkdir(parents=True, exist_ok=True)
            prefix += ["-m", "cProfile", "-o", str(Path(profile_dir) / f"{name}.prof"), "-m", "fedrca.cli"]
        else:
            prefix += ["-m", "fedrca.cli"]
        command = [
            *prefix,
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
            "--metrics-port",
            "0",
            *WORKER_OPTIONS,
        ]
        with open(self.log, "wb") as out:
            self.proc = subprocess.Popen(
                command, stdout=out, stderr=subprocess.STDOUT, cwd=REPO, env={**os.environ, "PYTHONUNBUFFERED": "1"}
            )
        self.started = time.time()

    def metrics_url(self) -> str | None:
        """``http://host:port`` of the worker's /metrics once it printed it."""
        found = _METRICS_LINE.search(self.log.read_bytes())
        return found.group(1).decode() + "/metrics" if found else None

    def cpu_seconds(self) -> float:
        """User + system CPU time of the worker process so far."""
        return process_cpu(self.proc.pid)

    def rss_mib(self) -> float:
        """Resident memory of the worker process (MiB)."""
        try:
            for text in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
                if text.startswith("VmRSS:"):
                    return int(text.split()[1]) / 1024
        except OSError:
            pass
        return float("nan")

    def check(self) -> None:
        if self.proc.poll() is not None:
            tail = "\n".join(self.log.read_text(errors="replace").splitlines()[-20:])
            raise RuntimeError(f"worker {self.name} exited with code {self.proc.returncode}:\n{tail}")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=30)


#: The broker's process id once the benchmark started or reused it (its CPU over the latency segments)
BROKER_PID: int | None = None


def process_cpu(pid: int | None) -> float:
    """User + system CPU seconds of process ``pid`` so far, all its threads (nan where it is gone or unknown)."""
    if pid is None:
        return float("nan")
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return float("nan")
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def wait_for(
    condition: Callable[[], bool], timeout: float, what: str, workers: list[Worker], every: float = 0.1
) -> None:
    """Poll ``condition``; fail naming ``what`` after ``timeout`` s or when a worker died."""
    deadline = time.monotonic() + timeout
    while not condition():
        for worker in workers:
            worker.check()
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(every)


def site_config(workdir: Path, site: str) -> Path:
    """``config/tep.yaml`` under a fresh site name (fresh topics and consumer groups)."""
    workdir.mkdir(parents=True, exist_ok=True)
    text = (REPO / "config" / "tep.yaml").read_text(encoding="utf-8")
    lines = [f"site: {site}" if line.startswith("site:") else line for line in text.splitlines()]
    # without rca.calibration: its maps are fitted on trained plants' verdicts, and the bench's plants publish no
    # parameters, so its RCA worker's verdicts are uncalibrated either way (the map only logged that it waits)
    at = lines.index("  calibration:")
    del lines[at : at + 2]
    path = workdir / f"{site}.yaml"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def group_covers(bootstrap: str, group: str, topics: set[str]) -> bool:
    """True when ``group`` is Stable and its members own every partition of ``topics``."""
    from kafka import KafkaAdminClient, KafkaConsumer
    from kafka.errors import KafkaError

    admin = KafkaAdminClient(bootstrap_servers=bootstrap, client_id="fedrca-bench")
    try:
        described = admin.describe_groups([group])[group]
    except KafkaError:
        return False  # no coordinator yet
    finally:
        admin.close()
    if described.get("error") or described.get("group_state") != "Stable":
        return False
    owned = {
        (a["topic"], p)
        for member in described["members"]
        for a in member["member_assignment"]["assigned_partitions"]
        for p in a["partitions"]
    }
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=None)
    try:
        wanted = {(t, p) for t in topics for p in consumer.partitions_for_topic(t) or ()}
    finally:
        consumer.close()
    return bool(wanted) and wanted <= owned


class GroupDone:
    """Whether a consumer group's committed offsets reached given offsets (one kept admin client).

    The loop commits "next offset = last record + 1" inside each transaction, so on an
    input topic written without transactions (the sensors) committed == end offset means
    every record is processed and its outputs committed.
    """

    def __init__(self, bootstrap: str, group: str) -> None:
        from kafka import KafkaAdminClient

        self.admin = KafkaAdminClient(bootstrap_servers=bootstrap, client_id="fedrca-bench")
        self.group = group

    def committed(self) -> dict[Any, int]:
        from kafka.errors import KafkaError

        try:
            offsets = self.admin.list_group_offsets(self.group).get(self.group, {})
        except KafkaError:  # no coordinator before the group's first join
            return {}
        return {tp: meta.offset for tp, meta in offsets.items() if meta is not None and meta.offset >= 0}

    def reached(self, targets: dict[Any, int]) -> bool:
        committed = self.committed()
        return all(committed.get(tp, 0) >= offset for tp, offset in targets.items())

    def close(self) -> None:
        self.admin.close()


def end_offsets(bootstrap: str, topics: list[str]) -> dict[Any, int]:
    """End offset of every partition of ``topics``."""
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=None)
    try:
        tps = [TopicPartition(t, p) for t in topics for p in consumer.partitions_for_topic(t) or ()]
        return dict(consumer.end_offsets(tps))
    finally:
        consumer.close()


class CommittedReader:
    """Reads a topic's committed records (``read_committed``) incrementally, from the beginning."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        from kafka import KafkaConsumer, TopicPartition

        self.consumer = KafkaConsumer(
            bootstrap_servers=bootstrap,
            group_id=None,
            enable_auto_commit=False,
            isolation_level="read_committed",
            max_partition_fetch_bytes=8 << 20,
        )
        self.tps = [TopicPartition(topic, p) for p in self.consumer.partitions_for_topic(topic) or ()]
        self.consumer.assign(self.tps)
        self.consumer.seek_to_beginning(*self.tps)
        self.records: list[tuple[dict[str, Any], int, int]] = []  # (decoded JSON, create time ms, offset)

    def poll(self) -> int:
        """Read what is committed now; returns the number of records read so far."""
        for records in self.consumer.poll(timeout_ms=100, max_records=50_000).values():
            self.records += [(json.loads(r.value), r.timestamp, r.offset) for r in records]
        return len(self.records)

    def read_to_end(self, timeout: float = 60.0) -> list[tuple[dict[str, Any], int, int]]:
        """Everything committed up to the last stable offset (positions skip transaction markers)."""
        end = self.consumer.end_offsets(self.tps)  # read_committed: the last stable offsets
        deadline = time.monotonic() + timeout
        while any(self.consumer.position(tp) < end[tp] for tp in self.tps):
            if time.monotonic() > deadline:
                raise RuntimeError(f"reading {self.tps} timed out after {timeout:.0f} s")
            self.poll()
        return self.records

    def close(self) -> None:
        self.consumer.close()


def check_flags(records: list[tuple[dict[str, Any], int, int]], plants: list[str], rows: int) -> str | None:
    """None when every (plant, seq) flag of ``rows`` rows is there exactly once, else why not."""
    seen: set[tuple[str, int]] = set()
    for flag, _, _ in records:
        key = (flag["plant"], flag["seq"])
        if key in seen:
            return f"flag {key} was committed twice (exactly-once broken)"
        seen.add(key)
    wanted = {(p, t) for p in plants for t in range(rows)}
    missing = wanted - seen
    if missing:
        return f"{len(missing)} of {len(wanted)} (plant, seq) flags are missing, e.g. {sorted(missing)[:3]}"
    if seen - wanted:
        return f"{len(seen - wanted)} unexpected (plant, seq) flags, e.g. {sorted(seen - wanted)[:3]}"
    return None


# -- why an expected verdict is missing -----------------------------------------------------------
def read_deadletters(bootstrap: str, topic: str) -> list[tuple[dict[str, Any] | None, dict[str, str]]]:
    """Every committed dead letter of ``topic``: (the refused flag decoded, or None; its headers)."""
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(
        bootstrap_servers=bootstrap, group_id=None, isolation_level="read_committed", enable_auto_commit=False
    )
    out: list[tuple[dict[str, Any] | None, dict[str, str]]] = []
    try:
        tps = [TopicPartition(topic, p) for p in consumer.partitions_for_topic(topic) or ()]
        consumer.assign(tps)
        consumer.seek_to_beginning(*tps)
        end = consumer.end_offsets(tps)
        deadline = time.monotonic() + 60
        while any(consumer.position(tp) < end[tp] for tp in tps) and time.monotonic() < deadline:
            for records in consumer.poll(timeout_ms=200, max_records=10_000).values():
                for r in records:
                    try:
                        value = json.loads(r.value)
                    except ValueError:
                        value = None
                    headers = {k: v.decode(errors="replace") for k, v in r.headers or ()}
                    out.append((value if isinstance(value, dict) else None, headers))
    finally:
        consumer.close()
    return out


def flag_leads(records: list[tuple[dict[str, Any], int, int]]) -> dict[tuple[str, int], int]:
    """(plant, seq) -> how many rows the newest flag committed before it is ahead of it, in the flags
    topic's order: the RCA's aligner judges a row without a plant once a flag more than its allowed
    lateness newer came first (:class:`fedrca.streams.aligner.FlagAligner`)."""
    lead: dict[tuple[str, int], int] = {}
    newest = -1
    for flag, _, _ in sorted(records, key=lambda r: r[2]):
        seq = int(flag["seq"])
        lead[(flag["plant"], seq)] = max(newest - seq, 0)
        newest = max(newest, seq)
    return lead


def explain_missing(
    missing: list[Any],
    committed: list[dict[str, Any]],
    received: set[str],
    flags: list[tuple[dict[str, Any], int, int]],
    expected_flags: list[Any],
    dead: list[tuple[dict[str, Any] | None, dict[str, str]]],
    lateness: int,
) -> list[str]:
    """One line per missing expected verdict: where it was lost and what differed on its way.

    * committed to the verdicts topic but not received by the bench's consumer (the bench's wait), or
      never committed;
    * the committed verdicts at the same seq (the RCA judged the row differently);
    * its evidence window's flags that differ from the in-process ones (the plant worker);
    * its window's flags dead-lettered by the RCA (late: judged before they came) and the largest
      lead of a newer flag over them in the flags topic (a lead above the allowed lateness releases
      the row without the plant).
    """
    committed_ids = {v["id"] for v in committed}
    by_seq: dict[int, list[dict[str, Any]]] = {}
    for v in committed:
        by_seq.setdefault(int(v["seq"]), []).append(v)
    want = {(f.plant, f.seq): (f.zc, f.za, f.withheld, f.degraded) for f in expected_flags}
    got = {
        (f["plant"], int(f["seq"])): (f["zc"], f["za"], bool(f.get("withheld")), bool(f.get("degraded")))
        for f, _, _ in flags
    }
    lead = flag_leads(flags)
    late = [
        (f["plant"], int(f["seq"]), h.get("fedrca-reason", "?"))
        for f, h in dead
        if f is not None and "plant" in f and "seq" in f
    ]
    lines = []
    for v in sorted(missing, key=lambda v: v.seq):
        lo, hi = v.evidence_window
        where = (
            "committed, not received by the bench's consumer"
            if v.id in committed_ids
            else "never committed by the RCA worker"
        )
        others = [f"{o['root_cause']} {tuple(o['evidence_window'])} {o['outcome']}" for o in by_seq.get(v.seq, ())]
        differ = sorted(k for k in want if lo <= k[1] <= v.seq and got.get(k) != want[k])
        window_dead = sorted((p, s, r) for p, s, r in late if lo - lateness <= s <= v.seq)
        window_lead = max(((n, k) for k, n in lead.items() if lo <= k[1] <= v.seq), default=(0, ("-", -1)))
        lines.append(
            f"verdict {v.id} seq {v.seq} ({v.root_cause}, {v.outcome}, evidence {lo}..{hi}): {where}; "
            f"committed at that seq: {others or 'none'}; flags different from in-process: {len(differ)} "
            f"{differ[:3]}; dead-lettered flags near it: {len(window_dead)} {window_dead[:3]}; "
            f"largest lead over its window's flags: {window_lead[0]} rows at {window_lead[1]} "
            f"(allowed lateness {lateness})"
        )
    return lines


# -- histograms of the workers -----------------------------------------------------------------
def scrape_stages(url: str) -> dict[str, tuple[list[float], np.ndarray]]:
    """``fedrca_stage_latency_seconds`` of a worker: stage -> (upper bounds, cumulative counts).

    Also ``"<stage>:batches"`` -> ([], committed batches so far) from
    ``fedrca_processing_latency_seconds_count{stage="plant_batch" | "rca_batch"}``.
    """
    from prometheus_client.parser import text_string_to_metric_families

    text = urllib.request.urlopen(url, timeout=10).read().decode()
    out: dict[str, dict[float, float]] = {}
    batches: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if family.name == "fedrca_stage_latency_seconds" and s.name.endswith("_bucket"):
                out.setdefault(s.labels["stage"], {})[float(s.labels["le"])] = s.value
            elif s.name == "fedrca_processing_latency_seconds_count" and s.labels["stage"].endswith("_batch"):
                batches[s.labels["stage"]] = s.value
    result = {
        stage: (sorted(buckets), np.array([buckets[b] for b in sorted(buckets)], dtype=np.float64))
        for stage, buckets in out.items()
    }
    for stage, count in batches.items():
        result[f"{stage}:batches"] = ([], np.array([count]))
    return result


def histogram_quantile(q: float, bounds: list[float], cumulative: np.ndarray) -> float:
    """PromQL ``histogram_quantile``: linear interpolation inside the bucket holding rank q x count."""
    total = cumulative[-1]
    if total <= 0:
        return float("nan")
    rank = q * total
    i = int(np.searchsorted(cumulative, rank, side="left"))
    if i >= len(bounds) - 1:  # the +Inf bucket: the highest finite bound, as PromQL
        return bounds[-2]
    lo = 0.0 if i == 0 else bounds[i - 1]
    below = 0.0 if i == 0 else cumulative[i - 1]
    inside = cumulative[i] - below
    return lo + (bounds[i] - lo) * ((rank - below) / inside if inside > 0 else 1.0)


def stage_quantiles(
    before: dict[str, tuple[list[float], np.ndarray]], after: dict[str, tuple[list[float], np.ndarray]]
) -> dict[str, tuple[float, float, float, int]]:
    """stage -> (p50, p99, p99.9 in ms, records) of what was observed between two scrapes."""
    out = {}
    for stage, (bounds, counts) in after.items():
        if not bounds:
            continue
        prior = before.get(stage, (bounds, np.zeros_like(counts)))[1]
        diff = counts - prior
        out[stage] = (
            *(1000.0 * histogram_quantile(q, bounds, diff) for q in (0.5, 0.99, 0.999)),
            int(diff[-1]),
        )
    return out  # type: ignore[return-value]


# -- data ---------------------------------------------------------------------------------------
def encode_rows(
    site: str, plants: dict[str, list[str]], frame: Any, start_seq: int = 0
) -> list[list[tuple[str, bytes]]]:
    """Per row: (plant, sensors-message bytes) for every plant (the replay contract, ts = seq x 180 s)."""
    arrays = {p: np.round(frame[cols].to_numpy(dtype=np.float64), 5).tolist() for p, cols in plants.items()}
    rows = []
    for i in range(len(frame)):
        seq = start_seq + i
        rows.append(
            [
                (
                    p,
                    json.dumps(
                        {"site": site, "plant": p, "ts": seq * 180.0, "seq": seq, "values": arrays[p][i]},
                        separators=(",", ":"),
                    ).encode(),
                )
                for p in plants
            ]
        )
    return rows


def synthetic_frame(columns: list[str], rows: int) -> Any:
    """``rows`` TEP-like rows from the nominal statistics (VAR(1) of bench_detect)."""
    import pandas as pd

    from bench_detect import synthesize
    from fedrca.datasets.tep import load_tep

    nominal = load_tep(TRAIN)[columns].to_numpy()
    return pd.DataFrame(synthesize(nominal, rows, seed=5), columns=columns)


class Delivery:
    """The broker's answer to one message of :class:`Generator` (set by librdkafka's delivery callback)."""

    __slots__ = ("error", "offset")

    def __init__(self) -> None:
        self.error: Any = None
        self.offset: int | None = None

    def __call__(self, error: Any, message: Any) -> None:
        self.error, self.offset = error, (message.offset() if error is None else None)

    def failed(self) -> bool:
        return self.error is not None or self.offset is None


class Generator:
    """The latency phase's load generator: librdkafka's producer (confluent-kafka), kafka-python's settings.

    Its C client takes a small share of a core where kafka-python's took a quarter at 1,000 msgs/s
    (module docstring, phase 3), so the cores go to the processes measured. ``send`` returns a
    :class:`Delivery` that holds the message's offset once the broker acknowledged it.
    """

    def __init__(self, bootstrap: str) -> None:
        from confluent_kafka import Producer

        self._producer = Producer(
            {"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5, "batch.size": 64 * 1024}
        )

    def send(self, topic: str, *, key: bytes, value: bytes) -> Delivery:
        answer = Delivery()
        while True:
            try:
                self._producer.produce(topic, value=value, key=key, on_delivery=answer)
                break
            except BufferError:  # librdkafka's local queue is full: let it send, then again
                self._producer.poll(0.01)
        return answer

    def serve(self) -> None:
        """Run the delivery callbacks of the messages answered meanwhile (once a row: a call per message
        would cost the generator's core a call per message)."""
        self._producer.poll(0)

    def flush(self, timeout: float = 120.0) -> None:
        left = self._producer.flush(timeout)
        if left:
            raise RuntimeError(f"{left} sensor messages were not acknowledged within {timeout:.0f} s")

    def close(self) -> None:
        self.flush()


def producer(bootstrap: str) -> Any:
    from kafka import KafkaProducer

    # the settings of the peer and of fedrca's KafkaSink
    return KafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=5, batch_size=64 * 1024)


# -- phase 1: throughput ------------------------------------------------------------------------
def throughput(bootstrap: str, workdir: Path) -> dict[str, Any]:
    from fedrca.config import load_config
    from fedrca.connectors.kafka import ensure_site_topics

    site = f"benchtp{uuid.uuid4().hex[:8]}"
    config_path = site_config(workdir, site)
    config = load_config(config_path)
    ensure_site_topics(bootstrap, config)
    plants = {p.name: list(p.sensors) for p in config.plants}
    frame = synthetic_frame([c for cols in plants.values() for c in cols], THROUGHPUT_ROWS)
    rows = encode_rows(site, plants, frame)
    topics = {p: config.topic("sensors", plant=p) for p in plants}
    prod = producer(bootstrap)
    futures = [prod.send(topics[p], key=p.encode(), value=raw) for row in rows for p, raw in row]
    prod.flush()
    prod.close()
    failed = sum(1 for f in futures if f.failed())
    if failed:
        raise RuntimeError(f"{failed} preloaded sensor messages were not acknowledged")
    expected = len(futures)
    targets = end_offsets(bootstrap, sorted(topics.values()))
    costs = plant_handler_costs(config, rows)

    worker = Worker("plants", config_path, bootstrap, "plants,params", workdir)
    done = GroupDone(bootstrap, f"fedrca-{site}-plants")
    samples: list[tuple[float, float]] = []  # (time, worker CPU seconds) while it works

    def finished() -> bool:
        samples.append((time.time(), worker.cpu_seconds()))
        return done.reached(targets)

    try:
        wait_for(finished, 300, "the plant worker to commit the whole backlog", [worker], every=0.5)
    finally:
        worker.stop()
        done.close()
    reader = CommittedReader(bootstrap, config.topic("flags"))
    try:
        records = reader.read_to_end()
    finally:
        reader.close()
    problem = check_flags(records, list(plants), THROUGHPUT_ROWS)
    stamps = np.sort(np.array([ts for _, ts, _ in records], dtype=np.float64)) / 1000.0
    n = len(stamps)
    lo, hi = stamps[int(0.1 * n)], stamps[int(0.9 * n) - 1]
    busy = [s for s in samples if s[0] >= stamps[0]]
    cpu_us = 1e6 * (busy[-1][1] - busy[0][1]) / n if len(busy) > 1 else float("nan")
    return {
        "messages": expected,
        "flags": n,
        "problem": problem,
        "steady": (int(0.9 * n) - int(0.1 * n)) / max(hi - lo, 1e-9),
        "first_last": n / max(stamps[-1] - stamps[0], 1e-9),
        "start_s": stamps[0] - worker.started,
        "cpu_us": cpu_us,
        **costs,
    }


def plant_handler_cost(config: Any, rows: list[list[tuple[str, bytes]]], drift: bool = True) -> dict[str, Any]:
    """CPU of the plant worker's handlers alone (:class:`fedrca.streams.agents.PlantAgent`, one per plant),
    in process over ``rows`` in batches of ``PLANT_HANDLER_BATCH`` per plant, plants in step: us per message,
    and the refreshes of the re-baselining loop (their number and CPU) when ``config`` has it on. ``drift``
    False: the same detectors without their loops (as ``drift.enabled: false`` builds them: no refresh, no
    history records)."""
    from fedrca.application.site import plant_runtime
    from fedrca.connectors.names import SiteNames
    from fedrca.streams.agents import PlantAgent
    from fedrca.streams.loop import InputRecord

    runtime = plant_runtime(config, TRAIN, fitted=FITTED)
    if not drift:
        for processor in runtime.processors.values():
            processor.keeper = None
    names = SiteNames(config)
    agents = {p: PlantAgent(runtime, p, names) for p in runtime.processors}
    refreshes: list[float] = []  # CPU seconds of each refresh
    every = 0  # rows between two refreshes
    for agent in agents.values():
        agent.restore(None)
        keeper = agent.keeper
        if keeper is not None:
            every = keeper.settings.every

            def timed(*args: Any, _refresh: Any = keeper.refresh, **kw: Any) -> Any:
                began = time.process_time()
                try:
                    return _refresh(*args, **kw)
                finally:
                    refreshes.append(time.process_time() - began)

            keeper.refresh = timed
    records = {p: [InputRecord(i, p.encode(), raw, 0) for i, row in enumerate(rows) for q, raw in row if q == p]
               for p in agents}  # fmt: skip
    started = time.process_time()
    for lo in range(0, len(rows), PLANT_HANDLER_BATCH):
        for p, agent in agents.items():
            agent.process(records[p][lo : lo + PLANT_HANDLER_BATCH])
    cpu = time.process_time() - started
    n = sum(len(r) for r in records.values())
    return {
        "us": 1e6 * cpu / max(n, 1),
        "refreshes": len(refreshes),
        "refresh_ms": 1e3 * statistics.median(refreshes) if refreshes else float("nan"),
        "refresh_share": sum(refreshes) / cpu if cpu > 0 else float("nan"),
        "every": every,
    }


def plant_handler_costs(config: Any, rows: list[list[tuple[str, bytes]]]) -> dict[str, Any]:
    """The plant handlers' CPU per message with the site's re-baselining loop and without it (its
    ablation), on the first ``PLANT_HANDLER_ROWS`` rows, alternated ``HANDLER_REPEAT`` times (medians)."""
    part = rows[:PLANT_HANDLER_ROWS]
    on_runs, off_runs = [], []
    for _ in range(HANDLER_REPEAT):
        on_runs.append(plant_handler_cost(config, part))
        off_runs.append(plant_handler_cost(config, part, drift=False))
    return {
        "plant_rows": len(part),
        "plant_us": statistics.median(r["us"] for r in on_runs),
        "plant_off_us": statistics.median(r["us"] for r in off_runs),
        "refreshes": on_runs[0]["refreshes"],
        "refresh_ms": statistics.median(r["refresh_ms"] for r in on_runs),
        "refresh_share": statistics.median(r["refresh_share"] for r in on_runs),
        "every": f"{config.drift.every} ({on_runs[0]['every']} rows)" if config.drift.enabled else "-",
    }


# -- phase 1b: the RCA worker's throughput -----------------------------------------------------------
_STATE_OFFSET = re.compile(rb'^\{"offset":(\d+),')


def rca_flags(config: Any, rows: int) -> tuple[list[tuple[str, bytes]], list[Any]]:
    """(plant, flag bytes) of ``rows`` rows of the TEP fault files (repeated), and the verdicts the same cores
    issue on them in-process (:func:`fedrca.streams.embedded.replay_frame`), as the RCA worker builds its
    engine: no parameters published, the configured graph and ``rca.false_alarm_rate``."""
    import pandas as pd

    from fedrca.application.site import plant_runtime, rca_runtime
    from fedrca.contracts import encode_flags
    from fedrca.datasets.tep import load_tep
    from fedrca.streams.embedded import replay_frame
    from fedrca.streams.runtime import RuntimeSettings, SiteRuntime

    plants = {p.name: list(p.sensors) for p in config.plants}
    columns = [c for cols in plants.values() for c in cols]
    faults = pd.concat([load_tep(REPO / "data" / "tep" / f"d{n}_te.dat")[columns] for n in FAULTS])
    frame = pd.concat([faults] * (rows // len(faults) + 1), ignore_index=True).iloc[:rows]
    settings = RuntimeSettings(allowed_lateness=1000)
    plant_side = plant_runtime(config, TRAIN, settings=settings, fitted=FITTED)
    runtime = SiteRuntime(plant_side, rca_runtime(plant_side.config, settings=settings))
    values = {p: frame[cols].round(5).to_numpy() for p, cols in plants.items()}
    run = replay_frame(runtime, values, sample_seconds=180.0)
    return [(f.plant, raw) for f, raw in zip(run.flags, encode_flags(run.flags), strict=True)], run.verdicts


class PerRowEngine:
    """The peer of the RCA handler's cost: the same engine behind the stage's block interface, row by row
    (:meth:`fedrca.rca.RCAEngine.update_rows`, the per-row path the block path is checked against)."""

    def __init__(self, engine: Any) -> None:
        self.engine = engine
        self.update_block = engine.update_rows
        self.get_state, self.set_state, self.reset = engine.get_state, engine.set_state, engine.reset


def handler_cost(config: Any, flags: list[tuple[str, bytes]], per_row: bool = False) -> tuple[float, list[bytes]]:
    """CPU microseconds per flag of the RCA worker's handler alone (:class:`fedrca.streams.agents.RCAAgent`:
    decode, align, judge, verdicts and the state record), in process over ``flags`` cut into batches of the
    worker's ``--batch-size`` (no broker: the CPU the worker spends besides its Kafka client), and the verdicts
    it issues. ``per_row``: its engine row by row (:class:`PerRowEngine`).

    The objects alive before the timing (this benchmark's own: the fitted detectors, the 200,000 flags and their
    expected verdicts) are frozen out of the garbage collector's passes while it runs, as ``fedrca run``
    freezes its start-up heap (:mod:`fedrca.cli.run`): the worker holds none of them, and rescanning them on
    every full pass would be the benchmark's cost, not the handler's."""
    from fedrca.application.site import rca_runtime
    from fedrca.connectors.names import SiteNames
    from fedrca.streams.agents import RCAAgent
    from fedrca.streams.loop import InputRecord
    from fedrca.streams.runtime import RuntimeSettings

    runtime = rca_runtime(config, settings=RuntimeSettings(allowed_lateness=1000))
    if per_row:
        runtime.stage.engine = PerRowEngine(runtime.engine)  # type: ignore[assignment]
    agent = RCAAgent(runtime, SiteNames(config))
    agent.restore(None)
    records = [InputRecord(i, plant.encode(), raw, 0) for i, (plant, raw) in enumerate(flags)]
    verdicts: list[bytes] = []
    gc.collect()
    gc.freeze()
    try:
        started = time.process_time()
        for lo in range(0, len(records), HANDLER_BATCH):
            processed = agent.process(records[lo : lo + HANDLER_BATCH])
            verdicts += [o.value for o in processed.outputs if o.topic == agent.verdicts_topic]
        took = time.process_time() - started
    finally:
        gc.unfreeze()
    return 1e6 * took / max(len(records), 1), verdicts


def handler_costs(config: Any, flags: list[tuple[str, bytes]]) -> dict[str, Any]:
    """The handler's CPU per flag with the block engine and with the per-row engine, on the first
    ``HANDLER_FLAGS`` flags, alternated ``HANDLER_REPEAT`` times (medians): a ratio taken in one run, on one
    machine, whatever its load. Both must publish the same verdicts, byte for byte."""
    part = flags[:HANDLER_FLAGS]
    block, rows, problem = [], [], None
    for _ in range(HANDLER_REPEAT):
        us, by_block = handler_cost(config, part)
        block.append(us)
        us, by_rows = handler_cost(config, part, per_row=True)
        rows.append(us)
        if by_block != by_rows:
            problem = (
                f"the block engine published {len(by_block)} verdicts, the per-row engine {len(by_rows)}, "
                "not the same ones"
            )
    return {
        "handler_flags": len(part),
        "handler_us": statistics.median(block),
        "handler_rows_us": statistics.median(rows),
        "handler_problem": problem,
    }


def rca_throughput(bootstrap: str, workdir: Path) -> dict[str, Any]:
    """One RCA worker (``--roles rca``) through a preloaded backlog of ``RCA_ROWS`` rows of flags (5 plants).

    Progress is read off the RCA's state records (one per committed batch: the next input offset, the
    record's create time); the rate is that of the middle 80 % of the flags, the CPU per flag the worker's
    CPU over the same span. Every verdict the in-process cores issue on the same flags must be committed,
    exactly once.
    """
    from fedrca.config import load_config
    from fedrca.connectors.kafka import ensure_site_topics

    site = f"benchrca{uuid.uuid4().hex[:8]}"
    config_path = site_config(workdir, site)
    config = load_config(config_path)
    ensure_site_topics(bootstrap, config)
    flags, expected = rca_flags(config, RCA_ROWS)
    costs = handler_costs(config, flags)
    topic = config.topic("flags")
    prod = producer(bootstrap)
    futures = [prod.send(topic, key=plant.encode(), value=raw) for plant, raw in flags]
    prod.flush()
    prod.close()
    if any(f.failed() for f in futures):
        raise RuntimeError("some preloaded flags were not acknowledged")
    targets = end_offsets(bootstrap, [topic])
    worker = Worker("rca", config_path, bootstrap, "rca", workdir)
    done = GroupDone(bootstrap, f"fedrca-{site}-rca")
    samples: list[tuple[float, float]] = []  # (time, worker CPU seconds)
    rss: list[float] = []  # resident memory while it works (read before it is stopped: a stopped one has none)

    def finished() -> bool:
        samples.append((time.time(), worker.cpu_seconds()))
        rss.append(worker.rss_mib())
        return done.reached(targets)

    try:
        wait_for(finished, 600, "the RCA worker to commit the whole backlog", [worker], every=0.2)
    finally:
        worker.stop()
        done.close()
    problem = None
    verdicts = CommittedReader(bootstrap, config.topic("verdicts"))
    try:
        ids = [v["id"] for v, _, _ in verdicts.read_to_end()]
    finally:
        verdicts.close()
    want = {v.id for v in expected}
    if set(ids) != want or len(ids) != len(set(ids)):
        problem = (
            f"verdicts: {len(want - set(ids))} expected missing, {len(set(ids) - want)} unexpected, "
            f"{len(ids) - len(set(ids))} committed twice"
        )
    dead = read_deadletters(bootstrap, config.topic("deadletter"))
    if problem is None and dead:
        reasons = sorted({h.get("fedrca-reason", "?") for _, h in dead})
        problem = f"{len(dead)} flags dead-lettered by the RCA worker ({', '.join(reasons)})"
    problem = problem or costs["handler_problem"]
    progress = sorted(_state_progress(bootstrap, config.topic("rca_state")))  # (next offset, create time s)
    n = len(flags)
    offsets = np.array([o for o, _ in progress], dtype=np.float64)
    times = np.array([t for _, t in progress])
    lo, hi = np.interp([0.1 * n, 0.9 * n], offsets, times)
    span = np.array(samples)
    cpu = np.interp([lo, hi], span[:, 0], span[:, 1])
    return {
        "flags": n,
        "verdicts": len(ids),
        "problem": problem,
        "steady": 0.8 * n / max(hi - lo, 1e-9),
        "cpu_us": 1e6 * (cpu[1] - cpu[0]) / (0.8 * n),
        "batches": len(progress),
        "rss": max((m for m in rss if not math.isnan(m)), default=float("nan")),
        **costs,
    }


def _state_progress(bootstrap: str, topic: str) -> list[tuple[int, float]]:
    """(next input offset, create time in s) of every committed state record of ``topic``."""
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(
        bootstrap_servers=bootstrap, group_id=None, isolation_level="read_committed", enable_auto_commit=False
    )
    tp = TopicPartition(topic, 0)
    try:
        consumer.assign([tp])
        consumer.seek_to_beginning(tp)
        end = consumer.end_offsets([tp])[tp]
        out = []
        deadline = time.monotonic() + 60
        while consumer.position(tp) < end and time.monotonic() < deadline:
            for records in consumer.poll(timeout_ms=200, max_records=10_000).values():
                for r in records:
                    found = _STATE_OFFSET.match(r.value)
                    if found:
                        out.append((int(found.group(1)), r.timestamp / 1000.0))
        return out
    finally:
        consumer.close()


# -- phase 2: latency ---------------------------------------------------------------------------
def _consume_verdicts(bootstrap: str, topic: str, wanted: list[str], ready: Any, stop: Any, results: Any) -> None:
    """Consumer process: receive time of every committed verdict (until all ``wanted`` ids are in, or ``stop``).

    librdkafka's consumer (:class:`Generator` says why), ``read_committed``, from the topic's end when it
    started; the receive time is taken when a poll hands the records to Python (with the first record:
    ``tests/bench/test_smoke_broker.py`` checks the verdicts arrive)."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"bench-verdicts-{uuid.uuid4().hex[:8]}",  # librdkafka wants one; nothing is committed
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
            "fetch.wait.max.ms": 10,
        }
    )
    _, end = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=30, cached=False)
    consumer.assign([TopicPartition(topic, 0, end)])
    ready.set()
    missing = set(wanted)
    got = []
    while missing and not stop.is_set():
        # poll returns on the first record; consume then takes the ones already fetched without waiting
        # (consume with a timeout waits for its whole count or the timeout: tens of ms added to every verdict)
        first = consumer.poll(0.05)
        if first is None:
            continue
        records = [first, *consumer.consume(num_messages=1000, timeout=0)]
        now = time.time_ns()
        for record in records:
            if record.error() is not None:
                continue
            verdict = json.loads(record.value())
            got.append((verdict["id"], int(verdict["seq"]), now, record.timestamp()[1]))
            missing.discard(verdict["id"])
    consumer.close()
    results.put(got)


def _pace(
    prod: Generator, topics: dict[str, str], keys: dict[str, bytes], rows: list[Any], rate: float
) -> tuple[Any, Any]:
    """Send ``rows`` at ``rate`` rows/s on an absolute schedule; (send time of each row's last message, futures)."""
    sent_ns = np.zeros(len(rows), dtype=np.int64)
    futures = []
    period = 1.0 / rate
    t0 = time.monotonic()
    for k, row in enumerate(rows):
        delay = t0 + k * period - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        for i, (p, raw) in enumerate(row):
            if i == len(row) - 1:
                sent_ns[k] = time.time_ns()  # the row's last message
            futures.append(prod.send(topics[p], key=keys[p], value=raw))
        prod.serve()
    prod.flush()
    achieved = len(rows) * len(topics) / (time.monotonic() - t0)
    return sent_ns, (futures, achieved)


def latency(bootstrap: str, workdir: Path, trace: Path | None = None) -> dict[str, Any]:
    """Phase 3 (module docstring); with ``trace`` (a directory) the workers run traced (bench/latency_trace.py)
    and what the benchmark saw is saved beside their traces, for :func:`latency_trace.breakdown`."""
    import pandas as pd

    from fedrca.application.site import plant_runtime, rca_runtime
    from fedrca.config import load_config
    from fedrca.connectors.kafka import ensure_site_topics
    from fedrca.connectors.names import SiteNames
    from fedrca.datasets.tep import load_tep
    from fedrca.streams.embedded import replay_frame
    from fedrca.streams.runtime import RuntimeSettings, SiteRuntime

    site = f"benchlat{uuid.uuid4().hex[:8]}"
    config_path = site_config(workdir, site)
    config = load_config(config_path)
    ensure_site_topics(bootstrap, config)
    plants = {p.name: list(p.sensors) for p in config.plants}
    columns = [c for cols in plants.values() for c in cols]
    faults = pd.concat([load_tep(REPO / "data" / "tep" / f"d{n}_te.dat")[columns] for n in FAULTS])
    segments = [(0, WARMUP_ROWS)]
    for _ in RATES:
        segments.append((segments[-1][1], segments[-1][1] + len(faults)))
    frame = pd.concat([synthetic_frame(columns, WARMUP_ROWS), *([faults] * len(RATES))], ignore_index=True)
    rows = encode_rows(site, plants, frame)
    total = len(rows)
    if trace is not None:
        trace.mkdir(parents=True, exist_ok=True)

    def traced(name: str) -> Path | None:
        return None if trace is None else trace / f"{name}.trace.jsonl"

    workers = [
        Worker("plants", config_path, bootstrap, "plants,params", workdir, traced("plants")),
        Worker("rca", config_path, bootstrap, "rca", workdir, traced("rca")),
    ]
    flags_reader: CommittedReader | None = None
    try:
        # What the same cores issue on this data in-process (while the workers start): the verdicts to expect.
        # Built like the workers build theirs: the plant worker fits on TRAIN, the RCA worker (no
        # parameters published) takes the configured graph and rca.false_alarm_rate.
        settings = RuntimeSettings(allowed_lateness=1000)
        plant_side = plant_runtime(config, TRAIN, settings=settings, fitted=FITTED)
        runtime = SiteRuntime(plant_side, rca_runtime(plant_side.config, settings=settings))
        replay = replay_frame(
            runtime, {p: frame[cols].round(5).to_numpy() for p, cols in plants.items()}, sample_seconds=180.0
        )
        expected = replay.verdicts
        sensor_topics = {config.topic("sensors", plant=p) for p in plants}
        wait_for(
            lambda: group_covers(bootstrap, f"fedrca-{site}-plants", sensor_topics),
            180,
            "the plant worker",
            workers,
            0.5,
        )
        wait_for(
            lambda: group_covers(bootstrap, f"fedrca-{site}-rca", {config.topic("flags")}),
            180,
            "the RCA worker",
            workers,
            0.5,
        )
        urls = {w.name: w.metrics_url() for w in workers}
        if None in urls.values():
            raise RuntimeError(f"a worker did not print its metrics address: {urls}")

        from bench_streams import _consume_verdicts as consume  # importable by name in the spawned process

        ctx = multiprocessing.get_context("spawn")
        ready, stop, results = ctx.Event(), ctx.Event(), ctx.Queue()
        args = (bootstrap, config.topic("verdicts"), [v.id for v in expected], ready, stop, results)
        reader = ctx.Process(target=consume, args=args, daemon=True)
        reader.start()
        if not ready.wait(60):
            raise RuntimeError("the verdict consumer process did not start within 60 s")

        topics = {p: config.topic("sensors", plant=p) for p in plants}
        keys = {p: p.encode() for p in plants}
        prod = Generator(bootstrap)
        flags_reader = CommittedReader(bootstrap, config.topic("flags"))
        rca_done = GroupDone(bootstrap, f"fedrca-{site}-rca")

        def drained(upto: int) -> Callable[[], bool]:
            """Every flag of rows < ``upto`` committed, and the RCA committed past the last of them."""

            def check() -> bool:
                assert flags_reader is not None
                flags_reader.poll()
                mine = [off for f, _, off in flags_reader.records if f["seq"] < upto]
                if len(mine) < upto * len(plants):
                    return False
                return rca_done.reached({flags_reader.tps[0]: max(mine) + 1})

            return check

        # Warm-up: the RCA's memory of released rows fills (as after minutes of operation), unpaced.
        futures = [prod.send(topics[p], key=keys[p], value=raw) for row in rows[:WARMUP_ROWS] for p, raw in row]
        prod.flush()
        wait_for(drained(WARMUP_ROWS), 300, "the workers to work through the warm-up", workers, 0.5)
        sent_ns = np.zeros(total, dtype=np.int64)
        achieved, stages = [], []
        cpu: list[dict[str, float]] = []  # per segment: worker CPU seconds and committed batches
        spans: list[tuple[float, float]] = []  # per segment: wall clock from its first row sent to drained
        for rate, (start, stop_row) in zip(RATES, segments[1:], strict=True):
            began = time.time()
            before = {name: scrape_stages(url) for name, url in urls.items() if url}
            cpu_before = {w.name: w.cpu_seconds() for w in workers}
            # what else shares the cores: the broker, this process (the load generator) and the verdict reader
            others = {"broker": BROKER_PID, "generator": os.getpid(), "reader": reader.pid}
            others_before = {name: process_cpu(pid) for name, pid in others.items()}
            sent, (fut, rate_achieved) = _pace(prod, topics, keys, rows[start:stop_row], rate)
            sent_ns[start:stop_row] = sent
            futures += fut
            achieved.append(rate_achieved)
            wait_for(drained(stop_row), 120, f"the workers to finish the {rate * 5:,.0f} msgs/s segment", workers)
            spans.append((began, time.time()))
            after = {name: scrape_stages(url) for name, url in urls.items() if url}
            cpu.append(
                {
                    **{f"{w.name}_cpu": w.cpu_seconds() - cpu_before[w.name] for w in workers},
                    **{
                        f"{name}_batches": float(after[name][key][1][0] - before[name].get(key, ([], [0.0]))[1][0])
                        for name, key in (("plants", "plant_batch:batches"), ("rca", "rca_batch:batches"))
                        if key in after[name]
                    },
                    "messages": float((stop_row - start) * len(plants)),
                    **{f"{name}_cpu": process_cpu(pid) - others_before[name] for name, pid in others.items()},
                    "seconds": spans[-1][1] - spans[-1][0],
                }
            )
            stages.append(
                {**stage_quantiles(before["plants"], after["plants"]), **stage_quantiles(before["rca"], after["rca"])}
            )
        rss = {w.name: w.rss_mib() for w in workers}
        prod.close()
        rca_done.close()
        if any(f.failed() for f in futures):
            raise RuntimeError("some sensor messages were not acknowledged")
        # the sensor record of (row, plant): the futures are row by row, plant by plant, warm-up first
        offsets = np.array([f.offset for f in futures], dtype=np.int64).reshape(total, len(plants))
        try:
            got = results.get(timeout=60)
        except Exception:
            stop.set()
            got = results.get(timeout=10)
        reader.join(10)
        flags = flags_reader.read_to_end()
    finally:
        if flags_reader is not None:
            flags_reader.close()
        for worker in workers:
            worker.stop()
    problem = check_flags(flags, list(plants), total)
    # the transactions of each segment: one state record each (the RCA's; and one plant's, all in step)
    commits = {
        name: [t for _, t in _state_progress(bootstrap, topic)]
        for name, topic in (("rca", config.topic("rca_state")), ("plant", SiteNames(config).state(next(iter(plants)))))
    }
    ids = [vid for vid, _, _, _ in got]
    want = {v.id for v in expected}
    leads = flag_leads(flags)
    lead = max(leads.values(), default=0)
    dead = read_deadletters(bootstrap, config.topic("deadletter"))
    explained: list[str] = []
    if set(ids) != want:
        committed = CommittedReader(bootstrap, config.topic("verdicts"))
        try:
            verdicts = [v for v, _, _ in committed.read_to_end()]
        finally:
            committed.close()
        missing = [v for v in expected if v.id not in set(ids)]
        explained = explain_missing(missing, verdicts, set(ids), flags, replay.flags, dead, settings.allowed_lateness)
        for text in explained:
            print(f"    missing {text}", file=sys.stderr, flush=True)
    if problem is None and set(ids) != want:
        problem = f"{len(want - set(ids))} expected verdicts missing, {len(set(ids) - want)} unexpected"
    if problem is None and len(ids) != len(set(ids)):
        problem = f"{len(ids) - len(set(ids))} verdicts were committed twice"
    if problem is None and dead:
        reasons = sorted({h.get("fedrca-reason", "?") for _, h in dead})
        problem = f"{len(dead)} flags dead-lettered by the RCA worker ({', '.join(reasons)}; largest lead {lead} rows)"
    if problem is None and not ids:
        problem = "no verdict was issued"
    per_rate = []
    for k, (start, stop_row) in enumerate(segments[1:]):
        lat = [(now - sent_ns[seq]) / 1e6 for _, seq, now, _ in got if start <= seq < stop_row]
        flag_ms = [ts - sent_ns[f["seq"]] / 1e6 for f, ts, _ in flags if start <= f["seq"] < stop_row]
        per_rate.append(
            {
                "offered": RATES[k] * len(plants),
                "achieved": achieved[k],
                "verdicts": len(lat),
                "verdict": percentiles(np.array(lat or [np.nan])),
                "flag": percentiles(np.array(flag_ms or [np.nan])),
                "stages": stages[k],
                "cpu": cpu[k],
                "txn_per_s": {
                    name: sum(spans[k][0] <= t <= spans[k][1] for t in times) / (spans[k][1] - spans[k][0])
                    for name, times in commits.items()
                },
            }
        )
    if trace is not None:
        from latency_trace import save_inputs

        save_inputs(
            trace,
            plants=list(plants),
            topics=topics,
            offsets=offsets.tolist(),
            segments=segments[1:],
            spans=spans,
            offered=[RATES[k] * len(plants) for k in range(len(RATES))],
            sent_ns=sent_ns.tolist(),
            got=got,
            flags=[(f["plant"], int(f["seq"]), offset) for f, _, offset in flags],
            what_if=os.environ.get("FEDRCA_TRACE_WHAT_IF", ""),
        )
    return {
        "rows": total,
        "messages": total * len(plants),
        "verdicts": len(ids),
        "problem": problem,
        "explained": explained,
        "lead": lead,
        "deadletters": len(dead),
        "late": sum(1 for _, headers in dead if headers.get("fedrca-reason") == "late"),
        "lost": len(want - set(ids)),
        "duplicated": len(ids) - len(set(ids)),
        "rates": per_rate,
        "rss": rss,
    }


#: The processes a latency segment's cores are shared by, as :func:`cores_line` names them
CORE_USERS = (("plants", "plant worker"), ("rca", "RCA worker"), ("broker", "broker"),
              ("generator", "load generator"), ("reader", "verdict reader"))  # fmt: skip


def cores_line(cpu: dict[str, float]) -> str:
    """The cores each process of a latency segment kept busy on average (CPU seconds / the segment's seconds)."""
    if not cpu.get("seconds"):
        return "cores busy: not measured"
    shares = [(label, cpu[f"{key}_cpu"] / cpu["seconds"]) for key, label in CORE_USERS if f"{key}_cpu" in cpu]
    total = sum(v for _, v in shares if not math.isnan(v))
    return (
        "cores busy over the segment: "
        + ", ".join(f"{label} {v:.2f}" for label, v in shares)
        + f"; {total:.2f} of {os.cpu_count()} in all"
    )


def percentiles(ms: np.ndarray) -> tuple[float, float, float]:
    """(p50, p99, p99.9) in milliseconds."""
    return tuple(float(np.percentile(ms, q)) for q in (50, 99, 99.9))  # type: ignore[return-value]


# -- main ---------------------------------------------------------------------------------------
def one_run(bootstrap: str, workdir: Path, k: int, repeat: int) -> dict[str, Any]:
    """Throughput, latency and the peer, on the same broker, back to back."""
    from kafka_peer import paced_latency, run_peer

    print(f"  run {k + 1}/{repeat}: one plant worker over a preloaded backlog", file=sys.stderr, flush=True)
    tp = throughput(bootstrap, workdir / f"throughput{k}")
    print(f"  run {k + 1}/{repeat}: one RCA worker over a preloaded backlog of flags", file=sys.stderr, flush=True)
    rca = rca_throughput(bootstrap, workdir / f"rca{k}")
    print(f"  run {k + 1}/{repeat}: plant + RCA workers at 1,000 and 5,000 msgs/s", file=sys.stderr, flush=True)
    lat = latency(bootstrap, workdir / f"latency{k}")
    print(f"  run {k + 1}/{repeat}: the kafka-python peer", file=sys.stderr, flush=True)
    peer = run_peer(bootstrap, messages=PEER_MESSAGES, rate=RATES[0] * 5, seconds=PEER_SECONDS)
    peer_lat = [(peer.latency_p50_ms, peer.latency_p99_ms, peer.latency_p999_ms)]
    peer_lat += [paced_latency(bootstrap, rate * 5, PEER_SECONDS / 2) for rate in RATES[1:]]
    return {
        "tp": tp,
        "rca": rca,
        "lat": lat,
        "peer": peer,
        "peer_lat": peer_lat,
        "ratio": tp["steady"] / peer.throughput,
    }


def order_only(bootstrap: str, repeat: int) -> int:
    """``--order-only``: the latency phase's account per run (docs/streams.md, "A backlog in step"); 1 on a problem."""
    failed = 0
    with tempfile.TemporaryDirectory(prefix="fedrca-bench-order-") as tmp:
        for k in range(repeat):
            lat = latency(bootstrap, Path(tmp) / f"latency{k}")
            failed += lat["problem"] is not None
            print(
                f"run {k + 1}/{repeat}: {lat['messages']:,} flags, largest lead {lat['lead']:,} rows (allowed "
                f"lateness 1,000), {lat['late']:,} late of {lat['deadletters']:,} RCA dead letters, "
                f"{lat['lost']} verdicts lost, {lat['duplicated']} duplicated; problem: {lat['problem'] or 'none'}",
                flush=True,
            )
    return 1 if failed else 0


def latency_only(bootstrap: str, repeat: int, trace: Path | None = None) -> int:
    """``--latency-only``: the latency phase per run (produce -> verdict, the stages, CPU per batch, transactions
    per second) and its account; 1 on a problem. No peer and no target: for comparing two codes run back to back
    on the same machine. With ``trace`` (``--trace DIR``) the workers run traced and each run's breakdown of its
    slowest verdicts follows it (bench/latency_trace.py; the traces stay in ``DIR/run<k>``)."""
    from latency_trace import breakdown

    failed = 0
    with tempfile.TemporaryDirectory(prefix="fedrca-bench-latency-") as tmp:
        for k in range(repeat):
            where = None if trace is None else trace / f"run{k + 1}"
            lat = latency(bootstrap, Path(tmp) / f"latency{k}", where)
            failed += lat["problem"] is not None
            print(f"run {k + 1}/{repeat}: {lat['verdicts']} verdicts; problem: {lat['problem'] or 'none'}", flush=True)
            for rate in lat["rates"]:
                verdict, flag = rate["verdict"], rate["flag"]
                print(
                    f"  {rate['offered']:,.0f} msgs/s ({rate['achieved']:,.0f} achieved): "
                    f"produce -> verdict p50 / p99 / p99.9 {verdict[0]:.1f} / {verdict[1]:.1f} / {verdict[2]:.1f} ms "
                    f"({rate['verdicts']} verdicts); "
                    f"-> flag committed p50 / p99 {flag[0]:.1f} / {flag[1]:.1f} ms",
                    flush=True,
                )
                stages = rate["stages"]
                print(
                    "    stages p50 / p99 ms: "
                    + ", ".join(f"{s} {stages[s][0]:.1f} / {stages[s][1]:.1f}" for s in STAGES if s in stages),
                    flush=True,
                )
                cpu, txn = rate["cpu"], rate.get("txn_per_s", {})
                batches = cpu.get("plants_batches") or float("nan")
                rca_batches = cpu.get("rca_batches") or float("nan")
                print(
                    f"    plant worker {1e6 * cpu['plants_cpu'] / cpu['messages']:.0f} us per message, "
                    f"{1e3 * cpu['plants_cpu'] / batches:.2f} ms per partition batch "
                    f"({cpu['messages'] / batches:.1f} messages); "
                    f"RCA worker {1e3 * cpu['rca_cpu'] / rca_batches:.2f} ms per batch; "
                    f"transactions per second: RCA {txn.get('rca', float('nan')):.0f}, "
                    f"each plant partition {txn.get('plant', float('nan')):.0f}",
                    flush=True,
                )
                print(f"    {cores_line(cpu)}", flush=True)
            if where is not None:
                print(f"  where the time went (traced; {where}):", flush=True)
                for text in breakdown(where):
                    print(f"  {text}", flush=True)
    if trace is not None and repeat > 1:
        print(f"where the time went, the {repeat} runs' verdicts pooled (traced; {trace}):", flush=True)
        for text in breakdown(*(trace / f"run{k + 1}" for k in range(repeat))):
            print(f"  {text}", flush=True)
    return 1 if failed else 0


def line(label: str, values: Any, fmt: str = ">9.1f", note: str = "") -> str:
    """A table row: the label padded to 64 characters, then the values."""
    return f"{label:<64}" + "".join(format(v, fmt) for v in values) + (f"  {note}" if note else "")


def med(values: list[float]) -> float:
    return float(statistics.median(values))


def runs_spread(values: list[float], fmt: str = ",.0f", failed: frozenset[int] = frozenset()) -> str:
    """``runs: a, b, c``; the runs at the indices in ``failed`` marked ``*`` (a run with a problem)."""
    return "runs: " + ", ".join(format(v, fmt) + ("*" if k in failed else "") for k, v in enumerate(values))


def problems(run: dict[str, Any]) -> list[str]:
    """What went wrong in a run (phase: problem), empty when every flag and verdict came exactly once."""
    return [f"{name}: {run[name]['problem']}" for name in ("tp", "rca", "lat") if run[name]["problem"]]


def report(runs: list[dict[str, Any]], bootstrap: str, how: str) -> bool:
    """Print the table of medians; True when both targets are met.

    A run with a problem (an expected flag or verdict missing, twice or dead-lettered) is in the
    medians too, so its figures are never lost: it is listed first with what went wrong, and its
    figures are marked ``*`` in the runs' spreads.
    """
    n = len(runs)
    load = os.getloadavg()
    print(
        f"broker {bootstrap} ({how}); config/tep.yaml: 5 TEP plants, 52 sensors, one partition per topic; "
        f"median of {n} run(s); load average at the end {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} "
        f"on {os.cpu_count()} CPUs"
    )
    number = [run.get("number", k + 1) for k, run in enumerate(runs)]  # a run that failed has no figures
    failed = frozenset(k for k, run in enumerate(runs) if problems(run))
    for k in sorted(failed):
        print(f"RUN {number[k]} INCOMPLETE (marked * below): " + "; ".join(problems(runs[k])))
        for text in runs[k]["lat"].get("explained", []):
            print(f"    missing {text}")
    lat0 = runs[0]["lat"]
    exact = [number[k] for k in range(n) if k not in failed]
    print(
        f"checked first, run(s) {', '.join(map(str, exact)) or 'none'}: all {runs[0]['tp']['messages']:,} "
        f"(plant, seq) flags of the backlog and all {lat0['messages']:,} of the latency run committed exactly "
        f"once (read_committed), none dead-lettered; all {lat0['verdicts']} verdicts the in-process cores issue "
        f"on the same data, each exactly once; flags of two plants at most "
        + ", ".join(str(r["lat"]["lead"]) for r in runs)
        + " rows apart on the flags topic (the RCA's allowed lateness: 1,000)"
    )
    print(
        "exactly once, per run (latency phase): "
        + "; ".join(
            f"run {number[k]}: {r['lat'].get('lost', '?')} lost, {r['lat'].get('duplicated', '?')} duplicated, "
            f"{r['lat'].get('late', '?')} late of {r['lat'].get('deadletters', '?')} RCA dead letters, "
            f"lead {r['lat']['lead']} rows"
            for k, r in enumerate(runs)
        )
    )

    def spread(values: list[float], fmt: str = ",.0f") -> str:
        return runs_spread(values, fmt, failed)

    ratios = [r["ratio"] for r in runs]
    steady = [r["tp"]["steady"] for r in runs]
    peer_tp = [r["peer"].throughput for r in runs]
    print(f"{'':<64}{'msgs/s':>10}  target")
    print(
        f"{'fedrca: 1 plant worker (plants,params), 60k backlog, mid 80%':<64}{med(steady):>10,.0f}  ({spread(steady)})"
    )
    first_last = [r["tp"]["first_last"] for r in runs]
    print(f"{'        first to last flag':<64}{med(first_last):>10,.0f}")
    cpu = [r["tp"]["cpu_us"] for r in runs]
    start = [r["tp"]["start_s"] for r in runs]
    print(
        f"        worker CPU per sensor message {med(cpu):.0f} us (all threads); "
        f"start-up to the first flag {med(start):.1f} s"
    )
    tp0 = runs[0]["tp"]
    plant_on = [r["tp"]["plant_us"] for r in runs]
    plant_off = [r["tp"]["plant_off_us"] for r in runs]
    print(
        f"        plant handlers alone, in process ({tp0['plant_rows']:,} rows x 5 plants, "
        f"{PLANT_HANDLER_BATCH}-message batches, CPU): {med(plant_on):.1f} us per message with the site's "
        f"re-baselining loop, {med(plant_off):.1f} us without it (with it: {spread(plant_on, '.1f')}; "
        f"without: {spread(plant_off, '.1f')})"
    )
    print(
        f"        its refreshes: every {tp0['every']} of plant time, {tp0['refreshes']} in those rows, "
        f"{med([r['tp']['refresh_ms'] for r in runs]):.1f} ms of CPU each (median), "
        f"{100 * med([r['tp']['refresh_share'] for r in runs]):.0f}% of the handlers' CPU; every plant at one "
        "seq refreshes in the same fetch"
    )
    print(
        line(
            "peer:   kafka-python produce -> consume loop, as fast as possible",
            [med(peer_tp)],
            ">10,.0f",
            spread(peer_tp),
        )
    )
    print(
        f"{'ratio fedrca / peer (each run against its own peer)':<64}{med(ratios):>9.2f}x  >= {TARGET_RATIO}x  "
        f"({spread(ratios, '.2f')})"
    )
    rca = [r["rca"]["steady"] for r in runs]
    rca_cpu = [r["rca"]["cpu_us"] for r in runs]
    label = f"fedrca: 1 RCA worker (rca), {runs[0]['rca']['flags'] // 1000}k-flag backlog, mid 80%"
    print(f"{label:<64}{med(rca):>10,.0f}  >= {TARGET_RCA:,.0f} flags/s  ({spread(rca)})")
    print(
        f"        RCA worker CPU per flag {med(rca_cpu):.1f} us (all threads; runs: "
        + ", ".join(f"{v:.1f}" for v in rca_cpu)
        + f"); {runs[0]['rca']['batches']} batches, {runs[0]['rca']['verdicts']} verdicts, "
        f"resident memory at most {med([r['rca']['rss'] for r in runs]):.0f} MiB while it worked"
    )
    handler = [r["rca"]["handler_us"] for r in runs]
    per_row = [r["rca"]["handler_rows_us"] for r in runs]
    speedup = [r["rca"]["handler_rows_us"] / r["rca"]["handler_us"] for r in runs]
    print(
        f"        RCA handler alone, in process ({runs[0]['rca']['handler_flags']:,} of the flags, "
        f"{HANDLER_BATCH:,}-flag batches, CPU): {med(handler):.1f} us per flag; the same with the per-row "
        f"engine {med(per_row):.1f} us ({med(speedup):.2f}x; {spread(speedup, '.2f')}); the same verdicts"
    )
    print()
    print(f"{'':<64}{'p50 ms':>9}{'p99 ms':>9}{'p99.9 ms':>9}  target")
    met = med(ratios) >= TARGET_RATIO and med(rca) >= TARGET_RCA
    for k, rate in enumerate(RATES):
        offered = rate * 5
        achieved = med([r["lat"]["rates"][k]["achieved"] for r in runs])
        verdicts = [r["lat"]["rates"][k]["verdict"] for r in runs]
        count = runs[0]["lat"]["rates"][k]["verdicts"]
        p = [med([v[i] for v in verdicts]) for i in range(3)]
        target = f"p99 < {TARGET_P99_MS[k]:.0f}"
        met = met and p[1] < TARGET_P99_MS[k]
        label = f"fedrca: produce -> verdict consumed, {offered:,.0f} msgs/s ({achieved:,.0f} achieved)"
        print(f"{label:<64}{p[0]:>9.1f}{p[1]:>9.1f}{p[2]:>9.1f}  {target}")
        p99s = [v[1] for v in verdicts]
        print(f"        {count} verdicts per run (p99.9 of so few = their max); p99 {spread(p99s, '.1f')}")
        flag = [r["lat"]["rates"][k]["flag"] for r in runs]
        f = [med([v[i] for v in flag]) for i in range(3)]
        print(line("        produce -> flag committed (flag create time, all flags)", f))
        for stage in STAGES:
            values = [r["lat"]["rates"][k]["stages"].get(stage) for r in runs]
            if any(v is None for v in values):
                print(f"        stage {stage}: not exported")
                continue
            s = [med([v[i] for v in values]) for i in range(3)]  # type: ignore[index]
            what = {
                "consume": "sensor created -> fetched by the plant worker",
                "flags": "sensor created -> its flag committed",
                "aligned": "flag created -> aligned + judged by the RCA",
                "verdict": "flag created -> its batch's verdicts committed",
            }[stage]
            print(f"{'        histogram ' + stage + ': ' + what:<64}{s[0]:>9.1f}{s[1]:>9.1f}{s[2]:>9.1f}")
        load = [r["lat"]["rates"][k]["cpu"] for r in runs]
        if all("plants_batches" in c and c["plants_batches"] > 0 for c in load):
            per_batch = med([1e3 * c["plants_cpu"] / c["plants_batches"] for c in load])
            per_msg = med([1e6 * c["plants_cpu"] / c["messages"] for c in load])
            msgs = med([c["messages"] / c["plants_batches"] for c in load])
            print(
                f"        plant worker CPU: {per_msg:.0f} us per message, {per_batch:.2f} ms per partition batch "
                f"({msgs:.1f} messages per batch)"
            )
        if all("rca_batches" in c and c["rca_batches"] > 0 for c in load):
            per_batch = med([1e3 * c["rca_cpu"] / c["rca_batches"] for c in load])
            per_msg = med([1e6 * c["rca_cpu"] / c["messages"] for c in load])
            print(f"        RCA worker CPU: {per_msg:.0f} us per flag, {per_batch:.2f} ms per batch")
        if all("seconds" in c for c in load):
            print(f"        {cores_line({key: med([c[key] for c in load]) for key in load[0]})} (median of runs)")
        if all("txn_per_s" in r["lat"]["rates"][k] for r in runs):
            rca = med([r["lat"]["rates"][k]["txn_per_s"]["rca"] for r in runs])
            plant = med([r["lat"]["rates"][k]["txn_per_s"]["plant"] for r in runs])
            print(f"        transactions per second: RCA worker {rca:.0f}, each plant partition {plant:.0f}")
        peer = [r["peer_lat"][k] for r in runs]
        q = [med([v[i] for v in peer]) for i in range(3)]
        print(line(f"peer:   kafka-python produce -> consume at {offered:,.0f} msgs/s", q))
    if failed:
        print(f"* run(s) {', '.join(str(number[k]) for k in sorted(failed))} had a problem (listed above)")
    rss = {name: med([r["lat"]["rss"][name] for r in runs]) for name in ("plants", "rca")}
    print(
        f"resident memory at the end: plant worker (5 plants) {rss['plants']:.0f} MiB, RCA worker {rss['rca']:.0f} MiB"
    )
    print(
        "fedrca's path is two workers, three topics and two Kafka transactions (sensors -> flags -> verdicts); "
        "the histogram figures are bucket-interpolated (fedrca.observability.STAGE_LATENCY_BUCKETS)"
    )
    return met


def main(argv: list[str] | None = None, repeat: int | None = None) -> int:
    """Print the table; 0 when both targets are met and every expected output arrived."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=1, help="runs to take the median of (make bench: 3)")
    parser.add_argument(
        "--order-only",
        action="store_true",
        help="only the latency phase, for its account: per run the largest lead of a flag over a newer one "
        "on the flags topic, the RCA's late dead letters, verdicts lost and duplicated (counts, no timing)",
    )
    parser.add_argument(
        "--latency-only",
        action="store_true",
        help="only the latency phase, per run: produce -> verdict and the stages at 1,000 and 5,000 msgs/s, the "
        "workers' CPU per batch and transactions per second, and its account (no peer, no target: an A/B of two "
        "codes back to back on one machine)",
    )
    parser.add_argument(
        "--trace",
        type=Path,
        metavar="DIR",
        help="with --latency-only: run the workers traced (bench/latency_trace.py) and print where the slowest "
        "verdicts spent their time; the traces are kept in DIR/run<k>",
    )
    parser.add_argument(
        "--worker-option",
        action="append",
        default=[],
        metavar="ARG",
        help="one more argument of every worker's fedrca run (repeat it; e.g. --worker-option=--batch-every=0.02)",
    )
    args = parser.parse_args([] if argv is None else argv)
    WORKER_OPTIONS[:] = args.worker_option
    if WORKER_OPTIONS:
        print(f"bench_streams: every worker runs with {' '.join(WORKER_OPTIONS)}", flush=True)
    if args.trace is not None and not args.latency_only:
        parser.error("--trace goes with --latency-only")
    repeat = repeat or args.repeat
    sys.path.insert(0, str(HERE))
    import logging

    from bench_kafka import release_broker, start_broker

    logging.getLogger("kafka").setLevel(logging.ERROR)
    # the in-process replays (rca_flags, the expected verdicts) run the TEP fault files: their refusals
    # and sensor-fault notices are the plants' business, not the benchmark's table
    for name in ("fedrca.drift", "fedrca.streams"):
        logging.getLogger(name).setLevel(logging.ERROR)
    global BROKER_PID
    bootstrap, state, took = start_broker()
    BROKER_PID = int(state["pid"]) if state.get("pid") else None
    how = "reused" if state["reused"] else f"started in {took:.1f} s"
    if args.order_only or args.latency_only:
        try:
            if args.order_only:
                return order_only(bootstrap, repeat)
            return latency_only(bootstrap, repeat, args.trace)
        finally:
            release_broker()
    runs = []
    crashed: list[str] = []
    try:
        with tempfile.TemporaryDirectory(prefix="fedrca-bench-streams-") as tmp:
            for k in range(repeat):
                try:
                    run = one_run(bootstrap, Path(tmp), k, repeat)
                except RuntimeError as exc:  # a worker died or a wait timed out: the other runs still count
                    crashed.append(f"run {k + 1}: {exc}")
                    print(f"  run {k + 1}/{repeat}: FAILED: {exc}", file=sys.stderr, flush=True)
                    continue
                run["number"] = k + 1
                runs.append(run)
                first = run["lat"]["rates"][0]
                print(  # each run's headline as it ends (a long session on a shared machine may be cut short)
                    f"  run {k + 1}/{repeat}: {run['tp']['steady']:,.0f} msgs/s = {run['ratio']:.2f}x the peer; "
                    f"verdict p50/p99/p99.9 at {first['offered']:,.0f} msgs/s: "
                    + "/".join(f"{v:.0f}" for v in first["verdict"])
                    + f" ms; RCA worker {run['rca']['steady']:,.0f} flags/s; problems: "
                    + ("; ".join(problems(run)) or "none"),
                    file=sys.stderr,
                    flush=True,
                )
    finally:
        release_broker()
    met = bool(runs) and report(runs, bootstrap, how)
    for text in crashed:
        print(f"bench_streams: FAILED {text}")
    incomplete = sum(1 for run in runs if problems(run))
    if incomplete or crashed:
        print(f"bench_streams: {incomplete + len(crashed)} of {repeat} run(s) incomplete or failed (exit 1)")
        return 1
    return 0 if met else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
