"""The base contract every fedrca detector satisfies: :class:`Detector` and its :class:`DetectionResult`.

A detector watches one plant. ``fit`` calibrates it on nominal data only; ``step_batch``
(and ``step``, one row) turns samples ``Y`` (T, D) into a :class:`DetectionResult`: per
row a score and the two flags Z_c (the plant's own model) and Z_a (its augmented model;
a detector with one model publishes Z_a = Z_c and says so with ``has_augmented =
False``), and the flags after randomized response, the only thing that leaves the plant.
Its streaming state round-trips through ``get_state`` / ``set_state`` as JSON, so the
runtime can restart it anywhere; randomness comes from a ``seed``.

What a sample may hold (docs/missing.md): NaN is a missing value, plant data that is
scored: the row is scored on its observed sensors, or it is *degraded* (no flag, no
published bit, ``degraded`` True). ``inf``, rows of the wrong width and anything but a
2-D batch are refused with :class:`~fedrca.exceptions.DataError` (:func:`check_samples`);
a detector used before ``fit`` raises :class:`~fedrca.exceptions.NotFittedError`.

:func:`fedrca.detectors.check_detector` runs the whole contract on a detector (the shared
suite every shipped detector passes, ``tests/detectors/test_contract.py``); docs/plugins.md
shows how to write one and run it in ``fedrca replay``.
"""

from __future__ import annotations

import copy
from abc import ABC, abstractmethod
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, fields
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from fedrca.exceptions import DataError

__all__ = ["DetectionResult", "Detector", "check_samples"]

FloatArray = NDArray[np.float64]
BoolArray = NDArray[np.bool_]
IntArray = NDArray[np.int64]


def check_samples(Y: ArrayLike, name: str, expect_dim: int | None = None) -> FloatArray:
    """``Y`` as a float64 batch (T, D), refused with :class:`~fedrca.exceptions.DataError` when it is not 2-D,
    has other than ``expect_dim`` columns (None: any) or holds ``inf`` (NaN is a missing value: kept).

    Examples
    --------
    >>> check_samples([[1.0, float("nan")]], "p").shape
    (1, 2)
    >>> check_samples([1.0, 2.0], "p")
    Traceback (most recent call last):
    ...
    fedrca.exceptions.DataError: plant 'p': samples must be 2-D (T, D), got shape (2,)
    """
    Y_arr = np.asarray(Y, dtype=np.float64)
    if Y_arr.ndim != 2:
        raise DataError(f"plant '{name}': samples must be 2-D (T, D), got shape {Y_arr.shape}")
    if expect_dim is not None and Y_arr.shape[1] != expect_dim:
        raise DataError(f"plant '{name}': samples have {Y_arr.shape[1]} values, expected {expect_dim}")
    if not np.isfinite(Y_arr).all() and np.isinf(Y_arr).any():  # one pass for complete data
        raise DataError(f"plant '{name}': samples contain inf (a value that is not usable is NaN: missing)")
    return Y_arr


@dataclass(frozen=True)
class DetectionResult:
    """Per-sample evidence of a detector for T samples (what :meth:`Detector.step_batch` returns).

    Attributes
    ----------
    x_c : (T, P) proprietary predicted states x_c(t) (P = 0 for a detector without states)
    x_a : (T, P) augmented predicted states x_a(t)
    r_c, r_a : (T, D) residuals y - h(x_c), y - h(x_a) (standardised units for
        identified models; NaN where a value is missing)
    d2_c, d2_a : (T,) float64 scores, high = anomalous: e.g. the Mahalanobis distances
        (smoothed when EWMA is on) of the residual method, the normalised family score
        ``max_k s_k / c_k`` of the family method
    zc, za : (T,) bool, score above the nominal threshold
    zc_pub, za_pub : (T,) bool, the flags after randomized response (what leaves the plant)
    stats_c, stats_a : (T, K) the normalised statistics behind each score (family method:
        one column per statistic, :attr:`PlantDetector.statistics
        <fedrca.detectors.plant.PlantDetector.statistics>`; residual method: the score
        itself); evidence that stays in the plant; (0, 0) when not given
    level, level_pub : (T,) int64, the severity level of the proprietary score
        (:func:`fedrca.detectors.plant.severity_levels`) and the level after its randomized
        response (what leaves the plant); -1 when the detector publishes no levels; (0,)
        when not given
    degraded : (T,) bool, rows with fewer usable sensors than the plant's minimum: not
        flagged (zc = za = False), published as degraded flags (no evidence); all False
        when not given
    """

    x_c: FloatArray
    x_a: FloatArray
    r_c: FloatArray
    r_a: FloatArray
    d2_c: FloatArray
    d2_a: FloatArray
    zc: BoolArray
    za: BoolArray
    zc_pub: BoolArray
    za_pub: BoolArray
    stats_c: FloatArray = field(default_factory=lambda: np.empty((0, 0)))
    stats_a: FloatArray = field(default_factory=lambda: np.empty((0, 0)))
    level: IntArray = field(default_factory=lambda: np.empty(0, dtype=np.int64))
    level_pub: IntArray = field(default_factory=lambda: np.empty(0, dtype=np.int64))
    degraded: BoolArray = field(default_factory=lambda: np.zeros(0, dtype=bool))

    def __post_init__(self) -> None:
        if len(self.degraded) != len(self.d2_c):
            object.__setattr__(self, "degraded", np.zeros(len(self.d2_c), dtype=bool))

    def __len__(self) -> int:
        return len(self.d2_c)

    @property
    def score(self) -> FloatArray:
        """Anomaly score (T,): the proprietary d2 (high means anomalous)."""
        return self.d2_c

    @classmethod
    def from_score(
        cls,
        score: ArrayLike,
        flags: ArrayLike,
        published: ArrayLike,
        residuals: ArrayLike | None = None,
        degraded: ArrayLike | None = None,
    ) -> DetectionResult:
        """The result of a detector with one model (``has_augmented = False``): Z_a = Z_c.

        ``score`` (T,), ``flags`` (T,) bool (the score above the threshold), ``published`` (T,)
        bool (the flags after randomized response), ``residuals`` (T, D) evidence that stays
        in the plant (None: (T, 0)), ``degraded`` (T,) bool (None: none). No states and no
        severity levels (``level = level_pub = -1``).

        Examples
        --------
        >>> import numpy as np
        >>> r = DetectionResult.from_score([0.5, 3.0], [False, True], [False, True])
        >>> len(r), r.za.tolist(), r.level_pub.tolist()
        (2, [False, True], [-1, -1])
        """
        d2 = np.asarray(score, dtype=np.float64)
        T = len(d2)
        zc = np.asarray(flags, dtype=bool)
        pub = np.asarray(published, dtype=bool)
        r = np.zeros((T, 0)) if residuals is None else np.asarray(residuals, dtype=np.float64)
        states = np.zeros((T, 0))
        none = np.full(T, -1, dtype=np.int64)
        return cls(
            states,
            states,
            r,
            r,
            d2,
            d2.copy(),
            zc,
            zc.copy(),
            pub,
            pub.copy(),
            d2[:, None],
            d2[:, None].copy(),
            none,
            none.copy(),
            np.zeros(T, dtype=bool) if degraded is None else np.asarray(degraded, dtype=bool),
        )

    @classmethod
    def concat(cls, parts: list[DetectionResult]) -> DetectionResult:
        """Concatenate results of consecutive chunks."""
        return cls(**{f.name: np.concatenate([getattr(p, f.name) for p in parts]) for f in fields(cls)})


