#!/usr/bin/env python3
"""Many sites, workers joining and leaving: exactly-once and the cost of a rebalance.

``--sites`` sites of ``--plants`` plants each (the TEP process split into that many units,
``config/tep.yaml``'s detector settings) stream at once on the repository's broker
(``tools/kafka/broker.py``). Every worker serves all of them (``fedrca run`` with one
``--config`` per site and ``--group``): ``--plant-workers`` plant workers share the sites'
sensors partitions in one consumer group, ``--rca-workers`` RCA workers share their flags
partitions (one per site) in another, so the sites spread over the RCA workers. Site k
replays TEP fault file 01, 04, 05 or 06 (``data/tep/dNN_te.dat``, 960 rows, repeated with
seq continuing) at ``--rate`` rows per second, all sites together on one absolute schedule.

While it streams, one worker is **added** (``--add``: a plant or an RCA worker) after
``--lead`` rows; once it has joined and every partition is served, ``--lead`` more rows;
then one is **killed** with ``kill -9`` (``--kill``; not restarted); once its partitions are
served again, ``--lead`` more rows, and the stream ends. A monitor polls both consumer
groups every 0.25 s. Reported:

* per event, **the time until every partition is served again**: from the event to the
  first moment its group is Stable with every partition assigned to a live member (for a
  kill this includes the session timeout after which the broker declares the worker dead);
* produce -> verdict latency (p50 / p99 / max; a verdict's receive time by a separate
  consumer process minus the send time of its row's last sensor message) of the rows sent
  **during each rebalance** (from its start: the kill, or the added worker's join, until every
  partition is served again), and of the rows sent outside the rebalances;
* **exactly once**: every site's committed verdicts and flags against the in-process replay
  of the same data through the same cores (:func:`fedrca.streams.embedded.replay_frame`):
  lost, duplicated, different (``tools/faults.py``'s comparison).

Usage::

    tools/sites.py                                   # 10 sites x 10 plants, 3 + 2 workers, 20 rows/s
    tools/sites.py --sites 4 --plants 5 --rate 10 --json sites.json
    tools/sites.py --add rca --kill plants           # the other way round

Exit status 0 when nothing was lost, duplicated or different and every rebalance ended within
twice the session timeout, 1 otherwise, 2 on a setup error. ``bench/bench_sites.py`` runs it as
a benchmark (``python bench/run.py sites``).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import multiprocessing
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

TRAIN = REPO / "data" / "tep" / "d00.dat"
FAULTS = ("01", "04", "05", "06")
BROKER = REPO / "tools" / "kafka" / "broker.py"
#: rows wait for a dead worker's plants longer than any outage of the scenario (20 rows/s: 45 s), within
#: the bound of ten plants (938 with the evidence window: docs/limits.md)
LATENESS = 900
SESSION_TIMEOUT = 10.0
FEDRCA = [sys.executable, "-m", "fedrca.cli"]


@dataclass(frozen=True)
class Plan:
    """What one scenario runs."""

    sites: int = 10
    plants: int = 10
    plant_workers: int = 3
    rca_workers: int = 2
    rate: float = 20.0  # rows per second and site
    add: str = "plants"  # the role of the worker added mid-run
    kill: str = "rca"  # the role of the worker killed with -9 mid-run
    session_timeout: float = SESSION_TIMEOUT
    lead: int = 200  # rows streamed before the worker is added, and after each rebalance before the next event
    most: int = 20 * 960  # rows per site at most (the run stops early when both events are over)


@dataclass
class Event:
    """A worker added or killed, and what it cost."""

    what: str  # "add plants" / "kill -9 rca"
    worker: str
    group: str
    at: float  # time.time() of the event
    rebalance_at: float | None = None  # the rebalance's start: the kill; for an added worker, its join
    served_after: float | None = None  # s from the rebalance's start until every partition was served again
    unstable_s: float = 0.0  # s the group was not Stable in that span
    rows_during: int = 0
    verdicts_during: int = 0
    verdict_ms_during: tuple[float, float, float] = (float("nan"),) * 3  # p50, p99, max


@dataclass
class Result:
    plan: dict[str, Any]
    events: list[Event]
    verdicts_before: int
    verdict_ms_before: tuple[float, float, float]
    verdict_ms_all: tuple[float, float, float]
    comparison: dict[str, int]
    first_problems: list[str]
    seconds: float
    ok: bool
    problems: list[str] = field(default_factory=list)


# -- the sites ------------------------------------------------------------------------------------
def site_design(plants: int) -> dict[str, Any]:
    """``config/tep.yaml`` with the 52 TEP variables split into ``plants`` units of neighbouring columns."""
    from fedrca.datasets.tep import TEP_COLUMNS

    doc = yaml.safe_load((REPO / "config" / "tep.yaml").read_text(encoding="utf-8"))
    groups = np.array_split(np.array(TEP_COLUMNS), plants)
    doc["plants"] = [{"name": f"u{k:02d}", "sensors": [str(c) for c in cols]} for k, cols in enumerate(groups)]
    doc["rca"] = {"graph": {"source": "complete"}}
    for section in ("training", "edge"):  # about the five TEP units: not this design's
        doc.pop(section, None)
    return doc


def write_sites(workdir: Path, tag: str, plan: Plan) -> list[Path]:
    """One configuration per site, the same design under fresh names (fresh topics)."""
    design = site_design(plan.plants)
    paths = []
    for k in range(plan.sites):
        doc = {**design, "site": f"{tag}s{k:02d}"}
        path = workdir / f"{doc['site']}.yaml"
        path.write_text(yaml.safe_dump(doc, sort_keys=False), encoding="utf-8")
        paths.append(path)
    return paths


def fault_frame(k: int, rows: int) -> Any:
    """Site k's data: its fault file repeated (seq continuing) to ``rows`` rows, 5 decimals as on the wire."""
    import pandas as pd

    from fedrca.datasets.tep import load_tep

    one = load_tep(REPO / "data" / "tep" / f"d{FAULTS[k % len(FAULTS)]}_te.dat").round(5)
    return pd.concat([one] * (rows // len(one) + 1), ignore_index=True).iloc[:rows]


def expected(configs: list[Any], rows: int) -> tuple[dict[str, dict[str, Any]], dict[str, dict[Any, Any]]]:
    """Per site: the verdicts (id -> verdict) and flags ((plant, seq) -> bits, version) the in-process cores give
    on its first ``rows`` rows. The sites share one design: each fault file is replayed once and its outputs
    re-named per site."""
    from fedrca.application.site import plant_runtime, rca_runtime
    from fedrca.streams.embedded import replay_frame
    from fedrca.streams.runtime import RuntimeSettings, SiteRuntime

    settings = RuntimeSettings(allowed_lateness=LATENESS)
    by_fault: dict[str, Any] = {}
    verdicts: dict[str, dict[str, Any]] = {}
    flags: dict[str, dict[Any, Any]] = {}
    for k, config in enumerate(configs):
        fault = FAULTS[k % len(FAULTS)]
        if fault not in by_fault:
            frame = fault_frame(k, rows)
            runtime = SiteRuntime(
                plant_runtime(config, TRAIN, settings=settings), rca_runtime(config, settings=settings)
            )
            values = {p.name: frame[list(p.sensors)].to_numpy() for p in config.plants}
            by_fault[fault] = replay_frame(runtime, values, sample_seconds=180.0)
        run = by_fault[fault]
        sited = [dataclasses.replace(v, site=config.site) for v in run.verdicts]
        verdicts[config.site] = {v.id: v for v in sited}
        flags[config.site] = {(f.plant, f.seq): (f.zc, f.za, f.model_version, f.degraded) for f in run.flags}
    return verdicts, flags


class Feed:
    """The sites' sensor messages, row by row (each site's fault file repeated, seq continuing)."""

    def __init__(self, configs: list[Any], most: int) -> None:
        self.configs = configs
        self.arrays = []
        for k, config in enumerate(configs):
            frame = fault_frame(k, most)
            self.arrays.append({p.name: frame[list(p.sensors)].to_numpy().tolist() for p in config.plants})
        self.topics = [{p: c.topic("sensors", plant=p) for p in c.plant_names} for c in configs]

    def row(self, k: int, t: int) -> list[tuple[str, bytes, bytes]]:
        """(topic, key, value) of site k's messages of row t."""
        site = self.configs[k].site
        return [
            (
                self.topics[k][plant],
                plant.encode(),
                json.dumps(
                    {"site": site, "plant": plant, "ts": t * 180.0, "seq": t, "values": values[t]},
                    separators=(",", ":"),
                ).encode(),
            )
            for plant, values in self.arrays[k].items()
        ]


# -- watching ---------------------------------------------------------------------------------------
class GroupMonitor:
    """Polls consumer groups (describe_groups) every ``every`` s: (time, group, state, member -> partitions)."""

    def __init__(self, bootstrap: str, groups: list[str], every: float = 0.25) -> None:
        self.bootstrap, self.groups, self.every = bootstrap, groups, every
        self.samples: list[tuple[float, str, str, dict[str, set[tuple[str, int]]]]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> GroupMonitor:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    def _run(self) -> None:
        from kafka.admin import KafkaAdminClient
        from kafka.errors import KafkaError

        admin = KafkaAdminClient(bootstrap_servers=self.bootstrap, client_id="fedrca-sites-monitor")
        try:
            while not self._stop.is_set():
                try:
                    described = admin.describe_groups(self.groups)
                except KafkaError:
                    described = {}
                now = time.time()
                for group in self.groups:
                    d = described.get(group) or {}
                    members = {
                        m["client_id"]: {
                            (a["topic"], p)
                            for a in (m.get("member_assignment") or {}).get("assigned_partitions", [])
                            for p in a["partitions"]
                        }
                        for m in d.get("members", [])
                    }
                    self.samples.append((now, group, str(d.get("group_state", "?")), members))
                self._stop.wait(self.every)
        finally:
            admin.close()

    def rebalance_start(self, group: str, since: float, member: str) -> float | None:
        """When ``member`` first shows in ``group`` after ``since``, or the group first leaves Stable (a join)."""
        for t, g, state, members in self.samples:
            if g == group and t >= since and (state != "Stable" or member in members):
                return t
        return None

    def served_again(
        self,
        group: str,
        since: float,
        partitions: set[tuple[str, int]],
        alive: Callable[[str], bool],
        member: str | None = None,
    ) -> tuple[float | None, float]:
        """(seconds from ``since`` until ``group`` was Stable with every partition assigned to a live member
        (and ``member`` among them), seconds it was not Stable in that span)."""
        unstable, last = 0.0, since
        for t, g, state, members in self.samples:
            if g != group or t < since:
                continue
            if state != "Stable":
                unstable += t - last
            last = t
            owned = {tp for client, tps in members.items() if alive(client) for tp in tps}
            present = member is None or member in members
            if state == "Stable" and present and partitions <= owned and all(alive(c) for c in members):
                return t - since, unstable
        return None, unstable


def _read_verdicts(bootstrap: str, topics: list[str], ready: Any, stop: Any, results: Any) -> None:
    """Consumer process: (site, id, seq, receive time ns) of every committed verdict of ``topics``, until ``stop``."""
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(
        bootstrap_servers=bootstrap,
        group_id=None,
        enable_auto_commit=False,
        fetch_max_wait_ms=10,
        isolation_level="read_committed",
    )
    tps = [TopicPartition(t, 0) for t in topics]
    consumer.assign(tps)
    consumer.seek_to_beginning(*tps)
    for tp in tps:
        consumer.position(tp)
    ready.set()
    got = []
    while not stop.is_set():
        for records in consumer.poll(timeout_ms=50).values():
            now = time.time_ns()
            for record in records:
                verdict = json.loads(record.value)
                got.append((verdict["site"], verdict["id"], int(verdict["seq"]), now))
    consumer.close()
    results.put(got)


def quantiles(ms: list[float]) -> tuple[float, float, float]:
    if not ms:
        return (float("nan"),) * 3
    a = np.array(ms)
    return float(np.percentile(a, 50)), float(np.percentile(a, 99)), float(a.max())


# -- the scenario -----------------------------------------------------------------------------------
def run(plan: Plan, bootstrap: str, workdir: Path, log: Callable[[str], None] = print) -> Result:
    from kafka import KafkaProducer
    from tools.cluster import Worker, json_records, unique_name
    from tools.faults import compare

    from fedrca.config import load_config
    from fedrca.connectors.kafka import ensure_site_topics
    from fedrca.contracts import Verdict

    began = time.monotonic()
    tag = unique_name("m")
    group = f"{tag}g"
    paths = write_sites(workdir, tag, plan)
    configs = [load_config(p) for p in paths]
    for config in configs:
        ensure_site_topics(bootstrap, config)
    feed = Feed(configs, plan.most)
    site_args = [a for p in paths for a in ("--config", str(p))]

    def command(name: str, role: str) -> list[str]:
        roles = "plants,params" if role == "plants" else "rca"
        return [
            *FEDRCA, "run", *site_args, "--group", group, "--broker", f"kafka://{bootstrap}",
            *(["--train", str(TRAIN)] if role == "plants" else []),
            "--roles", roles, "--worker-name", name, "--data-dir", str(workdir / "state"),
            "--session-timeout", f"{plan.session_timeout:g}", "--allowed-lateness", str(LATENESS),
            "--log-level", "info",
        ]  # fmt: skip

    workers: dict[str, Worker] = {}

    def start(name: str, role: str) -> Worker:
        workers[name] = Worker(name, command(name, role), workdir / name).start()
        return workers[name]

    plants_group, rca_group = f"fedrca-{group}-plants", f"fedrca-{group}-rca"
    group_of = {"plants": plants_group, "rca": rca_group}
    partitions = {
        plants_group: {(c.topic("sensors", plant=p), 0) for c in configs for p in c.plant_names},
        rca_group: {(c.topic("flags"), 0) for c in configs},
    }
    killed: set[str] = set()

    def client(name: str) -> str:
        return f"fedrca-{group}-{name}"

    def alive(client_id: str) -> bool:
        return not any(client_id == client(k) for k in killed)

    monitor = GroupMonitor(bootstrap, [plants_group, rca_group]).start()

    def covered(group_name: str, need: set[str]) -> bool:
        """The group is Stable, every partition assigned, exactly the live members ``need`` in it."""
        for _, g, state, members in reversed(monitor.samples):
            if g == group_name:
                owned = {tp for tps in members.values() for tp in tps}
                return state == "Stable" and set(members) == need and partitions[group_name] <= owned
        return False

    ctx = multiprocessing.get_context("spawn")
    ready, stop, results = ctx.Event(), ctx.Event(), ctx.Queue()
    reader = ctx.Process(
        target=_read_verdicts,
        args=(bootstrap, [c.topic("verdicts") for c in configs], ready, stop, results),
        daemon=True,
    )
    events: list[Event] = []
    sent = np.full((plan.sites, plan.most), np.nan)
    rows = 0
    members = {
        "plants": {f"p{k + 1}" for k in range(plan.plant_workers)},
        "rca": {f"r{k + 1}" for k in range(plan.rca_workers)},
    }
    try:
        for role, names in members.items():
            for name in sorted(names):
                start(name, role)
        for role, names in members.items():
            _wait(lambda r=role, n=names: covered(group_of[r], {client(x) for x in n}), 900, f"the {role} workers",
                  workers)  # fmt: skip
        reader.start()
        if not ready.wait(120):
            raise RuntimeError("the verdict reader did not start")
        log(f"workers ready after {time.monotonic() - began:.0f} s; {plan.sites} sites stream at {plan.rate:g} rows/s")
        producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=5, batch_size=64 * 1024)
        t0 = time.monotonic()
        # the script: stream `lead` rows; add a worker; once it has joined and every partition is served, `lead`
        # more rows; kill one; once its partitions are served again, `lead` more rows; stop
        stage, due = "add", plan.lead
        while rows < plan.most and stage != "done":
            delay = t0 + rows / plan.rate - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            for k in range(plan.sites):
                for topic, key, value in feed.row(k, rows):
                    producer.send(topic, key=key, value=value)
                sent[k, rows] = time.time()
            rows += 1
            if rows < due:
                continue
            if stage == "add":
                name = ("p" if plan.add == "plants" else "r") + str(len(members[plan.add]) + 1)
                start(name, plan.add)
                members[plan.add].add(name)
                events.append(Event(f"add {plan.add}", name, group_of[plan.add], time.time()))
                stage, due = "joined", rows + 1
            elif stage == "joined":
                # everything served with the new member in: `lead` more rows, then the kill
                if covered(group_of[plan.add], {client(x) for x in members[plan.add]}):
                    stage, due = "kill", rows + plan.lead
                else:
                    due = rows + 1
            elif stage == "kill":
                name = "p1" if plan.kill == "plants" else "r1"
                workers[name].kill9()
                killed.add(name)
                members[plan.kill].discard(name)
                events.append(Event(f"kill -9 {plan.kill}", name, group_of[plan.kill], time.time()))
                stage, due = "served", rows + 1
            elif stage == "served":
                if covered(group_of[plan.kill], {client(x) for x in members[plan.kill]}):
                    stage, due = "last", rows + plan.lead
                else:
                    due = rows + 1
            else:
                stage = "done"
        producer.flush()
        producer.close()
        log(f"sent {rows} rows per site in {time.monotonic() - t0:.0f} s; the in-process replay of them")
        want_verdicts, want_flags = expected(configs, rows)
        wanted = {v for site in want_verdicts.values() for v in site}
        log(f"waiting for the {len(wanted)} expected verdicts")
        deadline = time.monotonic() + 900
        while time.monotonic() < deadline:
            found = {v["id"] for c in configs for v in json_records(bootstrap, c.topic("verdicts"))}
            if wanted <= found:
                break
            time.sleep(5)
        time.sleep(2 * plan.session_timeout)  # the last group offsets commit when the input runs dry
    finally:
        monitor.stop()
        for worker in workers.values():
            worker.stop()
        stop.set()
    got = results.get(timeout=120)
    reader.join(30)
    # what the broker holds, per site
    totals: dict[str, int] = {}
    problems: list[str] = []
    for config in configs:
        comparison = compare(
            want_verdicts[config.site],
            want_flags[config.site],
            json_records(bootstrap, config.topic("verdicts")),
            json_records(bootstrap, config.topic("flags")),
            decode=Verdict.from_dict,
        )
        for key, value in dataclasses.asdict(comparison).items():
            if isinstance(value, int):
                totals[key] = totals.get(key, 0) + value
        problems += [f"{config.site}: {p}" for p in comparison.first_problems]
    # latencies: a verdict's receive time minus the send time of its row's last message
    index = {c.site: k for k, c in enumerate(configs)}
    latency = [(sent[index[site], seq], (now / 1e9 - sent[index[site], seq]) * 1e3) for site, _, seq, now in got]
    windows = []
    for event in events:
        joined = client(event.worker) if event.what.startswith("add") else None
        event.rebalance_at = event.at if joined is None else monitor.rebalance_start(event.group, event.at, joined)
        if event.rebalance_at is None:
            continue  # the added worker never joined
        event.served_after, event.unstable_s = monitor.served_again(
            event.group, event.rebalance_at, partitions[event.group], alive, joined
        )
        begin = event.rebalance_at
        end = begin + (event.served_after if event.served_after is not None else 60.0)
        windows.append((begin, end))
        during = [ms for t, ms in latency if begin <= t <= end]
        event.rows_during = int(((sent >= begin) & (sent <= end)).sum())
        event.verdicts_during = len(during)
        event.verdict_ms_during = quantiles(during)
    # outside every rebalance (and the session timeout of a kill: the rows a dead worker held wait for it)
    calm = [ms for t, ms in latency if not any(b <= t <= e for b, e in windows)]
    c = totals
    lost = c.get("verdicts_missing", 0) + c.get("flags_missing", 0)
    duplicated = c.get("verdicts_duplicated", 0) + c.get("flags_duplicated", 0)
    different = c.get("verdicts_different", 0) + c.get("verdicts_unexpected", 0) + c.get("flags_different", 0)
    checks = []
    if lost or duplicated or different:
        checks.append(f"{lost} lost, {duplicated} duplicated, {different} different")
    if len(events) < 2:
        checks.append(f"the run ended after {rows} rows, before both events (--most)")
    for event in events:
        if event.served_after is None or event.served_after > 2 * plan.session_timeout:
            checks.append(f"{event.what}: partitions served again after {event.served_after} s (> 2 x session timeout)")
    return Result(
        {**dataclasses.asdict(plan), "rows": rows},
        events,
        len(calm),
        quantiles(calm),
        quantiles([ms for _, ms in latency]),
        {"lost": lost, "duplicated": duplicated, "different": different, **totals},
        problems[:8],
        round(time.monotonic() - began, 1),
        not checks,
        checks,
    )


def _wait(condition: Callable[[], bool], timeout: float, what: str, workers: dict[str, Any]) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        for name, worker in workers.items():
            if not worker.alive:
                raise RuntimeError(f"worker {name} exited:\n{worker.log_tail()}")
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(0.5)


def table(result: Result) -> str:
    """The scenario's figures as markdown (docs/sizing.md)."""
    p = result.plan
    lines = [
        f"{p['sites']} sites x {p['plants']} plants, {p['plant_workers']} plant + {p['rca_workers']} RCA workers, "
        f"{p['rows']} rows per site at {p['rate']:g} rows/s "
        f"({p['sites'] * p['plants'] * p['rate']:,.0f} sensor msgs/s), "
        f"session timeout {p['session_timeout']:g} s",
        "",
        "| | joined after s | rows | verdicts | served again after s | not Stable s | verdict p50 / p99 / max ms |",
        "|---|---|---|---|---|---|---|",
        f"| outside the rebalances | | | {result.verdicts_before} | | | "
        + " / ".join(f"{v:,.0f}" for v in result.verdict_ms_before)
        + " |",
    ]
    for e in result.events:
        served = "never" if e.served_after is None else f"{e.served_after:.1f}"
        joined = "" if e.rebalance_at is None or not e.what.startswith("add") else f"{e.rebalance_at - e.at:.1f}"
        lines.append(
            f"| {e.what} ({e.worker}), during the rebalance | {joined} | {e.rows_during} | {e.verdicts_during} | "
            f"{served} | {e.unstable_s:.1f} | " + " / ".join(f"{v:,.0f}" for v in e.verdict_ms_during) + " |"
        )
    c = result.comparison
    lines += [
        "",
        f"exactly once against the in-process replay: {c.get('verdicts_found', 0)} verdicts and "
        f"{c.get('flags_found', 0)} flags compared; {c['lost']} lost, {c['duplicated']} duplicated, "
        f"{c['different']} different",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    d = Plan()
    parser.add_argument("--sites", type=int, default=d.sites)
    parser.add_argument("--plants", type=int, default=d.plants, help="plants per site (2..52)")
    parser.add_argument("--plant-workers", type=int, default=d.plant_workers)
    parser.add_argument("--rca-workers", type=int, default=d.rca_workers)
    parser.add_argument("--rate", type=float, default=d.rate, help="rows per second and site")
    parser.add_argument("--lead", type=int, default=d.lead, help="rows before the first event and after each")
    parser.add_argument("--add", choices=["plants", "rca"], default=d.add, help="role of the worker added mid-run")
    parser.add_argument("--kill", choices=["plants", "rca"], default=d.kill, help="role of the worker killed mid-run")
    parser.add_argument("--session-timeout", type=float, default=d.session_timeout)
    parser.add_argument("--json", type=Path, default=None, help="write the result to this file")
    args = parser.parse_args(argv)
    plan = Plan(
        args.sites, args.plants, args.plant_workers, args.rca_workers, args.rate, args.add, args.kill,
        args.session_timeout, args.lead,
    )  # fmt: skip
    if not 2 <= plan.plants <= 52 or plan.sites < 1 or plan.plant_workers < 1 or plan.rca_workers < 1:
        print("tools/sites.py: --plants must be 2..52, --sites and the worker counts at least 1", file=sys.stderr)
        return 2
    from tools.faults import Broker

    workdir = Path(tempfile.mkdtemp(prefix="fedrca-sites-"))
    broker = Broker(workdir / "kafka")
    try:
        bootstrap = broker.start()
    except RuntimeError as exc:
        print(f"tools/sites.py: {exc}", file=sys.stderr)
        return 2
    try:
        result = run(plan, bootstrap, workdir, log=lambda m: print(m, file=sys.stderr, flush=True))
    finally:
        broker.stop()
    if args.json:
        args.json.write_text(json.dumps(dataclasses.asdict(result), indent=1, default=str))
    print(table(result))
    for problem in result.problems + result.first_problems:
        print(problem)
    return 0 if result.ok else 1


if __name__ == "__main__":
    sys.exit(main())
