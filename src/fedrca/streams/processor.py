"""Pure core of a plant processor: validated sensor messages in, published flags out.

Used as is by the Faust agent (one batch per ``stream.take``) and by the
embedded runner. It owns one :class:`PlantDetector`; its whole state (detector
state, last processed seq, parameter version) is a JSON-friendly dict that the
plant agent commits as the plant's state record with every batch (:mod:`fedrca.streams.agents`),
so a restarted processor continues exactly where the last committed batch ended.

Duplicates (a seq at or below the last processed one, e.g. redelivered after a
crash) are skipped deterministically: the flags for them were already produced.
Raw values never appear in the output: flags carry only the published bits.

With a :class:`~fedrca.privacy.ledger.FlagWindow` the processor keeps the plant's
inference-time privacy ledger: every published randomized-response bit is counted in
the window, and when the next samples would pass the plant's budget it either publishes
them anyway (``on_exhausted="warn"``; the overrun is counted) or publishes *withheld*
flags without bits (``"stop"``), which are not charged. The window is part of the state.

Missing values (NaN, ``null`` on the wire) go to the detector, which scores the observed
sensors (docs/missing.md). A row it could not score (fewer usable sensors than the plant's
``min_sensors``: :attr:`DetectionResult.degraded`) is published as a flag with ``degraded`` set
and no bits (the RCA takes it as no evidence), and is not charged to the window (it releases
nothing computed from the values), but for the sensor-fault bit below.

With a :class:`~fedrca.detectors.health.SensorHealth` the plant checks its own tags first: a
stale, Bad, stuck, flat or out-of-range tag is excluded (NaN) from the detector's rows, and
every flag carries the plant's sensor-fault bit (randomized like the flags, one more bit per
sample in the window; a degraded row publishes that bit alone). Which tag stays here.

Time: a message whose seq is below the last processed one is a *duplicate* (a redelivery) or,
when its seq was skipped (a later one came first), *late*: the processor published a degraded
flag for every skipped seq as soon as the later one arrived (at most :data:`MAX_GAP_FILL`), so
the RCA judges those rows without this plant at once, and returns the late message for the
caller to dead-letter (``late``) and count: never a silent drop.

With a :class:`~fedrca.drift.BaselineKeeper` (``drift.enabled``) the batch goes through the
plant's re-baselining loop: the rows are scored, kept in its history with their alarm states,
and the baseline is refreshed at the seqs the schedule names; the flags carry the baseline's
version (``v3+b2``: training artifact v3, local baseline b2). The keeper's small state is part
of the processor's state; its history and baselines are persisted by the shell
(:class:`fedrca.streams.agents.PlantAgent`).
"""

from __future__ import annotations

import copy
import math
from collections import deque
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import NDArray

from fedrca.contracts import FlagMessage, SensorMessage
from fedrca.detectors.base import DetectionResult, Detector
from fedrca.detectors.health import HealthResult, SensorHealth
from fedrca.drift import BaselineKeeper, RefreshReport
from fedrca.exceptions import ConfigError
from fedrca.privacy.ledger import FlagWindow

__all__ = ["PlantProcessor", "ProcessorOutput"]

#: Refresh outcomes that change the baseline in force.
CHANGES = ("applied", "limited", "forced", "rollback")
#: Reports a keeper holds between batches (each batch's are handed out in its ProcessorOutput).
REPORTS_KEPT = 16


#: Most consecutive skipped seqs a processor publishes degraded flags for (a longer jump is left to
#: the aligner's lateness: a restart of the source, not a lost row).
MAX_GAP_FILL = 1000
#: Skipped runs of seqs a processor remembers to tell a late row from a duplicate.
MAX_GAPS = 256


def _flag_message(
    site: str,
    plant: str,
    ts: float,
    seq: int,
    zc: int,
    za: int,
    eps: float,
    version: str,
    withheld: bool,
    level: int | None,
    level_eps: float,
    degraded: bool,
    sensor_fault: bool,
) -> FlagMessage:
    """``FlagMessage(site, plant, ..., sensor_fault)`` (every field, positionally) without the frozen dataclass's
    per-field ``__init__``, as :func:`fedrca.contracts.decode_flags` builds its fast path's: a plant worker builds
    one per sensor message. The processor's fields are of the message's types already (its floats, ints, bools);
    ``tests/streams/test_processor.py::test_the_flags_are_those_of_the_dataclass`` checks the flags equal the
    dataclass's, field by field and encoded."""
    flag = object.__new__(FlagMessage)
    object.__setattr__(flag, "__dict__", {
        "site": site, "plant": plant, "ts": ts, "seq": seq, "zc": zc, "za": za, "eps": eps, "model_version": version,
        "withheld": withheld, "level": level, "level_eps": level_eps, "degraded": degraded,
        "sensor_fault": sensor_fault,
    })  # fmt: skip
    return flag