class Detector(ABC):
    """Base contract every fedrca detector satisfies (:func:`fedrca.detectors.check_detector` checks it).

    ``fit`` on nominal data; ``step`` one sample / ``step_batch`` many, advancing the
    streaming state; ``score`` the anomaly score of samples without advancing it
    (high = anomalous). Hyper-parameters live under their own names, learned state
    in ``_private`` attributes, randomness comes from ``seed``. Every detector names
    its plant, the privacy budget of its published flags and the version of the
    parameters it runs (the streaming runtime records them in every flag).

    A subclass implements ``thresholds``, ``fit``, ``step_batch``, ``get_state``,
    ``set_state`` and ``reset``; ``step``, ``score`` and ``detached`` follow from them.
    ``get_state`` returns a JSON-friendly dict (lists and numbers, no arrays) holding
    everything the stream carries, the randomized response's generator included, so that a
    detector restored from it continues exactly as the original would have.
    """

    name: str
    epsilon: float
    parameter_version: str
    #: Whether Z_a comes from a second (augmented) model; False: Z_a is a copy of Z_c and the
    #: plant publishes one bit per row (the privacy accounting counts one).
    has_augmented: bool = True

    @property
    @abstractmethod
    def thresholds(self) -> tuple[float, float]:
        """The d2 thresholds of Z_c and Z_a (the same number twice for a detector without Z_a)."""

    @abstractmethod
    def fit(self, Y: ArrayLike, U: ArrayLike | None = None) -> Detector: ...

    @abstractmethod
    def step_batch(self, Y: ArrayLike, U: ArrayLike | None = None) -> DetectionResult: ...

    @abstractmethod
    def get_state(self) -> dict[str, Any]: ...

    @abstractmethod
    def set_state(self, state: dict[str, Any]) -> None: ...

    def step(self, y: ArrayLike, u: ArrayLike | None = None) -> DetectionResult:
        """Process one sample ``y`` (D,); returns a length-1 result."""
        y_row = np.asarray(y, dtype=np.float64).reshape(1, -1)
        u_row = None if u is None else np.asarray(u, dtype=np.float64).reshape(1, -1)
        return self.step_batch(y_row, u_row)

    def score(self, Y: ArrayLike, U: ArrayLike | None = None) -> FloatArray:
        """Anomaly scores (T,) of ``Y`` continuing from the current state, which is left unchanged."""
        with self.detached(reset=False):
            return self.step_batch(Y, U).score

    @contextmanager
    def detached(self, reset: bool = True) -> Iterator[Detector]:
        """Process samples without a trace: the streaming state is restored on exit.

        For scoring data outside the stream (the nominal data, to count its flag
        states or re-calibrate a scorer): inside the block the detector starts from
        its initial state (``reset=True``) or continues from the current one; on exit
        (also on an error) it is exactly as it was before, parameters included.
        """
        saved = self._checkpoint()
        try:
            if reset:
                self.reset()
            yield self
        finally:
            self._restore_checkpoint(saved)

    def _checkpoint(self) -> Any:
        """Everything :meth:`detached` restores: the streaming state (a detector whose parameters
        are not in its state adds them)."""
        return copy.deepcopy(self.get_state())

    def _restore_checkpoint(self, saved: Any) -> None:
        self.set_state(saved)

    @abstractmethod
    def reset(self) -> None:
        """Forget the stream (the learned parameters are kept)."""
