"""Where the produce -> verdict time of the slowest verdicts goes: bench_streams' latency phase, traced.

``python bench/bench_streams.py --latency-only --trace DIR`` starts each worker through this module
(``python bench/latency_trace.py TRACE_FILE run ...``, then ``fedrca run`` as usual). Before the
worker starts, it wraps four private methods of :class:`fedrca.streams.loop.TransactionalLoop` and
writes, per batch transaction: when its fetch was called and returned, when its handler ran (wall
clock and the thread's CPU), when it was scheduled, when its records were in the logs (the Produce
answered) and when it committed, with the verdict ids it carried. An asyncio task of the worker's
event loop writes every stretch the loop was held for :data:`LAG_MS` or longer (wall clock and the
main thread's CPU meanwhile: CPU near the wall clock is synchronous work on the loop, CPU far below
it is the process waiting for a core); a ``gc.callbacks`` hook writes every generation-2
collection and any collection of :data:`GC_MS` or longer, and the counts per generation.

:func:`breakdown` joins them with what the benchmark saw (the row's last sensor message sent, the
flags' offsets in the flags topic, the verdict received) per verdict: the stages of its way, the
slowest :data:`SLOWEST` of each offered rate against all verdicts of that rate, and what both
workers' event loops and collectors did while each of the slowest was on its way.

    python bench/latency_trace.py --analyse DIR [DIR ...]   # the breakdown again, the runs' verdicts pooled

The wrappers cost a few microseconds per batch and the monitor wakes the loop every
:data:`LAG_PERIOD` s: a traced run is a little slower than an untraced one; read its shares and
its events, not its absolute figures (and on a shared machine, label them so).
"""

from __future__ import annotations

import asyncio
import atexit
import bisect
import contextlib
import gc
import itertools
import json
import math
import runpy
import statistics
import sys
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

#: The environment variable of the what-ifs (:func:`_what_if`)
WHAT_IF = "FEDRCA_TRACE_WHAT_IF"
#: Seconds the monitor sleeps between two looks at the event loop
LAG_PERIOD = 0.002
#: A stretch the event loop was held this long or longer (ms, beyond LAG_PERIOD) is written
LAG_MS = 5.0
#: A collection of a generation below 2 this long or longer (ms) is written (generation 2: every one)
GC_MS = 1.0
#: Seconds between two writes of the trace file
FLUSH_EVERY = 0.5
#: Seconds the stall sampler's thread sleeps between two looks at the event loop's thread
SAMPLE_PERIOD = 0.003
#: The loop held this long (ms) or longer: the sampler records what its thread is doing until it is free
STALL_MS = 10.0
#: Share of the verdicts of a rate, the slowest, shown one by one (at least LEAST of them)
SLOWEST = 0.02
LEAST = 3
#: The stages of a verdict's way, between the points of :func:`_points`
STAGES = (
    ("plant loop busy", "sensor message sent -> the plant worker's next fetch called (0: a fetch was waiting)"),
    ("plant fetch", "-> that fetch returned, holding the message"),
    ("plant wait", "-> its handler started (other partitions' handlers, a partition whose producers are busy)"),
    ("plant handler", "the plant handler of its batch"),
    ("plant send", "-> its records in the logs (the transaction before it sent, AddPartitionsToTxn, Produce)"),
    ("plant commit", "-> the transaction committed (the one before it committed, the group offset, EndTxn)"),
    ("LSO wait", "-> every plant txn holding an earlier flag committed too (read_committed: none past an open txn)"),
    ("RCA loop busy", "-> the RCA worker's next fetch called (0: a fetch was waiting)"),
    ("RCA fetch", "-> that fetch returned, holding the row's last flag (markers, fetch)"),
    ("RCA wait", "-> the RCA handler started"),
    ("RCA handler", "the RCA handler of its batch"),
    ("RCA send", "-> its records in the logs"),
    ("RCA commit", "-> the transaction committed"),
    ("to consumer", "-> received by the benchmark's read_committed consumer (markers, fetch, its process)"),
)


