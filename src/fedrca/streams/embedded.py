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
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TextIO, TypeVar

import numpy as np

from fedrca.config import SiteConfig
from fedrca.connectors.replay import Pacer
from fedrca.contracts import FlagMessage, SensorMessage, Verdict, encode_flags
from fedrca.detectors.base import DetectionResult
from fedrca.detectors.health import HealthResult
from fedrca.drift import RefreshReport
from fedrca.streams.runtime import SiteRuntime

_R = TypeVar("_R")

__all__ = ["EmbeddedRun", "progress_bar", "replay_chunks", "replay_frame"]


@dataclass
class EmbeddedRun:
    """What one replay produced (the same records the topics would hold).

    ``results`` is each plant processor's local evidence (d2, flags) and ``health`` its sensor
    checks (which tag, which check), kept for the operator report of the embedded default; they
    never reach the RCA stage. ``refreshes``: the plants' re-baselining loops' refreshes during
    the replay (``drift.enabled``). ``flags`` holds every published flag message only when the
    replay keeps them (``keep_flags``: the tests and tools that compare them with the topics'; the
    demo's report reads none); ``n_flags`` counts them either way.
    """

    flags: list[FlagMessage] = field(default_factory=list)
    verdicts: list[Verdict] = field(default_factory=list)
    deadletters: list[tuple[bytes, str]] = field(default_factory=list)
    results: dict[str, DetectionResult] = field(default_factory=dict)
    health: dict[str, HealthResult] = field(default_factory=dict)
    rows: int = 0
    seconds: float = 0.0
    refreshes: list[RefreshReport] = field(default_factory=list)
    n_flags: int = 0


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
    quality: Mapping[str, np.ndarray] | None = None,
    keep_flags: bool = True,
) -> EmbeddedRun:
    """Replay per-plant arrays (T, D_m) through the runtime, ``chunk`` rows at a time.

    Each row becomes one sensors message per plant (bytes), each flag one flags
    message (bytes); verdicts are collected in order. With a ``pacer`` the rows are
    released at their sample time scaled by its speed (``Pacer.from_spec("x600")``).
    ``quality``: per-plant (T, D_m) quality codes of the values (:class:`~fedrca.contracts.Quality`;
    NaN values are missing without them). ``keep_flags``: keep every flag message in the run
    (:class:`EmbeddedRun`; False: only their count).
    """
    plants = runtime.config.plant_names
    T = len(next(iter(plant_values.values())))
    arrays = {p: np.asarray(plant_values[p], dtype=np.float64) for p in plants}
    codes = {p: np.asarray(q, dtype=np.uint8) for p, q in (quality or {}).items()}
    chunks = (
        (lo, {p: arrays[p][lo : lo + chunk] for p in plants}, {p: q[lo : lo + chunk] for p, q in codes.items()})
        for lo in range(0, T, chunk)
    )
    return replay_chunks(
        runtime,
        chunks,
        total=T,
        sample_seconds=sample_seconds,
        start_ts=start_ts,
        pacer=pacer,
        on_verdict=on_verdict,
        progress=progress,
        keep_flags=keep_flags,
    )


#: A plant's results are joined every this many chunks: a live source of one row per chunk (a slow
#: simulated plant) would otherwise keep one small result object per row and plant until the end
#: (``tests/streams/test_embedded.py::test_one_row_chunks_give_the_results_of_whole_chunks``).
FOLD = 256


def _keep(kept: list[_R], part: _R, concat: Callable[[list[_R]], _R]) -> None:
    """Append ``part`` to ``kept``, joining the last :data:`FOLD` parts into one when that many are unjoined
    (the joined results are those of one concatenation of all the parts: row offsets add up)."""
    kept.append(part)
    if len(kept) % FOLD == 0:
        kept[-FOLD:] = [concat(kept[-FOLD:])]


