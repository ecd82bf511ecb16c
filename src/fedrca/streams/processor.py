"""Pure core of a plant processor: validated sensor messages in, published flags out.

Used as is by the Faust agent (one batch per ``stream.take``) and by the
embedded runner. It owns one :class:`PlantDetector`; its whole state (detector
state, last processed seq, parameter version) is a JSON-friendly dict that the
Faust agent keeps in a changelog-backed table, so a restarted processor
continues exactly where the last committed batch ended.

Duplicates (a seq at or below the last processed one, e.g. redelivered after a
crash) are skipped deterministically: the flags for them were already produced.
Raw values never appear in the output: flags carry only the published bits.
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from fedrca.contracts import FlagMessage, SensorMessage
from fedrca.detectors.plant import DetectionResult, Detector

__all__ = ["PlantProcessor", "ProcessorOutput"]


@dataclass
class ProcessorOutput:
    """What one batch produced."""

    flags: list[FlagMessage] = field(default_factory=list)
    duplicates: int = 0
    result: DetectionResult | None = None


class PlantProcessor:
    """Per-plant stream processing core.

    Parameters
    ----------
    site : site name
    detector : the fitted detector of this plant
    """

    def __init__(self, site: str, detector: Detector) -> None:
        self.site = site
        self.detector = detector
        self._last_seq = -1

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
        # severity levels travel with the flags when the plant publishes them (negative = none)
        levels: list[int | None] = [
            None if v < 0 else int(v)
            for v in (result.level_pub.tolist() if len(result.level_pub) == len(fresh) else [-1] * len(fresh))
        ]
        level_eps = float(getattr(self.detector, "level_epsilon", math.inf))
        flags = [
            FlagMessage(
                self.site,
                self.plant,
                m.ts,
                m.seq,
                zc[i],
                za[i],
                math.inf if math.isinf(eps) else eps,
                version,
                levels[i],
                level_eps,
            )
            for i, m in enumerate(fresh)
        ]
        return ProcessorOutput(flags=flags, duplicates=duplicates, result=result)

    def reset(self) -> None:
        """Forget the stream (a new recording starts at seq 0); parameters are kept."""
        self.detector.reset()
        self._last_seq = -1

    def get_state(self, copy_state: bool = True) -> dict[str, Any]:
        """Everything needed to resume after a restart.

        ``copy_state=False`` skips the defensive deep copy of the detector's state, for a
        caller that serialises the state at once (the Faust agent writing its table).
        """
        state = self.detector.get_state()
        return {"detector": copy.deepcopy(state) if copy_state else state, "last_seq": self._last_seq}

    def set_state(self, state: dict[str, Any]) -> None:
        """Resume from :meth:`get_state` output."""
        self.detector.set_state(copy.deepcopy(state["detector"]))
        self._last_seq = int(state["last_seq"])
