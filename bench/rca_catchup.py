"""The RCA worker's memory over catch-up episodes, in process: no broker, no timing (issue 32).

A plant worker killed in the soak (``tools/soak.py --standby``) leaves its plants silent until its
standby takes over; the standby then catches up, one plant's partition ahead of the others: the RCA
worker's aligner holds the rows that plant runs ahead (up to the allowed lateness) until the others
come. This drives the RCA worker's handler (:class:`fedrca.streams.agents.RCAAgent` of config/tep.yaml,
allowed lateness 1,000, as ``fedrca run --roles rca`` builds it) with such a stream: steady batches of
``--steady`` rows of every plant, then per episode every plant silent for ``--silent`` rows, which
come back as the take-over publishes them: one plant's backlog first, in batches of ``--burst`` flags
(its rows wait for the others'), then the others'. After every batch the state record is written as
the worker's loop writes it (:func:`fedrca.streams.loop.state_record`). After each episode and a
steady stretch it prints the process's RSS (``/proc/self/statm``), the interpreter's small-object
arenas (``sys._debugmallocstats``) and, with ``--trace``, tracemalloc's current and peak bytes.

``--aligner FILE`` runs the stage with the ``FlagAligner`` of another module file (e.g. an earlier
version, ``git show REV:src/fedrca/streams/aligner.py > FILE``): the same stream, the same process
set-up, the two aligners compared.

``--behind`` sends the last plant's backlog last instead of the first plant's first, ``--own-clock`` gives each
plant its own time (the aligner keeps each plant's), ``--slice`` the flags the runtime takes at once.

    python bench/rca_catchup.py                                                # docs/streams.md, first run
    python bench/rca_catchup.py --silent 900 --behind --own-clock --burst 2000  # docs/streams.md, second run
"""

from __future__ import annotations

import argparse
import gc
import importlib.util
import math
import os
import re
import sys
import tempfile
import tracemalloc
from pathlib import Path

from fedrca.application.site import rca_runtime
from fedrca.config import load_config
from fedrca.connectors.names import SiteNames
from fedrca.contracts import FlagMessage, encode_flags
from fedrca.streams.agents import RCAAgent
from fedrca.streams.loop import InputRecord, state_record
from fedrca.streams.runtime import RuntimeSettings

REPO = Path(__file__).resolve().parents[1]
#: rows of one incident cycle: half quiet, half one plant alarming alone (the root named changes every cycle)
CYCLE = 24