# -- in the worker ----------------------------------------------------------------------------------
class _Tracer:
    """The trace of one worker process: records gathered in memory, written every FLUSH_EVERY s."""

    def __init__(self, path: Path) -> None:
        # open for the worker's life: flushed every FLUSH_EVERY s and at exit
        self._out = open(path, "w", encoding="utf-8")  # noqa: SIM115
        self._pending: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        self._gc_began = 0.0
        self._gc_wall = 0.0
        self.gc_count = [0, 0, 0]
        self.gc_seconds = [0.0, 0.0, 0.0]
        self.fetch_called = 0.0
        self.started: dict[tuple[str, int], tuple[float, float, float, float]] = {}
        # the producers' requests since the last flush: handler class -> durations (ms, retries and back-offs in)
        self.requests: dict[str, list[float]] = {}
        self._monitor: asyncio.Task[None] | None = None
        # the monitor's last look at the loop (perf_counter): the stall sampler's clock (_sample)
        self.tick = time.perf_counter()
        # the stall the sampler is recording (its thread's; read by tests/bench/test_latency_trace.py)
        self.stall: dict[str, Any] | None = None
        atexit.register(self.flush)

    def emit(self, record: dict[str, Any]) -> None:
        with self._lock:
            self._pending.append(record)

    def flush(self) -> None:
        with self._lock:
            lines, self._pending = self._pending, []
            requests, self.requests = self.requests, {}
        lines.append({"k": "gcsum", "t": time.time(), "count": self.gc_count, "seconds": self.gc_seconds})
        lines.append({"k": "requests", "t": time.time(), "h": requests})
        self._out.write("".join(json.dumps(r, separators=(",", ":")) + "\n" for r in lines))
        self._out.flush()

    def on_gc(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._gc_began, self._gc_wall = time.perf_counter(), time.time()
            return
        took = time.perf_counter() - self._gc_began
        generation = int(info["generation"])
        self.gc_count[generation] += 1
        self.gc_seconds[generation] += took
        if generation == 2 or took * 1000 >= GC_MS:
            self.emit({"k": "gc", "t": self._gc_wall, "g": generation, "d": took, "n": info.get("collected", 0)})

    def start_monitor(self) -> None:
        if self._monitor is None:
            self._monitor = asyncio.ensure_future(self._watch())
            loop_thread = threading.current_thread()
            sampler = threading.Thread(
                target=self._sample, args=(loop_thread.ident, threading.get_native_id()),
                name="fedrca-trace-sampler", daemon=True,
            )  # fmt: skip
            sampler.start()

    def _sample(self, ident: int | None, native_id: int) -> None:
        """While the loop is held :data:`STALL_MS` or longer: what its thread is doing, every
        :data:`SAMPLE_PERIOD` s (a ``stall`` record once the loop is free again).

        Per sample: the thread's scheduler state (``/proc/self/task/TID/stat``: R running or waiting for a
        core, S asleep in a call, D in uninterruptible I/O), the kernel function it sleeps in
        (``wchan``) and its innermost Python frames (``sys._current_frames``). Over the stall: the whole
        process's CPU and the machine's CPU time by kind (``/proc/stat``: idle, steal, iowait ...), and how
        late this thread itself woke (a sampler starved too says the process waited for a core, or for the
        interpreter lock the loop's thread held).
        """
        task = Path(f"/proc/self/task/{native_id}")
        while True:
            before = time.perf_counter()
            time.sleep(SAMPLE_PERIOD)
            now = time.perf_counter()
            held = now - self.tick
            stall = self.stall
            if held * 1000 >= STALL_MS:
                if stall is None:
                    stall = self.stall = {
                        "k": "stall", "t": time.time() - held, "tick": self.tick, "pcpu": time.process_time(),
                        "sys": _machine_cpu(), "sched": _schedstat(task), "n": 0, "late": 0.0,
                        "states": Counter(), "wchan": Counter(), "frames": Counter(),
                    }  # fmt: skip
                stall["late"] = max(stall["late"], now - before - SAMPLE_PERIOD)
                stall["n"] += 1
                # "TID (comm) STATE ...": the state is the first field after the command's closing bracket
                stall["states"][(_read(task / "stat").rpartition(")")[2].split() or ["?"])[0]] += 1
                stall["wchan"][_read(task / "wchan") or "-"] += 1
                frame = sys._current_frames().get(ident) if ident is not None else None
                where = []
                while frame is not None and len(where) < 4:
                    where.append(f"{Path(frame.f_code.co_filename).name}:{frame.f_lineno} {frame.f_code.co_name}")
                    frame = frame.f_back
                stall["frames"][" < ".join(where)] += 1
            elif stall is not None and self.tick > stall["tick"]:
                began = stall.pop("tick")
                stall["d"] = self.tick - began
                stall["pcpu"] = time.process_time() - stall["pcpu"]
                # the loop thread's own time on a core and time runnable on a run queue, waiting for one (ns)
                stall["sched"] = [b - a for a, b in zip(stall["sched"], _schedstat(task), strict=True)]
                after = _machine_cpu()
                stall["sys"] = {k: after[k] - v for k, v in stall["sys"].items()}
                self.emit({k: (dict(v) if isinstance(v, Counter) else v) for k, v in stall.items()})
                self.stall = None

    async def _watch(self) -> None:
        flushed = time.monotonic()
        while True:
            began, wall, cpu = time.perf_counter(), time.time(), time.thread_time()
            await asyncio.sleep(LAG_PERIOD)
            self.tick = time.perf_counter()
            held = self.tick - began - LAG_PERIOD
            if held * 1000 >= LAG_MS:
                self.emit({"k": "lag", "t": wall, "d": held + LAG_PERIOD, "cpu": time.thread_time() - cpu})
            if time.monotonic() - flushed >= FLUSH_EVERY:
                flushed, wall = time.monotonic(), time.time()
                self.flush()
                # the tracer's own stall of the loop (written with the next flush)
                self.emit({"k": "flush", "t": wall, "d": time.monotonic() - flushed})


#: /proc/stat's columns of the machine's CPU time (centiseconds)
CPU_KINDS = ("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal")


def _read(path: Path) -> str:
    """A /proc file's text ("" where the system has none or refuses it)."""
    try:
        return path.read_text(encoding="ascii", errors="replace").strip()
    except OSError:
        return ""


def _schedstat(task: Path) -> list[int]:
    """A thread's time on a core and time waiting on a run queue so far (ns; ``/proc/.../schedstat``; 0s without)."""
    fields = _read(task / "schedstat").split()
    return [int(v) for v in fields[:2]] if len(fields) >= 2 else [0, 0]


def _machine_cpu() -> dict[str, int]:
    """The machine's CPU time so far by kind (/proc/stat's first line, in 1/100 s; empty without /proc)."""
    first = _read(Path("/proc/stat")).split("\n", 1)[0].split()
    return {kind: int(v) for kind, v in zip(CPU_KINDS, first[1:], strict=False)} if first[:1] == ["cpu"] else {}


def install(path: Path) -> _Tracer:
    """Wrap the loop's methods and hook the collector; the tracer writing to ``path``."""
    from fedrca.streams import loop as loop_module

    tracer = _Tracer(path)
    gc.callbacks.append(tracer.on_gc)
    cls = loop_module.TransactionalLoop
    run, fetch, process, schedule = cls.run, cls._fetch, cls._process, cls._schedule

    async def traced_run(self: Any) -> None:
        tracer.start_monitor()
        await run(self)

    async def traced_fetch(self: Any) -> Any:
        called = time.time()
        batch, drawn = await fetch(self)
        if batch:
            tracer.fetch_called = called
        return batch, drawn

    def traced_process(self: Any, task: Any, batch: Any) -> Any:
        began, cpu = time.time(), time.thread_time()
        out = process(self, task, batch)
        if batch:
            key = (task.tp.topic, int(batch[0].offset))
            tracer.started[key] = (tracer.fetch_called, began, time.time(), time.thread_time() - cpu)
        return out

    def traced_schedule(self: Any, task: Any, outputs: Any, offset: Any, batch: Any, fetched: Any, done: Any) -> None:
        before = sum(1 for c in task.inflight if not c.done.done())
        # the quiet batches this transaction commits: offsets and handler span (their entries leave `started`)
        quiet = []
        for records, _, _ in task.quiet:
            if records:
                lo_q = int(records[0].offset)
                span = tracer.started.pop((task.tp.topic, lo_q), None)
                quiet.append([lo_q, int(records[-1].offset), *(span[1:3] if span else (None, None))])
        schedule(self, task, outputs, offset, batch, fetched, done)
        lo = int(batch[0].offset) if batch else None
        called, began, ended, cpu = tracer.started.pop((task.tp.topic, lo), (None, None, None, None))
        vids = []
        for out in outputs:
            if out.topic.endswith(".verdicts") and out.value:
                with contextlib.suppress(ValueError, KeyError, TypeError):
                    vids.append(json.loads(out.value)["id"])
        record: dict[str, Any] = {
            "k": "txn",
            "tp": task.tp.topic,
            "lo": lo,
            "hi": int(batch[-1].offset) if batch else None,
            "n": len(batch),
            "fc": called,
            "f": fetched or None,
            "s": began,
            "p": ended,
            "cpu": cpu,
            "q": time.time(),
            "prev": before,
            "off": offset is not None,
            "quiet": quiet,
            "nout": len(outputs),
            "vids": vids,
        }
        commit = task.inflight[-1]

        def sent(_: Any) -> None:
            record["sent"] = time.time()

        def done_(future: Any) -> None:
            record["c"] = time.time()
            record["ok"] = bool(not future.cancelled() and future.exception() is None and future.result())
            tracer.emit(record)

        commit.sent.add_done_callback(sent)
        commit.done.add_done_callback(done_)

    # every request of a transactional producer (AddPartitionsToTxn, Produce, AddOffsetsToTxn, TxnOffsetCommit,
    # EndTxn): how long from sent to answered (the back-off of a retry in), and each retry (CONCURRENT_TRANSACTIONS:
    # the markers of the producer's last transaction not yet written)
    from aiokafka.producer import sender as sender_module

    def traced_do(do: Any) -> Any:
        async def wrapped(self: Any, node_id: Any) -> Any:
            began = time.time()
            ok = await do(self, node_id)
            took = time.time() - began
            name = type(self).__name__.removesuffix("Handler")
            tracer.requests.setdefault(name, []).append(round(1000 * took, 2))
            if ok is False:
                tracer.emit({"k": "retry", "t": began, "d": took, "h": name})
            return ok

        return wrapped

    for handler in (sender_module.BaseHandler, sender_module.SendProduceReqHandler):
        handler.do = traced_do(handler.do)  # type: ignore[method-assign]

    cls.run = traced_run  # type: ignore[method-assign]
    cls._fetch = traced_fetch  # type: ignore[method-assign]
    cls._process = traced_process  # type: ignore[method-assign]
    cls._schedule = traced_schedule  # type: ignore[method-assign]
    _what_if(cls, path.name.split(".")[0])
    return tracer


def _what_if(cls: Any, worker: str) -> None:
    """The what-ifs of :data:`WHAT_IF` (an environment variable the workers inherit from the benchmark):
    ``LoopSettings`` fields replaced (``offset_interval=1e9,producers=3``; ``rca.fetch_wait=0.005``: in the
    worker of that trace name only, ``plants`` or ``rca``), ``gc_threshold=A/B/C`` (``gc.set_threshold``
    once the worker froze its start-up heap), ``backoff_override=S`` (aiokafka's 20 ms back-off after a
    CONCURRENT_TRANSACTIONS answer to a transaction's first request) and ``refreeze=1`` (``gc.collect``
    and ``gc.freeze`` once more when a loop has taken its partitions the first time). For trying a lever
    on the same code before writing it; the breakdown's header names the what-ifs a run had."""
    import dataclasses
    import os

    spec = os.environ.get(WHAT_IF, "")
    if not spec:
        return
    settings: dict[str, str] = {}
    for item in spec.split(","):
        key, _, value = item.partition("=")
        role, dot, name = key.strip().rpartition(".")
        if not dot or role == worker:  # "rca.fetch_wait=0.005": the RCA worker only
            settings[name] = value.strip()
    threshold = settings.pop("gc_threshold", None)
    refreeze = settings.pop("refreeze", None) == "1"
    override = settings.pop("backoff_override", None)
    if override is not None:  # aiokafka's back-off of a first AddPartitionsToTxn answered CONCURRENT_TRANSACTIONS
        from aiokafka.producer import sender as sender_module

        sender_module.BACKOFF_OVERRIDE = float(override)  # type: ignore[attr-defined]
    if threshold is not None:
        freeze = gc.freeze

        def freeze_then_threshold() -> None:
            freeze()
            gc.set_threshold(*(int(v) for v in threshold.split("/")))

        gc.freeze = freeze_then_threshold
    if refreeze:
        taken_all = cls._taken_all

        def taken_then_freeze(self: Any) -> None:
            first = self.taken_at is None
            taken_all(self)
            if first:
                gc.collect()
                gc.freeze()

        cls._taken_all = taken_then_freeze
    if settings:
        init = cls.__init__

        def replaced(self: Any, loop_settings: Any, *args: Any, **kwargs: Any) -> None:
            kinds = {f.name: type(getattr(loop_settings, f.name)) for f in dataclasses.fields(loop_settings)}
            given = {k: (v == "1" if kinds[k] is bool else kinds[k](v)) for k, v in settings.items()}
            init(self, dataclasses.replace(loop_settings, **given), *args, **kwargs)

        cls.__init__ = replaced


def run_worker(argv: list[str]) -> int:
    """``latency_trace.py TRACE_FILE run ...``: ``fedrca run ...`` traced into TRACE_FILE."""
    install(Path(argv[0]))
    # the worker is the ``fedrca`` command run as a program (``python -m fedrca.cli``, as bench_streams starts
    # it untraced and under cProfile), not the shell imported: bench/ imports no fedrca.cli
    # (tests/test_layout.py::test_bench_and_tools_never_import_the_tests_or_the_shell)
    sys.argv = ["fedrca", *argv[1:]]
    try:
        runpy.run_module("fedrca.cli", run_name="__main__", alter_sys=True)
    except SystemExit as stop:
        return stop.code if isinstance(stop.code, int) else (0 if stop.code is None else 1)
    return 0


# -- in the benchmark -------------------------------------------------------------------------------
def save_inputs(trace: Path, **inputs: Any) -> None:
    """What the benchmark saw, beside the workers' traces (``bench.json``)."""
    (trace / "bench.json").write_text(json.dumps(inputs, separators=(",", ":")), encoding="utf-8")


def _load(path: Path) -> list[dict[str, Any]]:
    out = []
    if not path.exists():
        return out
    for text in path.read_text(encoding="utf-8").splitlines():
        try:
            out.append(json.loads(text))
        except ValueError:  # a line cut short by the worker's end
            continue
    return out


def _points(
    send: float, recv: float, plant: dict[str, Any], rca: dict[str, Any], lso: float | None = None
) -> list[float]:
    """The times of a verdict's way, in order (a point its trace lacks takes the one before; a fetch called
    before the record was there counts from the record; ``lso``: when every plant transaction holding a flag
    before the row's last one was over)."""
    raw = [send, plant.get("fc"), plant.get("f"), plant.get("s"), plant.get("p"), plant.get("sent"), plant.get("c")]
    raw += [lso, rca.get("fc"), rca.get("f"), rca.get("s"), rca.get("p"), rca.get("sent"), rca.get("c"), recv]
    out: list[float] = []
    for t in raw:
        out.append(out[-1] if t is None else max(out[-1], float(t)) if out else float(t))
    return out


def _events(events: list[dict[str, Any]], since: float, until: float, least: float = 0.0) -> list[dict[str, Any]]:
    """The events (loop stalls or collections of a worker) that overlap [since, until] and last ``least`` s or more."""
    return [r for r in events if r["t"] <= until and r["t"] + r["d"] >= since and r["d"] >= least]


def _quantiles(values: list[float]) -> str:
    """``p50 / p99 ms (n)`` of durations in seconds."""
    if not values:
        return "none"
    ordered = sorted(values)

    def at(q: float) -> float:
        return 1000.0 * ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]

    return f"{at(0.5):.1f} / {at(0.99):.1f} ms ({len(ordered)})"


