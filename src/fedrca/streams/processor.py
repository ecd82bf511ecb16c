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

A row with a missing value (NaN, ``null`` on the wire) is *degraded*: not scored, published
as a flag with ``degraded`` set and no bits (the RCA takes it as no evidence), and not charged
to the window (it releases nothing computed from the values).

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
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import NDArray

from fedrca.contracts import FlagMessage, SensorMessage
from fedrca.detectors.plant import DetectionResult, Detector
from fedrca.drift import BaselineKeeper, RefreshReport
from fedrca.exceptions import ConfigError
from fedrca.privacy.ledger import FlagWindow

__all__ = ["PlantProcessor", "ProcessorOutput"]

#: Refresh outcomes that change the baseline in force.
CHANGES = ("applied", "limited", "forced", "rollback")
#: Reports a keeper holds between batches (each batch's are handed out in its ProcessorOutput).
REPORTS_KEPT = 16


@dataclass
class ProcessorOutput:
    """What one batch produced."""

    flags: list[FlagMessage] = field(default_factory=list)
    duplicates: int = 0
    result: DetectionResult | None = None
    withheld: int = 0
    overrun: int = 0
    degraded: int = 0
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
        self.keeper = keeper
        self._last_seq = -1

    @property
    def bits_per_sample(self) -> int:
        """Randomized-response bits one sample publishes (Z_c and Z_a; Z_c alone for a detector without Z_a)."""
        return 2 if getattr(self.detector, "has_augmented", True) else 1

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
        duplicates = 0
        last = self._last_seq
        for msg in messages:
            if msg.seq <= last:
                duplicates += 1
                continue
            fresh.append(msg)
            last = msg.seq
        if not fresh:
            return ProcessorOutput(duplicates=duplicates)
        Y = np.vstack([m.values for m in fresh])
        version = self.model_version
        # rows with a missing value are degraded (not scored, no evidence); the detector steps on the rest
        degraded: NDArray[np.bool_] = np.asarray(np.isnan(Y).any(axis=1))
        scored = fresh
        if degraded.any():
            scored = [m for m, bad in zip(fresh, degraded.tolist(), strict=True) if not bad]
            Y = Y[~degraded]
        refreshes: list[RefreshReport] = []
        result: DetectionResult | None = None
        if scored and self.keeper is None:
            result = self.detector.step_batch(Y)
        elif scored and self.keeper is not None:
            # the plant's re-baselining loop: scored rows into its history, refreshes at the seqs due
            seen = len(self.keeper.reports)
            seqs = np.fromiter((m.seq for m in scored), dtype=np.int64, count=len(scored))
            result = self.keeper.process(Y, seqs=seqs)
            refreshes = self.keeper.reports[seen:]
            del self.keeper.reports[: len(self.keeper.reports) - REPORTS_KEPT]
        self._last_seq = last
        eps = self.detector.epsilon
        eps = math.inf if math.isinf(eps) else eps
        # a refresh inside the batch: the rows before it carry the old baseline's version
        versions = dict(zip((m.seq for m in fresh), self._versions(fresh, refreshes, version), strict=True))
        flags: dict[int, FlagMessage] = {}
        withheld: list[bool] = [False] * len(scored)
        overrun = 0
        if result is not None:
            zc = result.zc_pub.astype(int).tolist()
            za = result.za_pub.astype(int).tolist()
            window = self.window
            if window is not None and window.active:
                seqs = np.fromiter((m.seq for m in scored), dtype=np.int64, count=len(scored))
                ok = window.admit(seqs, self.bits_per_sample)
                if self.on_exhausted == "stop":
                    withheld = (~ok).tolist()
                    window.record(seqs[ok], self.bits_per_sample)
                else:
                    overrun = int(np.count_nonzero(~ok))
                    window.record(seqs, self.bits_per_sample)
            # severity levels travel with the flags when the plant publishes them (negative = none)
            levels: list[int | None] = [
                None if v < 0 else int(v)
                for v in (result.level_pub.tolist() if len(result.level_pub) == len(scored) else [-1] * len(scored))
            ]
            level_eps = float(getattr(self.detector, "level_epsilon", math.inf))
            for i, m in enumerate(scored):
                v = versions[m.seq]
                flags[m.seq] = (
                    FlagMessage(self.site, self.plant, m.ts, m.seq, 0, 0, eps, v, True)
                    if withheld[i]
                    else FlagMessage(
                        self.site, self.plant, m.ts, m.seq, zc[i], za[i], eps, v, False, levels[i], level_eps
                    )
                )
        site, plant = self.site, self.plant
        out = [
            flags.get(m.seq) or FlagMessage(site, plant, m.ts, m.seq, 0, 0, eps, versions[m.seq], degraded=True)
            for m in fresh
        ]
        return ProcessorOutput(
            flags=out,
            duplicates=duplicates,
            result=result,
            withheld=sum(withheld),
            overrun=overrun,
            refreshes=refreshes,
            degraded=len(fresh) - len(scored),
        )

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
        self._last_seq = -1
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