def flags(site: str, plants: list[str], plant: str, lo: int, hi: int, skew: float = 0.0) -> list[FlagMessage]:
    """One plant's flags of rows ``lo:hi``: incidents that come and go, severity levels, a sensor fault now and
    then; each plant's time ``skew`` seconds after the one before it."""
    m = plants.index(plant)
    out = []
    for seq in range(lo, hi):
        cycle, row = divmod(seq, CYCLE)
        alarm = int(cycle % len(plants) == m and row >= CYCLE // 2)
        out.append(FlagMessage(site, plant, 180.0 * seq + skew * m, seq, alarm, alarm, math.inf, "v0", level=2 * alarm,
                               sensor_fault=m == 1 and seq % 300 >= 280))  # fmt: skip
    return out


def arenas() -> int:
    """The interpreter's small-object arenas allocated now (``sys._debugmallocstats``, which writes to fd 2)."""
    with tempfile.TemporaryFile() as out:
        saved = os.dup(2)
        try:
            sys.stderr.flush()
            os.dup2(out.fileno(), 2)
            sys._debugmallocstats()
        finally:
            os.dup2(saved, 2)
            os.close(saved)
        out.seek(0)
        text = out.read().decode(errors="replace")
    found = re.search(r"# arenas allocated current\s*=\s*([\d,]+)", text)
    return int(found.group(1).replace(",", "")) if found else -1


def rss_mib() -> float:
    """Resident set size of this process (MiB)."""
    pages = int(Path("/proc/self/statm").read_text().split()[1])
    return pages * os.sysconf("SC_PAGE_SIZE") / 2**20


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--episodes", type=int, default=6)
    parser.add_argument("--silent", type=int, default=600, help="rows every plant is silent per episode")
    parser.add_argument("--steady", type=int, default=4, help="rows of every plant per steady batch")
    parser.add_argument("--burst", type=int, default=500, help="flags per catch-up batch")
    parser.add_argument("--between", type=int, default=3000, help="steady rows after each episode")
    parser.add_argument("--lateness", type=int, default=1000)
    parser.add_argument("--warm", type=int, default=12_000, help="steady rows first (the memory of 10,000 rows full)")
    parser.add_argument("--behind", action="store_true", help="the last plant's backlog last, the others' first")
    parser.add_argument("--slice", type=int, help="flags the runtime takes at once (default: RCARuntime.chunk_flags)")
    parser.add_argument("--own-clock", action="store_true", help="each plant's flags at its own time (+1 ms a plant)")
    parser.add_argument("--trace", action="store_true", help="also tracemalloc's current and peak bytes")
    parser.add_argument("--aligner", type=Path, help="a module file whose FlagAligner the stage runs")
    args = parser.parse_args(argv)

    config = load_config(REPO / "config" / "tep.yaml")
    plants = list(config.plant_names)
    runtime = rca_runtime(config, settings=RuntimeSettings(allowed_lateness=args.lateness))
    if args.slice:
        runtime.chunk_flags = args.slice
    if args.aligner is not None:
        spec = importlib.util.spec_from_file_location("other_aligner", args.aligner)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module  # its dataclasses look their module up
        spec.loader.exec_module(module)
        runtime.stage.aligner = module.FlagAligner(plants, allowed_lateness=args.lateness)
    agent = RCAAgent(runtime, SiteNames(config))
    site = config.site
    skew = 0.001 if args.own_clock else 0.0
    offset = 0
    most = {"rows": 0, "record": 0}

    def batch(raws: list[bytes]) -> None:
        nonlocal offset
        processed = agent.process([InputRecord(offset + k, b"", raw, 0) for k, raw in enumerate(raws)])
        offset += len(raws)
        record = state_record(offset, processed.state)
        most["record"] = max(most["record"], len(record))
        most["rows"] = max(most["rows"], runtime.stage.aligner._pending if hasattr(runtime.stage.aligner, "_pending")
                           else len(runtime.stage.aligner._buffer))  # fmt: skip

    def steady(lo: int, hi: int) -> None:
        for start in range(lo, hi, args.steady):
            end = min(start + args.steady, hi)
            batch(encode_flags([f for p in plants for f in flags(site, plants, p, start, end, skew)]))

    def episode(lo: int) -> int:
        """Every plant silent for ``--silent`` rows from ``lo``; then the take-over publishes them, the first plant's
        backlog ahead of the others' (and the rows after it, as they come); the seq after the episode."""
        hi = lo + args.silent
        backlog = {p: encode_flags(flags(site, plants, p, lo, hi, skew)) for p in plants}
        order = plants if not args.behind else plants[::-1]
        for plant in order:  # a partition's backlog at a time, in batches of --burst flags
            raws = backlog[plant]
            for start in range(0, len(raws), args.burst):
                batch(raws[start : start + args.burst])
        return hi

    if args.trace:
        tracemalloc.start()
    seq = 0
    steady(seq, seq + args.warm)
    seq += args.warm
    gc.collect()
    print(f"{'after':>10} {'RSS MiB':>8} {'arenas':>7} {'traced KiB':>10} {'peak KiB':>9} {'rows held':>9} "
          f"{'record KiB':>10}")  # fmt: skip

    def report(label: str) -> None:
        gc.collect()
        current, peak = tracemalloc.get_traced_memory() if args.trace else (0, 0)
        print(f"{label:>10} {rss_mib():8.2f} {arenas():7d} {current / 1024:10.0f} {peak / 1024:9.0f} "
              f"{most['rows']:9d} {most['record'] / 1024:10.1f}", flush=True)  # fmt: skip
        most["rows"] = most["record"] = 0
        if args.trace:
            tracemalloc.reset_peak()

    report("warm-up")
    for k in range(args.episodes):
        seq = episode(seq)
        steady(seq, seq + args.between)
        seq += args.between
        report(f"episode {k + 1}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