def replay_chunks(
    runtime: SiteRuntime,
    chunks: Iterable[tuple[int, dict[str, np.ndarray]] | tuple[int, dict[str, np.ndarray], dict[str, np.ndarray]]],
    *,
    total: int,
    sample_seconds: float = 1.0,
    start_ts: float = 0.0,
    pacer: Pacer | None = None,
    on_verdict: Callable[[Verdict], None] | None = None,
    progress: Callable[[int, int], None] | None = None,
    keep_flags: bool = True,
) -> EmbeddedRun:
    """Run consecutive chunks of rows through the runtime as they come (a live source: a generator).

    Each chunk is ``(seq of its first row, {plant: (n, D_m) rows})``, optionally with a third
    ``{plant: (n, D_m) quality codes}`` (NaN values are missing without them); row ``seq`` has
    the timestamp ``start_ts + seq * sample_seconds``. ``total`` is the number of rows planned
    (for ``progress``; a live source may end earlier). ``keep_flags``: keep every flag message in the
    run (False: only their count, ``EmbeddedRun.n_flags``; the demo's 10,000-sample live run would hold
    50,000 of them for nothing, docs/limits.md).
    """
    config: SiteConfig = runtime.config
    plants = config.plant_names
    out = EmbeddedRun(rows=0)
    started = time.perf_counter()
    parts: dict[str, list[DetectionResult]] = {p: [] for p in plants}
    checks: dict[str, list[HealthResult]] = {p: [] for p in plants}
    if pacer is not None:
        pacer.begin(start_ts)

    def emit(verdicts: list[Verdict]) -> None:
        for v in verdicts:
            out.verdicts.append(v)
            if on_verdict is not None:
                on_verdict(v)

    for lo, rows, *more in chunks:
        codes = more[0] if more else {}
        hi = lo + len(rows[plants[0]])
        if pacer is not None:
            pacer.wait(start_ts + lo * sample_seconds)
        chunk_flags: list[FlagMessage] = []
        for plant in plants:
            q = codes.get(plant)
            values = rows[plant]
            messages = [
                SensorMessage(config.site, plant, start_ts + t * sample_seconds, t, values[t - lo])
                if q is None
                else SensorMessage(config.site, plant, start_ts + t * sample_seconds, t, values[t - lo], q[t - lo])
                for t in range(lo, hi)
            ]
            raws = [m.encode() for m in messages]
            batch = runtime.plants.decode_sensors(raws, plant=plant)
            result = runtime.plants.process_plant(plant, batch.valid, batch)
            out.deadletters += [(raw, err.reason) for raw, err in batch.rejected]
            if result.result is not None:
                _keep(parts[plant], result.result, DetectionResult.concat)
            if result.health is not None:
                _keep(checks[plant], result.health, HealthResult.concat)
            out.refreshes += result.refreshes
            chunk_flags += result.flags
        # Flags reach the RCA sample by sample, as from processors that keep pace with the sensors.
        order = {p: i for i, p in enumerate(plants)}
        chunk_flags.sort(key=lambda f: (f.seq, order[f.plant]))
        out.n_flags += len(chunk_flags)
        if keep_flags:
            out.flags += chunk_flags
        verdicts, rejected = runtime.rca.process_flags(encode_flags(chunk_flags))
        out.deadletters += [(raw, err.reason) for raw, err in rejected]
        emit(verdicts)
        out.rows = hi
        if progress is not None:
            progress(hi, total)
    emit(runtime.rca.flush())
    out.results = {p: DetectionResult.concat(parts[p]) for p in plants if parts[p]}
    out.health = {p: HealthResult.concat(checks[p]) for p in plants if checks[p]}
    out.seconds = time.perf_counter() - started
    return out


def progress_bar(label: str, stream: TextIO | None = None, width: int = 30) -> Callable[[int, int], None]:
    """A one-line progress display on ``stream`` (default: the standard error stream at the call, not at
    import: ``tests/connectors/test_simulator.py`` runs the demo with the test's captured stream), carriage-return
    updated when it is a terminal."""
    out = sys.stderr if stream is None else stream
    interactive = out.isatty()
    shown = [-1]

    def show(done: int, total: int) -> None:
        percent = int(100 * done / max(total, 1))
        if not interactive and percent // 25 == shown[0] // 25 and done < total:
            return  # logs get a line per quarter, terminals a live bar
        shown[0] = percent
        filled = int(width * done / max(total, 1))
        end = "\n" if done >= total or not interactive else ""
        out.write(f"\r  {label:<14} [{'#' * filled}{'.' * (width - filled)}] {done}/{total}{end}")
        out.flush()

    return show
