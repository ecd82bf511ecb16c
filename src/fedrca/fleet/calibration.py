"""Each participant's own alarm threshold from its own nominal scores (pure core, no I/O).

A fleet shares one model, but its participants are not alike: a plant whose nominal
samples sit close to the shared patterns has low scores, one that sits further out
has high ones. One threshold pooled over everybody's scores is then too high for the
first (it alarms only far beyond its own nominal tail) and too low for the second.
Here every participant calibrates its own threshold, where its data are:

* **Cross-fitted scores.** The fleet's fold models (the same EM with a block of every
  participant held out) score each participant's held-out block. Participant i holds
  out its block ``(f + i) mod F`` in fold f (:func:`held_out_block`): the blocks are
  *staggered*, so a regime the participants share in time (a start-up, a shift
  pattern, a season) is never missing from every participant of a fold's training
  data at once. Held out from everybody together, such a regime scores as if the
  model had never seen it, and the threshold measures that instead of nominal
  variation (tests/fleet/test_calibration.py::
  test_staggered_blocks_keep_a_shared_regime_in_every_fold).
* **The statistic.** The anomaly score itself, or (``ewma`` = lambda) its
  exponentially weighted moving average ``s_t = lambda a_t + (1 - lambda) s_{t-1}``
  (:func:`ewma_scores`), which accumulates a small persistent excess of the score that
  a single sample does not show. Each held-out block is smoothed on its own, as a
  stream that starts at its first row.
* **The quantile.** The conformal ``percentile``: the k-th smallest of the n held-out
  statistics with k = ceil((n + 1) p / 100) (:func:`conformal_rank`). For a new
  nominal sample exchangeable with them, P(statistic > threshold) <= 1 - p / 100.
  It exists only when k <= n, i.e. n >= 100 / (100 - p) - 1 (199 scores at p = 99.5).

A participant with too few held-out scores to certify its percentile cannot calibrate
a tail of its own. It takes the threshold the fleet pools from exactly the
participants in that situation (their instantaneous scores' histograms, summed by
consensus like every other statistic: no score leaves anybody), at the conformal
percentile of the pooled count (``rule = "shared"``). With ``scope = "fleet"`` every
participant takes the one threshold pooled over the whole fleet (``rule = "fleet"``,
the CollabDict paper's single threshold).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
from numpy.typing import ArrayLike, NDArray

from fedrca.exceptions import ConfigError

__all__ = [
    "Calibration",
    "conformal_percentile",
    "conformal_rank",
    "ewma_scores",
    "held_out_block",
    "own_calibration",
]

FloatArray = NDArray[np.float64]
Rule = Literal["own", "shared", "fleet"]


def conformal_rank(n: int, percentile: float) -> int | None:
    """k = ceil((n + 1) p / 100), the rank of the conformal ``percentile`` among n scores; None when k > n.

    Examples
    --------
    >>> conformal_rank(199, 99.5), conformal_rank(198, 99.5), conformal_rank(960, 99.5)
    (199, None, 957)
    """
    # the 1e-9 keeps a product that is a whole number up to rounding (e.g. 200 x 0.995) on that number
    k = math.ceil((n + 1) * percentile / 100.0 - 1e-9)
    return k if 1 <= k <= n else None


def conformal_percentile(n: int, percentile: float) -> float:
    """The empirical percentile of n pooled scores that is their conformal ``percentile`` (100 when too few).

    ``100 k / n`` with k from :func:`conformal_rank`: the k-th smallest of n counted scores.
    """
    k = conformal_rank(n, percentile)
    return 100.0 if k is None else 100.0 * k / n


def held_out_block(n: int, folds: int, fold: int, index: int) -> NDArray[np.intp]:
    """Rows of its n samples participant ``index`` holds out in ``fold``: contiguous block (fold + index) mod folds.

    Examples
    --------
    >>> [held_out_block(10, 5, 0, i).tolist() for i in range(3)]
    [[0, 1], [2, 3], [4, 5]]
    """
    return np.array_split(np.arange(n), folds)[(fold + index) % folds]


def ewma_scores(scores: ArrayLike, lam: float, last: float | None = None) -> FloatArray:
    """EWMA of a score stream (T,): ``s_t = lam a_t + (1 - lam) s_{t-1}``.

    ``last`` is the statistic before the first sample (a stream that continues); None
    starts the stream at its first score (s_0 = a_0).

    Examples
    --------
    >>> ewma_scores([1.0, 3.0, 3.0], 0.5).tolist()
    [1.0, 2.0, 2.5]
    >>> ewma_scores([3.0], 0.5, last=2.0).tolist()
    [2.5]
    """
    a = np.asarray(scores, dtype=np.float64)
    if not 0.0 < lam <= 1.0:
        raise ConfigError(f"ewma must be in (0, 1], got {lam}")
    if a.size == 0:
        return a.copy()
    prev = float(a[0]) if last is None else float(last)
    # s_t - (1 - lam) s_{t-1} = lam a_t, with s_{-1} = prev carried in the filter's initial state
    from scipy.signal import lfilter  # at first use: a worker starts without it

    out, _ = lfilter([lam], [1.0, -(1.0 - lam)], a, zi=[(1.0 - lam) * prev])
    return np.asarray(out, dtype=np.float64)


@dataclass(frozen=True)
class Calibration:
    """A participant's alarm rule: alarm when its statistic exceeds ``threshold`` (immutable, validated).

    Attributes
    ----------
    threshold : on the statistic (score units)
    ewma : lambda of the smoothed score, or None (the score itself)
    rule : "own" (its own conformal percentile), "shared" (pooled with the participants that
        had too few scores for their own), "fleet" (one threshold pooled over the whole fleet)
    scores : held-out nominal scores the threshold was taken from (the pooled count when not "own")
    """

    threshold: float
    ewma: float | None
    rule: Rule
    scores: int

    def __post_init__(self) -> None:
        if not math.isfinite(self.threshold):
            raise ConfigError(f"calibration threshold must be finite, got {self.threshold}")
        if self.ewma is not None and not 0.0 < self.ewma <= 1.0:
            raise ConfigError(f"calibration ewma must be in (0, 1] or None, got {self.ewma}")
        if self.rule not in ("own", "shared", "fleet"):
            raise ConfigError(f"calibration rule must be 'own', 'shared' or 'fleet', got {self.rule!r}")
        if self.scores < 0:
            raise ConfigError(f"calibration scores must be >= 0, got {self.scores}")

    def to_dict(self) -> dict[str, float | int | str | None]:
        """JSON-friendly form; :meth:`from_dict` inverts it."""
        return {"threshold": self.threshold, "ewma": self.ewma, "rule": self.rule, "scores": self.scores}

    @classmethod
    def from_dict(cls, raw: dict[str, object]) -> Calibration:
        """Inverse of :meth:`to_dict`; ConfigError naming the key when a value is missing or of a wrong type."""
        try:
            ewma = raw["ewma"]
            return cls(
                threshold=float(raw["threshold"]),  # type: ignore[arg-type]
                ewma=None if ewma is None else float(ewma),  # type: ignore[arg-type]
                rule=str(raw["rule"]),  # type: ignore[arg-type]
                scores=int(raw["scores"]),  # type: ignore[call-overload]
            )
        except KeyError as exc:
            raise ConfigError(f"calibration lacks {exc}; write it with Calibration.to_dict") from None
        except (TypeError, ValueError) as exc:
            raise ConfigError(f"calibration has a value of the wrong type ({exc})") from None


def own_calibration(blocks: Sequence[ArrayLike], percentile: float, ewma: float | None) -> Calibration | None:
    """A participant's own threshold from its held-out score blocks (each a contiguous stretch of its rows).

    Each block is smoothed on its own (``ewma``), then the conformal ``percentile`` of all of them
    is taken; None when there are too few to certify it (:func:`conformal_rank`).

    Examples
    --------
    >>> import numpy as np
    >>> blocks = np.split(np.arange(400.0), 4)
    >>> own_calibration(blocks, 99.5, None).threshold, own_calibration(blocks[:1], 99.5, None)
    (398.0, None)
    """
    stats = [ewma_scores(b, ewma) if ewma is not None else np.asarray(b, dtype=np.float64) for b in blocks]
    values = np.concatenate(stats) if stats else np.empty(0)
    k = conformal_rank(len(values), percentile)
    if k is None:
        return None
    return Calibration(float(np.partition(values, k - 1)[k - 1]), ewma, "own", len(values))
