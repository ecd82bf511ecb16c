"""The embedded default: the whole pipeline in one process, no broker.

Replays recorded files through the *same* cores the Faust workers run
(:class:`fedrca.streams.runtime.Runtime`: message validation, plant
processors, flag alignment, RCA stage), with in-memory queues in place of the
topics. Messages are encoded to and decoded from JSON bytes exactly as on
Kafka, so this path exercises the production contracts.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TextIO

import numpy as np

from fedrca.config import SiteConfig
from fedrca.streams.records import encode
from fedrca.streams.runtime import Runtime

__all__ = ["EmbeddedRun", "replay_frame"]


@dataclass
class EmbeddedRun:
    """What one replay produced (the same records the topics would hold)."""

    flags: list[dict[str, Any]] = field(default_factory=list)
    verdicts: list[dict[str, Any]] = field(default_factory=list)
    deadletters: list[tuple[bytes, str]] = field(default_factory=list)
    rows: int = 0
    seconds: float = 0.0


def replay_frame(
    runtime: Runtime,
    plant_values: dict[str, np.ndarray],
    *,
    sample_seconds: float = 1.0,
    start_ts: float = 0.0,
    chunk: int = 20,
    on_verdict: Callable[[dict[str, Any]], None] | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> EmbeddedRun:
    """Replay per-plant arrays (T, D_m) row by row through the runtime, in chunks of ``chunk`` rows.

    Each row becomes one sensors message per plant (bytes), each flag one flags
    message (bytes); verdicts are collected in order.
    """
    config: SiteConfig = runtime.config
    plants = config.plant_names
    T = len(next(iter(plant_values.values())))
    out = EmbeddedRun(rows=T)
    started = time.perf_counter()
    value_lists = {p: plant_values[p].tolist() for p in plants}
    for lo in range(0, T, chunk):
        hi = min(T, lo + chunk)
        flag_bytes: list[bytes] = []
        for plant in plants:
            raws = [
                encode(
                    {
                        "site": config.site,
                        "plant": plant,
                        "ts": start_ts + t * sample_seconds,
                        "seq": t,
                        "values": value_lists[plant][t],
                    }
                )
                for t in range(lo, hi)
            ]
            batch = runtime.decode_sensors(raws, plant=plant)
            out.deadletters += [(raw, err.reason) for raw, err in batch.rejected]
            result = runtime.process_plant(plant, batch.valid)
            records = [f.to_dict() for f in result.flags]
            out.flags += records
            flag_bytes += [encode(r) for r in records]
        verdicts, rejected = runtime.process_flags(flag_bytes)
        out.deadletters += [(raw, err.reason) for raw, err in rejected]
        for v in verdicts:
            out.verdicts.append(v)
            if on_verdict is not None:
                on_verdict(v)
        if progress is not None:
            progress(hi, T)
    for v in runtime.rca.flush():
        out.verdicts.append(v)
        if on_verdict is not None:
            on_verdict(v)
    out.seconds = time.perf_counter() - started
    return out


def progress_bar(label: str, stream: TextIO = sys.stderr, width: int = 30) -> Callable[[int, int], None]:
    """A one-line progress display (carriage-return updated)."""

    def show(done: int, total: int) -> None:
        filled = int(width * done / max(total, 1))
        stream.write(f"\r  {label:<14} [{'#' * filled}{'.' * (width - filled)}] {done}/{total}")
        if done >= total:
            stream.write("\n")
        stream.flush()

    return show
