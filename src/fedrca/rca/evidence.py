"""What the engine knew when it issued a verdict: the input of the calibration and of the reason.

:class:`Evidence` is a snapshot the engine takes only when it issues a verdict (never per row):
the log evidence of every hypothesis, the same without the onset order (what the window's flags
alone say), and per plant whether it alarms, when it first alarmed in the incident
(:class:`fedrca.rca.memory.IncidentMemory`), in what share of the window's rows, and its dominant
flag pair. :mod:`fedrca.rca.calibration` turns it into root probabilities, :mod:`fedrca.rca.explain`
into the verdict's candidate set and reason; both are pure functions of it, so the same flags give
the same verdicts in ``fedrca replay``, the demo and the Kafka workers.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

__all__ = ["Evidence", "softmax"]

FloatArray = NDArray[np.float64]
IntArray = NDArray[np.int64]
BoolArray = NDArray[np.bool_]


def softmax(log_weights: FloatArray) -> FloatArray:
    """exp(a - max a) / sum(...): probabilities from log weights (uniform when every one is -inf).

    Examples
    --------
    >>> softmax(np.log(np.array([1.0, 3.0]))).tolist()
    [0.25, 0.75]
    """
    a = np.asarray(log_weights, dtype=np.float64)
    top = np.max(a, axis=-1, keepdims=True)
    if not np.all(np.isfinite(top)):
        return np.full(a.shape, 1.0 / a.shape[-1])
    w = np.exp(a - top)
    return np.asarray(w / w.sum(axis=-1, keepdims=True))


@dataclass(frozen=True, eq=False)
class Evidence:
    """The engine's evidence at an issued verdict (arrays in the engine's plant order).

    Attributes
    ----------
    plants : plant names (M)
    seq : the row the verdict is issued at
    window : (first, last) seq of the evidence rows
    rows : number of evidence rows
    log_evidence : (M + 3,) log evidence + log prior of [none, root 1..M, external, unexplained]
    unordered : (M + 3,) the same without the onset-order evidence (the window's flags and the graph
        alone): where it and ``log_evidence`` rank the roots differently, the order decided
    alarming : (M,) the plant alarms now (its CUSUM is above zero after crossing the threshold)
    first : (M,) row each plant first alarmed in the current incident (-1: not in this incident)
    alarm_rows : (M,) rows each plant has alarmed in the incident
    share : (M,) share of the window's rows with the true proprietary flag on (the published rate with the
        randomized response taken out, clipped to [0, 1])
    pairs : (M,) dominant true flag state ``2 Z_c + Z_a`` over the window
    """

    plants: tuple[str, ...]
    seq: int
    window: tuple[int, int]
    rows: int
    log_evidence: FloatArray
    unordered: FloatArray
    alarming: BoolArray
    first: IntArray
    alarm_rows: IntArray
    share: FloatArray
    pairs: IntArray

    @property
    def n_plants(self) -> int:
        """M."""
        return len(self.plants)

    @property
    def roots(self) -> FloatArray:
        """(M,) log evidence of the root hypotheses."""
        return np.asarray(self.log_evidence[1 : self.n_plants + 1])

    def root_posterior(self) -> FloatArray:
        """(M,) the engine's posterior over the root hypotheses alone (sums to 1): P(root = k | a single
        root among the plants), uncalibrated."""
        return softmax(self.roots)

    def posterior(self) -> FloatArray:
        """(M + 3,) the engine's posterior over every hypothesis."""
        return softmax(self.log_evidence)

    @property
    def incident_start(self) -> int | None:
        """The incident's first alarm row (None when no plant has alarmed in it)."""
        began = self.first[self.first >= 0]
        return int(began.min()) if began.size else None