@dataclass
class ProcessorOutput:
    """What one batch produced.

    ``health``: the sensor checks of the batch's rows (None without checks); ``late``: messages of
    seqs the processor skipped when a later one came first (their rows were published degraded:
    the caller dead-letters them with reason ``late``); ``skipped``: degraded flags published for
    such skipped seqs.
    """

    flags: list[FlagMessage] = field(default_factory=list)
    duplicates: int = 0
    result: DetectionResult | None = None
    withheld: int = 0
    overrun: int = 0
    degraded: int = 0
    health: HealthResult | None = None
    late: list[SensorMessage] = field(default_factory=list)
    skipped: int = 0
    refreshes: list[RefreshReport] = field(default_factory=list)


class PlantProcessor:
    """Per-plant stream processing core.

    Parameters
    ----------
    site : site name
    detector : the fitted detector of this plant
    window : the plant's flag ledger (None: not accounted)
    on_exhausted : ``warn`` (publish past the budget) or ``stop`` (publish withheld flags)
    keeper : the plant's re-baselining loop around ``detector`` (None: the baseline stays as fitted)
    """

    def __init__(
        self,
        site: str,
        detector: Detector,
        window: FlagWindow | None = None,
        on_exhausted: str = "warn",
        health: SensorHealth | None = None,
        keeper: BaselineKeeper | None = None,
    ) -> None:
        if on_exhausted not in ("warn", "stop"):
            raise ConfigError(f"privacy.on_exhausted must be 'warn' or 'stop', got {on_exhausted!r}")
        if keeper is not None and keeper.detector is not detector:
            raise ConfigError(f"plant '{detector.name}': the re-baselining loop wraps another detector")
        self.site = site
        self.detector = detector
        self.window = window
        self.on_exhausted = on_exhausted
        self.health = health
        self.keeper = keeper
        self._last_seq = -1
        self._last_ts = 0.0
        self._gaps: deque[tuple[int, int]] = deque(maxlen=MAX_GAPS)

    @property
    def bits_per_sample(self) -> int:
        """Randomized-response bits a scored sample publishes: Z_c and Z_a (Z_c alone for a detector without
        Z_a), and the sensor-fault bit when the plant checks its sensors."""
        return (2 if getattr(self.detector, "has_augmented", True) else 1) + int(self.health is not None)

    @property
    def plant(self) -> str:
        """Plant name."""
        return self.detector.name

    @property
    def last_seq(self) -> int:
        """Highest seq processed so far (-1 before the first)."""
        return self._last_seq

    @property
    def training_version(self) -> str:
        """The version of the training artifact in use (``proprietary`` before any)."""
        return self.detector.parameter_version

    @property
    def model_version(self) -> str:
        """Parameter version currently producing the flags: the training version, and ``+b<n>`` once the
        plant's loop re-baselined (b0, the fitted baseline, adds nothing)."""
        keeper = self.keeper
        if keeper is None or keeper.version == 0:
            return self.detector.parameter_version
        return f"{self.detector.parameter_version}+b{keeper.version}"

    def process(self, messages: list[SensorMessage]) -> ProcessorOutput:
        """Process a batch of this plant's messages in arrival order (vectorised over the batch)."""
        fresh: list[SensorMessage] = []
        late: list[SensorMessage] = []
        gap_flags: list[FlagMessage] = []
        duplicates = 0
        last, last_ts = self._last_seq, self._last_ts
        eps = self.detector.epsilon
        eps = math.inf if math.isinf(eps) else eps
        version = self.model_version
        for msg in messages:
            if msg.seq <= last:
                if self._in_gap(msg.seq):
                    late.append(msg)  # skipped when it was due: judged without this plant, dead-lettered
                else:
                    duplicates += 1
                continue
            if last >= 0 and msg.seq > last + 1:
                gap_flags += self._skip(last, last_ts, msg, eps, version)
            fresh.append(msg)
            last, last_ts = msg.seq, msg.ts
        if not fresh:
            return ProcessorOutput(gap_flags, duplicates=duplicates, late=late, skipped=len(gap_flags))
        Y = np.vstack([m.values for m in fresh])
        seqs = np.fromiter((m.seq for m in fresh), np.int64, len(fresh))
        checked: HealthResult | None = None
        if self.health is not None:
            # the plant's sensor checks: a broken tag is excluded (NaN) before the detector sees it; the quality
            # codes are non-zero only where a value is missing (SensorMessage), so rows without one need none
            quality = np.vstack([m.quality for m in fresh]) if np.isnan(Y).any() else None
            checked = self.health.update(Y, quality)
            Y = checked.values
        # missing values are NaN: the detector scores the observed sensors, and degrades a row with too few
        refreshes: list[RefreshReport] = []
        if self.keeper is None:
            result = self.detector.step_batch(Y)
        else:
            # the plant's re-baselining loop: rows into its history, refreshes at the seqs due
            seen = len(self.keeper.reports)
            result = self.keeper.process(Y, seqs=seqs)
            refreshes = self.keeper.reports[seen:]
            del self.keeper.reports[: len(self.keeper.reports) - REPORTS_KEPT]
        degraded: NDArray[np.bool_] = np.asarray(result.degraded, dtype=bool)
        keep = ~degraded
        self._last_seq, self._last_ts = last, last_ts
        # randomized-response bits of each row: the flags of a scored row, the sensor bit of every row
        sensor_bit = int(checked is not None)
        bits = np.where(degraded, sensor_bit, self.bits_per_sample)
        published, overrun = self._account(seqs, bits)
        sensor = checked.fault_pub.tolist() if checked is not None else [False] * len(fresh)
        flags: list[FlagMessage] = []
        i = 0  # index among the scored rows
        n_scored = int(keep.sum())
        zc = result.zc_pub[keep].astype(int).tolist()
        za = result.za_pub[keep].astype(int).tolist()
        # severity levels travel with the flags when the plant publishes them (negative = none)
        levels: list[int | None] = [
            None if v < 0 else int(v)
            for v in (result.level_pub[keep].tolist() if len(result.level_pub) == len(fresh) else [-1] * n_scored)
        ]
        level_eps = float(getattr(self.detector, "level_epsilon", math.inf))
        withheld = 0
        # a refresh inside the batch: the rows before it carry the old baseline's version
        versions = self._versions(fresh, refreshes, version)
        site, plant, inf, flag_of = self.site, self.plant, math.inf, _flag_message
        rows = zip(fresh, versions, degraded.tolist(), published.tolist(), sensor, strict=True)
        for m, v, row_degraded, row_published, row_fault in rows:
            fault = bool(row_fault) and row_published
            if row_degraded:
                flags.append(flag_of(site, plant, m.ts, m.seq, 0, 0, eps, v, False, None, inf, True, fault))
            elif not row_published:
                flags.append(flag_of(site, plant, m.ts, m.seq, 0, 0, eps, v, True, None, inf, False, False))
                withheld += 1
            else:
                flags.append(flag_of(site, plant, m.ts, m.seq, zc[i], za[i], eps, v, False, levels[i], level_eps, False,
                                     fault))  # fmt: skip
            i += not row_degraded
        return ProcessorOutput(
            flags=sorted(gap_flags + flags, key=lambda f: f.seq) if gap_flags else flags,
            duplicates=duplicates,
            result=result,
            withheld=withheld,
            overrun=overrun,
            degraded=int(degraded.sum()),
            health=checked,
            late=late,
            skipped=len(gap_flags),
            refreshes=refreshes,
        )

    def _account(self, seqs: NDArray[np.int64], bits: NDArray[np.int64]) -> tuple[NDArray[np.bool_], int]:
        """Charge each row's randomized-response bits to the window, in seq order; returns which rows
        publish (all but those ``stop`` withholds) and how many passed the budget (``warn``)."""
        published = np.ones(len(seqs), dtype=bool)
        window = self.window
        if window is None or not window.active:
            return published, 0
        overrun = 0
        # runs of rows with the same number of bits (a scored row's flags, a degraded row's sensor bit)
        edges = np.flatnonzero(np.diff(bits)) + 1
        for lo, hi in zip(np.r_[0, edges], np.r_[edges, len(bits)], strict=True):
            n = int(bits[lo])
            if n == 0:
                continue  # nothing released
            ok = window.admit(seqs[lo:hi], n)
            if self.on_exhausted == "stop":
                published[lo:hi] = ok
                window.record(seqs[lo:hi][ok], n)
            else:
                overrun += int(np.count_nonzero(~ok))
                window.record(seqs[lo:hi], n)
        return published, overrun

    def _in_gap(self, seq: int) -> bool:
        """Whether ``seq`` was skipped (published as a degraded flag when a later seq came first)."""
        return any(a <= seq < b for a, b in self._gaps)

    def _skip(self, last: int, last_ts: float, msg: SensorMessage, eps: float, version: str) -> list[FlagMessage]:
        """Degraded flags for the seqs between ``last`` and ``msg.seq`` (a lost or late row: the RCA judges
        those rows without this plant at once instead of waiting for it); at most :data:`MAX_GAP_FILL`."""
        first = max(last + 1, msg.seq - MAX_GAP_FILL)
        self._gaps.append((first, msg.seq))
        span = msg.seq - last
        # the skipped rows' times: between the rows around the gap
        times = [last_ts + (msg.ts - last_ts) * (seq - last) / span for seq in range(first, msg.seq)]
        return [
            self._flag(t, seq, eps, version, degraded=True) for t, seq in zip(times, range(first, msg.seq), strict=True)
        ]

    def _flag(self, ts: float, seq: int, eps: float, version: str, zc: int = 0, za: int = 0, **kw: Any) -> FlagMessage:
        return FlagMessage(self.site, self.plant, ts, seq, zc, za, eps, version, **kw)

    def _versions(self, fresh: list[SensorMessage], refreshes: list[RefreshReport], before: str) -> list[str]:
        """The parameter version of each row's flag: the baseline in force when the row was scored
        (``before``: the version at the batch's start)."""
        changes = [r for r in refreshes if r.outcome in CHANGES]
        if not changes:
            return [before] * len(fresh)
        training = self.training_version
        out, current, i = [], before, 0
        for m in fresh:
            while i < len(changes) and m.seq >= changes[i].seq:
                version = changes[i].version
                current = training if version == 0 else f"{training}+b{version}"
                i += 1
            out.append(current)
        return out

    def reset(self) -> None:
        """Forget the stream (a new recording starts at seq 0); parameters are kept, so is the privacy window.

        The window is the plant's spend, not the recording's: flags published before a reset
        still count until they leave it (seq restarts at 0, so they leave it by age, see
        :meth:`FlagWindow.restart <fedrca.privacy.ledger.FlagWindow.restart>`).
        """
        self.detector.reset()
        if self.health is not None:
            self.health.reset()
        self._last_seq = -1
        self._last_ts = 0.0
        self._gaps.clear()
        if self.window is not None:
            self.window.restart()
        if self.keeper is not None:
            self.keeper.reset()

    def get_state(self, copy_state: bool = True) -> dict[str, Any]:
        """Everything needed to resume after a restart.

        ``copy_state=False`` skips the defensive deep copy of the detector's state, for a
        caller that serialises the state at once (the Faust agent writing its table).
        """
        state = self.detector.get_state()
        out = {"detector": copy.deepcopy(state) if copy_state else state, "last_seq": self._last_seq}
        if self.window is not None:
            out["privacy"] = self.window.get_state()
        if self.health is not None:
            out["health"] = self.health.get_state()
        if self._gaps or self._last_ts:
            out["last_ts"] = self._last_ts
            out["gaps"] = [list(g) for g in self._gaps]
        if self.keeper is not None:
            out["drift"] = self.keeper.get_state()
        return out

    def set_state(self, state: dict[str, Any]) -> None:
        """Resume from :meth:`get_state` output.

        With a keeper, its history and baselines must have been loaded first (the shell reads them
        from the plant's history topic); the baseline the state names is installed before the
        detector's streaming state, whose EWMA memories belong to it.
        """
        if self.keeper is not None:
            self.keeper.set_state(state.get("drift"))
        self.detector.set_state(copy.deepcopy(state["detector"]))
        self._last_seq = int(state["last_seq"])
        if self.window is not None:
            self.window.set_state(state.get("privacy"))
        if self.health is not None:
            if state.get("health") is None:
                self.health.reset()  # a state written without sensor checks: every tag healthy
            else:
                self.health.set_state(state["health"])
        self._last_ts = float(state.get("last_ts", 0.0))
        self._gaps = deque((tuple(g) for g in state.get("gaps", [])), maxlen=MAX_GAPS)
