"""The engine's streaming state over a block of rows at once: CUSUMs, episodes, evidence windows.

:meth:`fedrca.rca.engine.RCAEngine.update_block` hands a block of T rows (the rows a
worker's batch completes) to these pure functions instead of stepping row by row. Each
one computes, for every row of the block, exactly what the per-row engine
(:meth:`~fedrca.rca.engine.RCAEngine.update`, the reference) holds after that row:

* :func:`cusum_block`: the per-plant CUSUM ``S_t = clip(S_{t-1} + llr_t, 0, 2 h)`` and
  the alarm state machine on it (alarming from ``S >= h`` until ``S`` returns to 0,
  the onset being where ``S`` last left 0). The recursion is sequential, so ``S`` is
  accumulated row by row in plain floats (the same IEEE additions and the same clip as
  numpy's, ``tests/rca/test_block.py``); everything derived from ``S`` is vectorised;
* :func:`episode_bounds`: the current alarm episode (its start: the earliest onset
  since some plant last started alarming while none was; its end: the row where no
  plant alarmed any more);
* :func:`window_counts`: per row, the counts of each plant's published states over
  its evidence window (the last ``horizon`` rows from the episode's bound on), as
  differences of cumulative counts: integers, exact, O(M) per row whatever the
  window's length.

The window's log evidence is a function of those counts
(``sum_o n[m, o] log P(o | component)``), so the engine computes it for all rows of a
block in one vectorised pass; ``tests/rca/test_engine.py`` checks the verdicts equal the
per-row engine's for random flag streams and every setting.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

__all__ = ["CusumBlock", "cusum_block", "episode_bounds", "state_counts", "window_counts"]

FloatArray = NDArray[np.float64]
IntArray = NDArray[np.int64]
BoolArray = NDArray[np.bool_]

#: The evidence window of a row before any episode: every row of the horizon (a seq no row has).
NO_BOUND = np.iinfo(np.int64).min


@dataclass(frozen=True)
class CusumBlock:
    """Per row of a block (T rows, C CUSUMs): the state after the row.

    Attributes
    ----------
    level : (T, C) the CUSUM S
    alarmed : (T, C) alarming after the row
    onset : (T, C) seq of the onset of the current alarm, -1 when not alarming
    rise : (C,) seq where S last left 0, after the block's last row
    """

    level: FloatArray
    alarmed: BoolArray
    onset: IntArray
    rise: IntArray


def cusum_block(
    level0: FloatArray,
    rise0: IntArray,
    alarmed0: BoolArray,
    onset0: IntArray,
    increments: FloatArray,
    seqs: IntArray,
    threshold: float,
    cap: float,
) -> CusumBlock:
    """C CUSUMs over T rows from the state ``(level0, rise0, alarmed0, onset0)`` (each (C,)).

    Parameters
    ----------
    increments : (T, C) log-likelihood ratio of each row (0 where there is no evidence)
    seqs : (T,) the rows' seqs, increasing
    threshold : h, the level from which a CUSUM is alarming
    cap : the CUSUM's upper clip (2 h)

    Examples
    --------
    >>> b = cusum_block(np.zeros(1), np.full(1, -1), np.zeros(1, bool), np.full(1, -1),
    ...                 np.array([[2.0], [2.0], [-1.0], [-5.0]]), np.arange(10, 14), 3.0, 6.0)
    >>> b.level[:, 0].tolist(), b.alarmed[:, 0].tolist(), b.onset[:, 0].tolist()
    ([2.0, 4.0, 3.0, 0.0], [False, True, True, False], [-1, 10, 10, -1])
    """
    T, C = increments.shape
    # S_t = clip(S_{t-1} + x_t, 0, cap), row by row: numpy's clip is max then min with
    # a > b ? a : b and a < b ? a : b, which the comprehension reproduces bit for bit
    rows: list[list[float]] = []
    s = level0.tolist()
    for x in increments.tolist():
        s = [(v if v < cap else cap) if (v := a + b) > 0.0 else 0.0 for a, b in zip(s, x, strict=True)]
        rows.append(s)
    level = np.array(rows, dtype=np.float64).reshape(T, C)
    before = np.vstack([level0[None, :], level[:-1]])
    t = np.arange(T)[:, None]
    # rise: the seq of the last row where S left 0 (rising: S_{t-1} <= 0 < S_t)
    rose = np.maximum.accumulate(np.where((before <= 0.0) & (level > 0.0), t, -1), axis=0)
    rise = np.where(rose >= 0, seqs[np.maximum(rose, 0)], rise0[None, :])
    # alarming from the first S >= h of a positive run until S returns to 0:
    # alarmed_t = S_t > 0 and (S reached h since S was last 0, or the run carries an alarm from before the block)
    zero = np.maximum.accumulate(np.where(level <= 0.0, t, -1), axis=0)
    hit = np.maximum.accumulate(np.where(level >= threshold, t, -1), axis=0)
    carried = (zero < 0) & alarmed0[None, :]
    alarmed = (level > 0.0) & ((hit > zero) | carried)
    # the onset is the rise at the alarm's start, which S > 0 keeps until it ends; a carried alarm keeps its own
    onset = np.where(alarmed, np.where(carried, onset0[None, :], rise), -1)
    return CusumBlock(level, alarmed, onset.astype(np.int64), (rise[-1] if T else rise0).astype(np.int64))


def episode_bounds(
    alarmed: BoolArray, onset: IntArray, seqs: IntArray, start0: int | None, end0: int | None
) -> tuple[IntArray, int | None, int | None]:
    """Per row, the lower seq bound of the evidence window; and the episode's (start, end) after the block.

    While some plant alarms, the episode's start is the earliest onset seen since it began;
    the row where none alarms any more ends it (its seq is the end). The window starts at the
    episode's start, else at the last episode's end, else nowhere (:data:`NO_BOUND`).

    Parameters
    ----------
    alarmed, onset : (T, M) the plants' alarm state after each row (:func:`cusum_block`)
    seqs : (T,) the rows' seqs
    start0, end0 : the episode's start and end before the block (None: none)
    """
    any_alarm: list[bool] = np.any(alarmed, axis=1).tolist()
    first = np.where(alarmed, onset, np.iinfo(np.int64).max).min(axis=1).tolist()
    bounds = []
    start, end = start0, end0
    for alarm, f, seq in zip(any_alarm, first, seqs.tolist(), strict=True):
        if alarm:
            start = f if start is None else min(start, f)
        elif start is not None:
            start, end = None, seq
        bounds.append(start if start is not None else end if end is not None else NO_BOUND)
    return np.array(bounds, dtype=np.int64), start, end


def state_counts(codes: IntArray) -> IntArray:
    """Counts (M, 4) of each plant's published states in rows ``codes`` (n, M); -1 (absent) counts nowhere.

    Examples
    --------
    >>> state_counts(np.array([[0, 3], [0, -1], [2, 3]])).tolist()
    [[2, 0, 1, 0], [0, 0, 0, 2]]
    """
    return np.asarray((codes[:, :, None] == np.arange(4)).sum(axis=0), dtype=np.int64)


def window_counts(
    past_seqs: IntArray,
    past_codes: IntArray,
    seqs: IntArray,
    codes: IntArray,
    bounds: IntArray,
    horizon: int,
) -> tuple[IntArray, IntArray, IntArray]:
    """Per row of a block, the state counts of its evidence window, the window's first seq and its rows.

    A row's window holds the last ``horizon`` rows up to and including it, from its
    ``bounds`` seq on (:func:`episode_bounds`).

    Parameters
    ----------
    past_seqs, past_codes : (P,), (P, M) the rows before the block that a window can reach (P < horizon)
    seqs, codes : (T,), (T, M) the block's rows
    bounds : (T,) each row's lower seq bound
    horizon : most rows in a window

    Returns
    -------
    counts : (T, M, 4) int
    first : (T,) seq of each window's first row
    rows : (T,) rows in each window
    """
    all_seqs = np.concatenate([past_seqs, seqs])
    all_codes = np.concatenate([past_codes, codes])
    P, T = len(past_seqs), len(seqs)
    M = all_codes.shape[1]
    # cumulative counts with a zero row in front: the rows [a, b) hold cum[b] - cum[a]
    cum = np.zeros((P + T + 1, M, 4), dtype=np.int64)
    np.cumsum(all_codes[:, :, None] == np.arange(4), axis=0, out=cum[1:])
    last = P + np.arange(T)
    lo = np.maximum(last - horizon + 1, np.searchsorted(all_seqs, bounds, side="left"))
    return cum[last + 1] - cum[lo], all_seqs[lo], last + 1 - lo
