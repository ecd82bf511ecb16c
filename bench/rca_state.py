"""The RCA worker's state record, key by key: the bytes every batch writes to Kafka (issue 32).

In process, no broker and no timing: the flags the plant cores publish for the input of
``bench/bench_streams.py``'s latency phase (``WARMUP_ROWS`` synthetic nominal rows, then the TEP
fault files 01, 04, 05, 06 once per offered rate, seq continuing; five plants) go through the RCA
worker's handler (:class:`fedrca.streams.agents.RCAAgent`, as ``fedrca run --roles rca`` builds it:
allowed lateness 1,000) in batches of ``--batch`` flags. Reported: the bytes of the state record a
batch writes (:func:`fedrca.streams.loop.state_record`) at the end of each segment and their mean
over the segment, split by the state's keys; then the same record once the stage remembers
:data:`~fedrca.config.limits.MAX_REMEMBERED_VERDICTS` verdict ids, as after a quarter of an hour
of the soak (``tools/soak.py``: a verdict every dozen rows at 200 rows/s).

``--engines`` prints the handler's CPU a batch over the fault segments with the engine as it is, with every
block through the vectorised passes and with every row through the per-row step (ratios in one process).
``--profile`` also runs the handler over the fault segments under cProfile and prints the
functions' shares of its CPU (shares only: the machine may be loaded).

    python bench/rca_state.py [--batch 5] [--profile] [--engines]
"""

from __future__ import annotations

import argparse
import cProfile
import logging
import pstats
import sys
import tempfile
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

#: The state's keys reported one by one (the rest together)
KEYS = ("aligner", "engine", "sensors", "emitted", "judged")


def flags_of_latency_input(workdir: Path) -> tuple[Any, list[tuple[str, bytes]], list[tuple[str, int, int]]]:
    """The config, the (plant, flag bytes) of the latency phase's input in publishing order, and its segments
    (name, first flag, end flag)."""
    import pandas as pd

    import bench_streams as bs
    from fedrca.application.site import plant_runtime, rca_runtime
    from fedrca.config import load_config
    from fedrca.contracts import encode_flags
    from fedrca.datasets.tep import load_tep
    from fedrca.streams.embedded import replay_frame
    from fedrca.streams.runtime import RuntimeSettings, SiteRuntime

    config = load_config(bs.site_config(workdir, "benchstate"))
    plants = {p.name: list(p.sensors) for p in config.plants}
    columns = [c for cols in plants.values() for c in cols]
    faults = pd.concat([load_tep(bs.REPO / "data" / "tep" / f"d{n}_te.dat")[columns] for n in bs.FAULTS])
    frame = pd.concat([bs.synthetic_frame(columns, bs.WARMUP_ROWS), *([faults] * len(bs.RATES))], ignore_index=True)
    settings = RuntimeSettings(allowed_lateness=1000)
    plant_side = plant_runtime(config, bs.TRAIN, settings=settings, fitted=bs.FITTED)
    runtime = SiteRuntime(plant_side, rca_runtime(plant_side.config, settings=settings))
    values = {p: frame[cols].round(5).to_numpy() for p, cols in plants.items()}
    run = replay_frame(runtime, values, sample_seconds=180.0)
    flags = [(f.plant, raw) for f, raw in zip(run.flags, encode_flags(run.flags), strict=True)]
    ends = [bs.WARMUP_ROWS + k * len(faults) for k in range(len(bs.RATES) + 1)]
    rows = [f.seq for f in run.flags]
    cut = [next((i for i, seq in enumerate(rows) if seq >= end), len(rows)) for end in ends]
    names = ["warm-up", *(f"faults at {5 * rate:,.0f} msgs/s" for rate in bs.RATES)]
    return config, flags, [(name, lo, hi) for name, lo, hi in zip(names, [0, *cut[:-1]], cut, strict=True)]


