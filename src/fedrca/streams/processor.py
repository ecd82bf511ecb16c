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
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from fedrca.contracts import FlagMessage, SensorMessage
from fedrca.detectors.plant import DetectionResult, Detector
from fedrca.exceptions import ConfigError
from fedrca.privacy.ledger import FlagWindow

__all__ = ["PlantProcessor", "ProcessorOutput"]


@dataclass
class ProcessorOutput:
    """What one batch produced."""

    flags: list[FlagMessage] = field(default_factory=list)
    duplicates: int = 0
    result: DetectionResult | None = None
    withheld: int = 0
    overrun: int = 0


class PlantProcessor:
    """Per-plant stream processing core.

    Parameters
    ----------
    site : site name
    detector : the fitted detector of this plant
    window : the plant's flag ledger (None: not accounted)
    on_exhausted : ``warn`` (publish past the budget) or ``stop`` (publish withheld flags)
    """

    def __init__(
        self, site: str, detector: Detector, window: FlagWindow | None = None, on_exhausted: str = "warn"
    ) -> None:
        if on_exhausted not in ("warn", "stop"):
            raise ConfigError(f"privacy.on_exhausted must be 'warn' or 'stop', got {on_exhausted!r}")
        self.site = site
        self.detector = detector
        self.window = window
        self.on_exhausted = on_exhausted
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
    def model_version(self) -> str:
        """Parameter version currently producing the flags."""
        return self.detector.parameter_version

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
        result = self.detector.step_batch(Y)
        self._last_seq = last
        eps = self.detector.epsilon
        version = self.model_version
        zc = result.zc_pub.astype(int).tolist()
        za = result.za_pub.astype(int).tolist()
        eps = math.inf if math.isinf(eps) else eps
        withheld: list[bool] = [False] * len(fresh)
        overrun = 0
        window = self.window
        if window is not None and window.active:
            seqs = np.fromiter((m.seq for m in fresh), dtype=np.int64, count=len(fresh))
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
            for v in (result.level_pub.tolist() if len(result.level_pub) == len(fresh) else [-1] * len(fresh))
        ]
        level_eps = float(getattr(self.detector, "level_epsilon", math.inf))
        flags = [
            FlagMessage(self.site, self.plant, m.ts, m.seq, 0, 0, eps, version, True)
            if withheld[i]
            else FlagMessage(
                self.site, self.plant, m.ts, m.seq, zc[i], za[i], eps, version, False, levels[i], level_eps
            )
            for i, m in enumerate(fresh)
        ]
        return ProcessorOutput(
            flags=flags, duplicates=duplicates, result=result, withheld=sum(withheld), overrun=overrun
        )

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

    def get_state(self, copy_state: bool = True) -> dict[str, Any]:
        """Everything needed to resume after a restart.

        ``copy_state=False`` skips the defensive deep copy of the detector's state, for a
        caller that serialises the state at once (the Faust agent writing its table).
        """
        state = self.detector.get_state()
        out = {"detector": copy.deepcopy(state) if copy_state else state, "last_seq": self._last_seq}
        if self.window is not None:
            out["privacy"] = self.window.get_state()
        return out

    def set_state(self, state: dict[str, Any]) -> None:
        """Resume from :meth:`get_state` output."""
        self.detector.set_state(copy.deepcopy(state["detector"]))
        self._last_seq = int(state["last_seq"])
        if self.window is not None:
            self.window.set_state(state.get("privacy"))