def _run(trace: Path) -> tuple[dict[str, Any], list[list[tuple[Any, ...]]], list[list[str]]]:
    """One traced run: what the benchmark saw, per offered rate its verdicts' rows and the lines about it.

    A row is (total ms, seq, plant, stage ms, sent, received, plant txn, RCA txn, marks, notes): whether each
    mechanism of :func:`_slowest`'s shares was on the verdict's way, and what the workers' loops and collectors did
    while it was on it.
    """
    bench = json.loads((trace / "bench.json").read_text(encoding="utf-8"))
    workers = {"plant": _load(trace / "plants.trace.jsonl"), "RCA": _load(trace / "rca.trace.jsonl")}
    kinds = ("txn", "lag", "gc", "gcsum", "requests", "retry", "flush", "stall")
    found = {kind: {name: [r for r in t if r["k"] == kind] for name, t in workers.items()} for kind in kinds}
    txns = {name: [r for r in t if "c" in r] for name, t in found["txn"].items()}
    lags, gcs, retries = found["lag"], found["gc"], found["retry"]
    plants: list[str] = bench["plants"]
    topics: dict[str, str] = bench["topics"]
    offsets: list[list[int]] = bench["offsets"]  # per row, per plant (plants' order): the sensor record's offset
    batches: dict[str, list[tuple[int, int, dict[str, Any]]]] = {}
    for r in txns["plant"]:
        if r["n"]:
            batches.setdefault(r["tp"], []).append((r["lo"], r["hi"], r))
    for held in batches.values():
        held.sort(key=lambda b: b[0])
    starts = {tp: [b[0] for b in held] for tp, held in batches.items()}
    by_vid = {vid: r for r in txns["RCA"] for vid in r["vids"]}
    flag_at = {(p, int(s)): int(off) for p, s, off in bench["flags"]}
    # each plant transaction's first flag in the flags topic and when it was over: a read_committed reader sees
    # a flag once every transaction holding an earlier one is over (the last stable offset)
    seq_of = {(plants[j], offset): seq for seq, row in enumerate(offsets) for j, offset in enumerate(row)}
    plant_of = {topic: p for p, topic in topics.items()}
    opened = []
    for tp, held in batches.items():
        p = plant_of[tp]
        for lo, hi, r in held:
            mine = [f for o in range(lo, hi + 1) if (f := flag_at.get((p, seq_of.get((p, o), -1)))) is not None]
            if mine:
                opened.append((min(mine), r["c"]))
    opened.sort()
    firsts = [first for first, _ in opened]
    over = list(itertools.accumulate((c for _, c in opened), max))

    def lso_at(flag: int) -> float | None:
        """When every plant transaction whose first flag is at or before ``flag`` was over."""
        i = bisect.bisect_right(firsts, flag)
        return over[i - 1] if i else None

    def plant_batch(p: str, seq: int) -> dict[str, Any] | None:
        tp = topics[p]
        offset = offsets[seq][plants.index(p)]
        i = bisect.bisect_right(starts.get(tp, []), offset) - 1
        if i < 0:
            return None
        lo, hi, r = batches[tp][i]
        return r if lo <= offset <= hi else None

    def marks(send: float, recv: float, r_plant: dict[str, Any], r_rca: dict[str, Any]) -> dict[str, bool]:
        def retried(name: str, r: dict[str, Any]) -> bool:
            return bool(_events(retries[name], r.get("p") or r["q"], r["c"]))

        return {
            "plant txn with the group offset": bool(r_plant.get("off")),
            "RCA txn with the group offset": bool(r_rca.get("off")),
            "plant txn behind 1+ in flight": r_plant["prev"] > 0,
            "RCA txn behind 1+ in flight": r_rca["prev"] > 0,
            "a plant loop stall >= 20 ms": bool(_events(lags["plant"], send, recv, 0.02)),
            "an RCA loop stall >= 20 ms": bool(_events(lags["RCA"], send, recv, 0.02)),
            "a gen-2 collection in a worker": any(g["g"] == 2 for t in gcs.values() for g in _events(t, send, recv)),
            "a plant producer request retried during the plant txn": retried("plant", r_plant),
            "an RCA producer request retried during the RCA txn": retried("RCA", r_rca),
        }

    def notes(send: float, recv: float) -> list[str]:
        out = []
        for name in workers:
            found_gc = _events(gcs[name], send, recv)
            found_lag = _events(lags[name], send, recv)
            if not (found_gc or found_lag):
                continue
            worst = max(found_lag, key=lambda r: r["d"], default=None)
            what = (
                f"{len(found_lag)} loop stalls >= {LAG_MS:.0f} ms, {1000 * sum(r['d'] for r in found_lag):.0f} ms"
                f" (longest {1000 * worst['d']:.0f} ms, {1000 * worst['cpu']:.0f} ms of it on the CPU)"
                if worst is not None
                else "no loop stall"
            )
            if found_gc:
                what += "; collections " + ", ".join(f"gen{r['g']} {1000 * r['d']:.1f} ms" for r in found_gc)
            out.append(f"{name} worker meanwhile: {what}")
            if worst is not None and worst["d"] >= 0.02:
                sampled = _events(found["stall"][name], worst["t"], worst["t"] + worst["d"])
                if sampled:
                    out.append(f"  its longest stall, sampled: {_stall_text(max(sampled, key=lambda r: r['d']))}")
        return out

    per_rate: list[list[tuple[Any, ...]]] = []
    said: list[list[str]] = []
    for (start, stop), (began, ended), offered in zip(bench["segments"], bench["spans"], bench["offered"], strict=True):
        rows = []
        unmatched = outside = 0
        for vid, seq, now_ns, _ in bench["got"]:
            if not start <= seq < stop:
                continue
            row = [(flag_at[(p, seq)], p) for p in plants if (p, seq) in flag_at]
            r_rca = by_vid.get(vid)
            r_plant = plant_batch(max(row)[1], seq) if row else None
            if r_rca is None or r_plant is None:
                unmatched += 1
                continue
            last, p = max(row)
            if not (r_rca["lo"] is not None and r_rca["lo"] <= last <= r_rca["hi"]):
                outside += 1  # the row's last flag came in an earlier (quiet) batch than the verdict's
            send, recv = bench["sent_ns"][seq] / 1e9, now_ns / 1e9
            points = _points(send, recv, r_plant, r_rca, lso_at(last))
            stages = [1000.0 * (b - a) for a, b in itertools.pairwise(points)]
            rows.append(
                (1000.0 * (recv - send), seq, p, stages, send, recv, r_plant, r_rca,
                 marks(send, recv, r_plant, r_rca), notes(send, recv))
            )  # fmt: skip
        lines = [
            f"{trace.name}, {offered:,.0f} msgs/s: {len(rows)} verdicts traced ({unmatched} not matched to both"
            f" workers' batches; {outside} whose row's last flag was in an earlier RCA batch than the verdict's)"
        ]
        for name in workers:
            lines += _worker_lines(name, txns[name], found, began, ended)
        per_rate.append(rows)
        said.append(lines)
    return bench, per_rate, said


