"""The embedded default: the whole pipeline in one process, no broker.

Replays recorded files through the *same* cores the Kafka workers run
(:class:`fedrca.streams.runtime.SiteRuntime`: message validation, plant
processors, flag alignment, RCA stage), with in-memory hand-over in place of
the topics. Messages are encoded to and decoded from JSON bytes exactly as on
Kafka, so this path exercises the production contracts.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TextIO

import numpy as np

from fedrca.config import SiteConfig
from fedrca.connectors.replay import Pacer
from fedrca.contracts import FlagMessage, SensorMessage, Verdict, encode_flags
from fedrca.detectors.plant import DetectionResult
from fedrca.streams.runtime import SiteRuntime

__all__ = ["EmbeddedRun", "progress_bar", "replay_frame"]


@dataclass
class EmbeddedRun:
    """What one replay produced (the same records the topics would hold).

    ``results`` is each plant processor's local evidence (d2, flags), kept for the
    operator report of the embedded default; it never reaches the RCA stage.
    """

    flags: list[FlagMessage] = field(default_factory=list)
    verdicts: list[Verdict] = field(default_factory=list)
    deadletters: list[tuple[bytes, str]] = field(default_factory=list)
    results: dict[str, DetectionResult] = field(default_factory=dict)
    rows: int = 0
    seconds: float = 0.0


def replay_frame(
    runtime: SiteRuntime,
    plant_values: dict[str, np.ndarray],
    *,
    sample_seconds: float = 1.0,
    start_ts: float = 0.0,
    chunk: int = 20,
    pacer: Pacer | None = None,
    on_verdict: Callable[[Verdict], None] | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> EmbeddedRun:
    """Replay per-plant arrays (T, D_m) through the runtime, ``chunk`` rows at a time.

    Each row becomes one sensors message per plant (bytes), each flag one flags
    message (bytes); verdicts are collected in order. With a ``pacer`` the rows are
    released at their sample time scaled by its speed (``Pacer.from_spec("x600")``).
    """
    config: SiteConfig = runtime.config
    plants = config.plant_names
    T = len(next(iter(plant_values.values())))
    out = EmbeddedRun(rows=T)
    started = time.perf_counter()
    arrays = {p: np.asarray(plant_values[p], dtype=np.float64) for p in plants}
    parts: dict[str, list[DetectionResult]] = {p: [] for p in plants}
    if pacer is not None:
        pacer.begin(start_ts)

    def emit(verdicts: list[Verdict]) -> None:
        for v in verdicts:
            out.verdicts.append(v)
            if on_verdict is not None:
                on_verdict(v)

    for lo in range(0, T, chunk):
        hi = min(T, lo + chunk)
        if pacer is not None:
            pacer.wait(start_ts + lo * sample_seconds)
        chunk_flags: list[FlagMessage] = []
        for plant in plants:
            raws = [
                SensorMessage(config.site, plant, start_ts + t * sample_seconds, t, arrays[plant][t]).encode()
                for t in range(lo, hi)
            ]
            batch = runtime.plants.decode_sensors(raws, plant=plant)
            out.deadletters += [(raw, err.reason) for raw, err in batch.rejected]
            result = runtime.plants.process_plant(plant, batch.valid)
            if result.result is not None:
                parts[plant].append(result.result)
            chunk_flags += result.flags
        # Flags reach the RCA sample by sample, as from processors that keep pace with the sensors.
        order = {p: i for i, p in enumerate(plants)}
        chunk_flags.sort(key=lambda f: (f.seq, order[f.plant]))
        out.flags += chunk_flags
        verdicts, rejected = runtime.rca.process_flags(encode_flags(chunk_flags))
        out.deadletters += [(raw, err.reason) for raw, err in rejected]
        emit(verdicts)
        if progress is not None:
            progress(hi, T)
    emit(runtime.rca.flush())
    out.results = {p: DetectionResult.concat(parts[p]) for p in plants if parts[p]}
    out.seconds = time.perf_counter() - started
    return out


def progress_bar(label: str, stream: TextIO = sys.stderr, width: int = 30) -> Callable[[int, int], None]:
    """A one-line progress display (carriage-return updated when ``stream`` is a terminal)."""
    interactive = stream.isatty()
    shown = [-1]

    def show(done: int, total: int) -> None:
        percent = int(100 * done / max(total, 1))
        if not interactive and percent // 25 == shown[0] // 25 and done < total:
            return  # logs get a line per quarter, terminals a live bar
        shown[0] = percent
        filled = int(width * done / max(total, 1))
        end = "\n" if done >= total or not interactive else ""
        stream.write(f"\r  {label:<14} [{'#' * filled}{'.' * (width - filled)}] {done}/{total}{end}")
        stream.flush()

    return show