def parts(state: bytes) -> dict[str, int]:
    """Bytes of the state record and of each of its state's keys (JSON as the worker writes it)."""
    import json

    from fedrca.streams.agents import _json
    from fedrca.streams.loop import state_record

    doc = json.loads(state)
    out = {"record": len(state_record(10**9, state))}
    for key in KEYS:
        out[key] = len(_json(doc[key])) if key in doc else 0
    out["rest"] = out["record"] - sum(out[k] for k in KEYS)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batch", type=int, default=5, help="flags per batch (5: the worker's at 1,000 msgs/s)")
    parser.add_argument("--profile", action="store_true", help="the handler's CPU shares over the fault segments")
    parser.add_argument("--engines", action="store_true", help="the handler's CPU a batch by engine path")
    args = parser.parse_args(argv)
    logging.getLogger("fedrca").setLevel(logging.ERROR)  # the plant cores' refresh and sensor-fault lines

    from fedrca.application.site import rca_runtime
    from fedrca.config.limits import MAX_REMEMBERED_VERDICTS
    from fedrca.connectors.names import SiteNames
    from fedrca.streams.agents import RCAAgent
    from fedrca.streams.loop import InputRecord
    from fedrca.streams.runtime import RuntimeSettings

    with tempfile.TemporaryDirectory() as tmp:
        config, flags, segments = flags_of_latency_input(Path(tmp))
    records = [InputRecord(i, plant.encode(), raw, 0) for i, (plant, raw) in enumerate(flags)]

    def agent() -> RCAAgent:
        handler = RCAAgent(rca_runtime(config, settings=RuntimeSettings(allowed_lateness=1000)), SiteNames(config))
        handler.restore(None)
        return handler

    handler = agent()
    header = f"{'':<28}{'record':>10}" + "".join(f"{k:>10}" for k in (*KEYS, "rest"))
    print(f"RCA state record bytes, batches of {args.batch} flags ({len(flags):,} flags)")
    print(header)
    verdicts = 0
    for name, lo, hi in segments:
        total, n, last = 0, 0, None
        for start in range(lo, hi, args.batch):
            processed = handler.process(records[start : min(start + args.batch, hi)])
            verdicts += sum(o.topic == handler.verdicts_topic for o in processed.outputs)
            last = parts(processed.state)
            total += last["record"]
            n += 1
        assert last is not None
        print(f"{name + ', mean':<28}{total / max(n, 1):>10,.0f}")
        print(f"{name + ', last':<28}" + "".join(f"{last[k]:>10,}" for k in ("record", *KEYS, "rest")))
    handler.runtime.stage.remember([f"{k:016x}" for k in range(MAX_REMEMBERED_VERDICTS)])
    full = parts(handler.process([]).state)
    print(f"{'+ 13,797 ids remembered':<28}" + "".join(f"{full[k]:>10,}" for k in ("record", *KEYS, "rest")))
    print(f"{verdicts:,} verdicts issued")

    if args.profile:
        handler = agent()
        lo = segments[1][1]
        for start in range(0, lo, args.batch):
            handler.process(records[start : min(start + args.batch, lo)])
        profiler = cProfile.Profile()
        profiler.enable()
        for start in range(lo, len(records), args.batch):
            handler.process(records[start : start + args.batch])
        profiler.disable()
        print("\nthe handler over the fault segments under cProfile (shares of its CPU; the machine may be loaded)")
        stats = pstats.Stats(profiler)
        stats.sort_stats("cumulative").print_stats(40)
        stats.sort_stats("tottime").print_stats(30)

    if args.engines:
        import statistics
        import time

        from bench_streams import PerRowEngine

        lo = segments[1][1]
        kinds = {
            "the engine (a one-row block by the per-row step)": None,
            "every block by the block's passes": PassesEngine,
            "every row by the per-row step": PerRowEngine,
        }
        cpu: dict[str, list[float]] = {kind: [] for kind in kinds}
        for _ in range(3):
            for kind, wrapper in kinds.items():
                handler = agent()
                if wrapper is not None:
                    handler.runtime.stage.engine = wrapper(handler.runtime.engine)  # type: ignore[assignment]
                for start in range(0, lo, args.batch):
                    handler.process(records[start : min(start + args.batch, lo)])
                started = time.process_time()
                for start in range(lo, len(records), args.batch):
                    handler.process(records[start : start + args.batch])
                cpu[kind].append(time.process_time() - started)
        batches = len(range(lo, len(records), args.batch))
        print(
            f"\nthe handler over the fault segments, {batches:,} batches of {args.batch} flags, CPU a batch (medians "
            "of 3; the machine may be loaded: the ratios are the figures)"
        )
        first = statistics.median(next(iter(cpu.values())))
        for kind, runs in cpu.items():
            took = statistics.median(runs)
            print(f"  {kind:<52}{1e6 * took / batches:>8,.0f} us  {took / first:.2f}x")
    return 0


class PassesEngine:
    """The engine with every block through its vectorised passes, a block of one row too (the path
    :meth:`fedrca.rca.RCAEngine.update_block` takes for longer blocks)."""

    def __init__(self, engine: Any) -> None:
        self.engine = engine
        self.get_state, self.set_state, self.reset = engine.get_state, engine.set_state, engine.reset

    def update_block(self, seqs: Any, codes: Any, ts: Any = None, levels: Any = None) -> list[Any]:
        engine = self.engine
        seq_arr, code_arr, ts_arr, lev = engine._block_arrays(seqs, codes, ts, levels)
        return list(engine._block(seq_arr, ts_arr, code_arr, lev))


if __name__ == "__main__":
    raise SystemExit(main())