def _worker_lines(
    name: str, txns: list[dict[str, Any]], found: dict[str, dict[str, list[dict[str, Any]]]], began: float, ended: float
) -> list[str]:
    """What one worker did over a segment of a run: its transactions, producer requests, loop stalls, collections."""
    mine = [r for r in txns if r["n"] and r.get("p") and began <= r["q"] <= ended]
    lines = [
        f"  {name} worker, its batch transactions, processed -> committed p50 / p99:"
        f" with the group offset {_quantiles([r['c'] - r['p'] for r in mine if r['off']])},"
        f" without {_quantiles([r['c'] - r['p'] for r in mine if not r['off']])};"
        f" processed -> records in the logs {_quantiles([r['sent'] - r['p'] for r in mine if 'sent' in r])};"
        f" handler CPU {_quantiles([r['cpu'] for r in mine if r.get('cpu') is not None])}"
    ]
    sent: dict[str, list[float]] = {}
    for r in found["requests"][name]:
        if began <= r["t"] <= ended + FLUSH_EVERY:
            for kind, values in r["h"].items():
                sent.setdefault(kind, []).extend(v / 1000 for v in values)
    retried = Counter(r["h"] for r in found["retry"][name] if began <= r["t"] <= ended)
    if sent:
        lines.append(
            f"  {name} worker's producer requests, sent -> answered (back-offs in) p50 / p99: "
            + "; ".join(
                f"{kind} {_quantiles(values)}" + (f" {retried[kind]} retried" if retried[kind] else "")
                for kind, values in sorted(sent.items())
            )
        )
    held = _events(found["lag"][name], began, ended)
    collections = _events(found["gc"][name], began, ended)
    gen2 = [r for r in collections if r["g"] == 2]
    stalled = sum(r["d"] for r in held)
    on_cpu = sum(r["cpu"] for r in held)
    lines.append(
        f"  {name} worker over the segment ({ended - began:.1f} s): {len(held)} loop stalls >= {LAG_MS:.0f} ms"
        f" ({sum(1 for r in held if r['d'] >= 0.02)} >= 20 ms, {sum(1 for r in held if r['d'] >= 0.05)} >= 50;"
        f" {1000 * stalled:.0f} ms in all, {100 * on_cpu / stalled if stalled else 0:.0f} % of it on the"
        f" loop's CPU); {len(gen2)} gen-2 collections"
        + (f" (longest {1000 * max(r['d'] for r in gen2):.1f} ms)" if gen2 else "")
        + f", {len(collections) - len(gen2)} younger ones >= {GC_MS:.0f} ms; the tracer's own writes held it"
        + f" {1000 * sum(r['d'] for r in _events(found['flush'][name], began, ended)):.0f} ms in all"
    )
    for r in sorted(_events(found["stall"][name], began, ended, 0.05), key=lambda r: -r["d"])[:5]:
        lines.append(f"  {name} worker's loop held {1000 * r['d']:.0f} ms at +{r['t'] - began:.2f} s: {_stall_text(r)}")
    sums = [r for r in found["gcsum"][name] if began <= r["t"] <= ended + FLUSH_EVERY]
    if len(sums) >= 2:
        gens = [b - a for a, b in zip(sums[0]["count"], sums[-1]["count"], strict=True)]
        secs = [1000 * (b - a) for a, b in zip(sums[0]["seconds"], sums[-1]["seconds"], strict=True)]
        lines.append(
            f"  {name} worker collections over it: gen0/1/2 {gens[0]}/{gens[1]}/{gens[2]},"
            f" {secs[0]:.0f}/{secs[1]:.0f}/{secs[2]:.0f} ms in all"
        )
    return lines


