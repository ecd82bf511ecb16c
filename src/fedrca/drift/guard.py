"""Which history rows a refresh may read, and when it must not happen at all (pure functions).

A re-baseline must learn the plant's drift, never its faults. Two guards, both from the
plant's own alarm states (its true flags ``Z_c or Z_a``, before randomized response):

* **rows**: a refresh reads only rows without an alarm that are more than ``guard`` rows
  away from every alarm (:func:`usable_rows`). The band keeps out the start of a fault
  before its first alarm and its tail after the last;
* **now**: a refresh is refused while the plant alarms (:func:`ongoing_alarm`): more alarms
  in the last ``recent`` rows than the plant's nominal false-alarm rate explains at
  ``confidence`` (a binomial tail). A fault that alarms keeps its baseline from moving; an
  isolated false alarm does not.

Examples
--------
>>> import numpy as np
>>> alarm = np.zeros(12, dtype=bool); alarm[5] = True
>>> usable_rows(alarm, 2).astype(int).tolist()
[1, 1, 1, 0, 0, 0, 0, 0, 1, 1, 1, 1]
>>> ongoing_alarm(alarm, recent=12, rate=0.003)
False
>>> alarm[-4:] = True
>>> ongoing_alarm(alarm, recent=12, rate=0.003)
True
"""

from __future__ import annotations

import functools

import numpy as np
from numpy.typing import NDArray

__all__ = ["alarm_limit", "ongoing_alarm", "usable_rows"]

BoolArray = NDArray[np.bool_]

#: Confidence of the "alarming now" test: the nominal rate explains the count with this probability.
ONGOING_CONFIDENCE = 0.999


def usable_rows(alarm: BoolArray, guard: int, valid: BoolArray | None = None) -> BoolArray:
    """Rows (T,) a refresh may read: no alarm within ``guard`` rows on either side (nor on the row).

    ``valid`` (T,) marks the rows that exist (a gap in the history is no row); a gap breaks
    nothing here, the refresh treats each contiguous run as its own stream.
    """
    alarm = np.asarray(alarm, dtype=bool)
    if guard > 0 and alarm.any():
        # the alarms dilated by guard rows on either side
        from scipy.ndimage import binary_dilation  # at first use (a refresh): a worker starts without it

        band = binary_dilation(alarm, structure=np.ones(2 * guard + 1, dtype=bool))
    else:
        band = alarm
    usable = ~band
    return usable if valid is None else usable & np.asarray(valid, dtype=bool)


def alarm_limit(recent: int, rate: float, confidence: float = ONGOING_CONFIDENCE) -> int:
    """Most alarms ``recent`` nominal rows hold at ``confidence`` when each alarms with probability ``rate``.

    Examples
    --------
    >>> alarm_limit(60, 0.003), alarm_limit(60, 0.05)
    (2, 9)
    """
    return _binomial_quantile(int(recent), min(max(float(rate), 0.0), 1.0), float(confidence))


@functools.lru_cache(maxsize=256)
def _binomial_quantile(recent: int, rate: float, confidence: float) -> int:
    """The binomial (recent, rate) quantile at confidence: a plant asks it with the same three numbers at
    every refresh, and scipy's ppf is slow next to the refresh's own maths."""
    from scipy.stats import binom  # at first use (a refresh): a worker starts without it

    return int(binom.ppf(confidence, recent, rate))


def ongoing_alarm(alarm: BoolArray, recent: int, rate: float, confidence: float = ONGOING_CONFIDENCE) -> bool:
    """Whether the plant alarms now: its last ``recent`` rows hold more alarms than :func:`alarm_limit` allows."""
    tail = np.asarray(alarm, dtype=bool)[-recent:]
    return int(np.count_nonzero(tail)) > alarm_limit(len(tail), rate, confidence)