def _stall_text(r: dict[str, Any]) -> str:
    """What the stall sampler saw in one stall (:meth:`_Tracer._sample`), in words."""

    def top(counts: dict[str, int], k: int = 3) -> str:
        return ", ".join(f"{key} {n}" for key, n in sorted(counts.items(), key=lambda kv: -kv[1])[:k])

    on_core, queued = r.get("sched", [0, 0])
    machine = ", ".join(f"{k} {10 * v} ms" for k, v in r.get("sys", {}).items() if v)
    return (
        f"{r['n']} samples; thread state {top(r['states'])}; kernel wait {top(r['wchan'])}; the loop thread on a"
        f" core {on_core / 1e6:.0f} ms, runnable waiting for one {queued / 1e6:.0f}"
        f" ms (from the sampler's first look); process CPU"
        f" {1000 * r['pcpu']:.0f} ms; the machine's CPU meanwhile: {machine or 'none'}; sampler woke up to"
        f" {1000 * r['late']:.0f} ms late; Python frames: {top(r['frames'], 2)}"
    )


def breakdown(*traces: Path, slowest: float = SLOWEST, least: int = LEAST) -> list[str]:
    """The breakdown of traced latency runs (each a directory), their verdicts pooled per offered rate."""
    runs = [_run(trace) for trace in traces]
    what_ifs = sorted({bench.get("what_if") or "none" for bench, _, _ in runs})
    lines = [f"what-ifs of these runs: {', '.join(what_ifs)}"]
    for k, offered in enumerate(runs[0][0]["offered"]):
        rows = [row for _, per_rate, _ in runs for row in per_rate[k]]
        lines.append(f"{offered:,.0f} msgs/s, {len(runs)} run(s):")
        for _, _, said in runs:
            lines += [f"  {text}" for text in said[k]]
        if rows:
            lines += _slowest(rows, slowest, least)
    return lines


def _slowest(rows: list[tuple[Any, ...]], slowest: float, least: int) -> list[str]:
    """The stages of the slowest verdicts of a rate against all of its verdicts, and each of the slowest."""
    rows = sorted(rows, key=lambda r: r[0])
    n = max(least, math.ceil(slowest * len(rows)))
    slow = rows[-n:]
    med = [statistics.median(r[3][i] for r in rows) for i in range(len(STAGES))]
    mean_slow = [statistics.fmean(r[3][i] for r in slow) for i in range(len(STAGES))]
    lines = [
        f"  produce -> verdict: median {statistics.median(r[0] for r in rows):.1f} ms of {len(rows)} verdicts; the"
        f" slowest {len(slow)} ({100 * len(slow) / len(rows):.1f} %): mean {statistics.fmean(r[0] for r in slow):.1f}"
        f" ms ({', '.join(f'{r[0]:.0f}' for r in slow)})",
        f"  {'stage':<16}{'median':>9}{'slow mean':>11}{'excess':>9}  what",
    ]
    for (name, what), m, s in zip(STAGES, med, mean_slow, strict=True):
        lines.append(f"  {name:<16}{m:>9.1f}{s:>11.1f}{s - m:>9.1f}  {what}")
    shares = []
    for label in rows[0][8]:
        in_slow = 100.0 * sum(r[8][label] for r in slow) / len(slow)
        in_all = 100.0 * sum(r[8][label] for r in rows) / len(rows)
        shares.append(f"{label} {in_slow:.0f} / {in_all:.0f} %")
    lines.append("  on the way of the slowest / of all: " + "; ".join(shares))
    lines.append("  the slowest, one by one (ms per stage in the order above; plant = the row's last flag's):")
    for total, seq, p, stages, _, _, r_plant, r_rca, _, said in reversed(slow):
        plant_offset = " (+ group offset)" if r_plant.get("off") else ""
        rca_offset = " (+ group offset)" if r_rca.get("off") else ""
        lines.append(
            f"    seq {seq} {p}: {total:.0f} = {' + '.join(f'{x:.0f}' for x in stages)}; plant batch {r_plant['n']}"
            f" msgs, {r_plant['prev']} txn before it in flight{plant_offset}, handler cpu"
            f" {1000 * (r_plant.get('cpu') or 0):.1f}; RCA batch {r_rca['n']} flags, {r_rca['prev']} before it"
            f"{rca_offset}, handler cpu {1000 * (r_rca.get('cpu') or 0):.1f}"
        )
        lines += [f"      {text}" for text in said]
    return lines


def main(argv: list[str]) -> int:
    if argv and argv[0] == "--analyse":
        print("\n".join(breakdown(*(Path(a) for a in argv[1:]))))
        return 0
    if len(argv) < 2:
        print(__doc__)
        return 2
    return run_worker(argv)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
