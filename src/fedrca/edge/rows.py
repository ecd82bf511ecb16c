"""The row assembler: tag updates in, rows on the plant's sample clock out (pure: no I/O, no clock).

Sample k of a plant is at time ``t_k = anchor + k * period`` and its row has ``seq = k``:
the sequence number is a function of the clock, so a restarted edge process that resumes
after the last ``seq`` it published neither repeats nor renumbers a row
(``tests/edge/test_rows.py::test_resume_*``).

Row k holds, for each column, the tag's value *as of* ``t_k``: the latest update whose
time is at or before ``t_k``, by the time the value holds from (the device's source
timestamp; one stamped later than it arrived counts from its arrival, so a server whose
clock runs ahead cannot push a value into an earlier row). Row k is closed when the clock
passes ``t_k + grace``: an update that arrives later for a closed row is *late* (counted; it
still holds for the rows after). Each column's value is then qualified:

==========  ===================================================================
``GOOD``    the value, as the device reported it good, heard of within ``staleness``
``BAD``     the device or protocol reported Bad (or the value had the wrong type)
``STALE``   no news of the tag (an update, or its connection vouching for it via
            :meth:`RowAssembler.alive`) within ``staleness`` of ``t_k``
``MISSING`` no value ever received for the tag
==========  ===================================================================

Memory per column is bounded whatever arrives: only the latest update of each sample
interval is kept (a flood of updates replaces one entry), and intervals older than the
next row's are dropped as rows close.

All times are in one time base (seconds); :mod:`fedrca.edge.runtime` maps wall-clock
time into it.

Examples
--------
>>> a = RowAssembler(2, period=1.0, staleness=5.0, grace=0.2)
>>> a.start(now=9.5)  # the rows missed since the last run (none: it is the first)
0
>>> a.update(0, 1.5, Quality.GOOD, source_ts=9.6, heard=9.7)
>>> a.update(1, None, Quality.BAD, source_ts=9.6, heard=9.7)
>>> [(r.seq, r.values.tolist(), r.quality.tolist()) for r in a.due(now=10.3)]
[(10, [1.5, nan], [0, 1])]
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from fedrca.edge.tags import Quality
from fedrca.exceptions import ConfigError

__all__ = ["Row", "RowAssembler"]

_GOOD, _BAD, _STALE, _MISSING = int(Quality.GOOD), int(Quality.BAD), int(Quality.STALE), int(Quality.MISSING)


@dataclass(frozen=True)
class Row:
    """One closed row of a plant.

    Attributes
    ----------
    seq : sample number (``(ts - anchor) / period``)
    ts : sample time, s (in the assembler's time base)
    values : (D,) float64, NaN where the quality is not good
    quality : (D,) uint8 :class:`~fedrca.edge.tags.Quality` codes
    """

    seq: int
    ts: float
    values: NDArray[np.float64]
    quality: NDArray[np.uint8]

    @property
    def usable(self) -> int:
        """Columns with a good value."""
        return int(np.count_nonzero(self.quality == _GOOD))


class RowAssembler:
    """Rows of one plant from its tags' updates (see the module docstring).

    Parameters
    ----------
    columns : D, the plant's sensor count
    period : sample interval, s (> 0)
    staleness : longest time without news before a value is stale, s (> 0)
    grace : how long after its sample time a row waits for late updates, s (>= 0)
    anchor : time of ``seq`` 0, s
    max_behind : most rows one :meth:`due` call closes; when the clock jumped further (the
        process was suspended), the oldest rows are skipped and counted in :attr:`skipped`
    """

    def __init__(
        self,
        columns: int,
        period: float,
        staleness: float,
        grace: float = 0.0,
        anchor: float = 0.0,
        max_behind: int = 100_000,
    ) -> None:
        if columns < 1:
            raise ConfigError(f"a plant has at least one column, got {columns}")
        for name, value, low in (("period", period, 0.0), ("staleness", staleness, 0.0)):
            if not (math.isfinite(value) and value > low):
                raise ConfigError(f"{name} must be a positive number of seconds, got {value}")
        if not (math.isfinite(grace) and grace >= 0):
            raise ConfigError(f"grace must be a non-negative number of seconds, got {grace}")
        if max_behind < 1:
            raise ConfigError(f"max_behind must be at least 1, got {max_behind}")
        self.columns = columns
        self.period = float(period)
        self.staleness = float(staleness)
        self.grace = float(grace)
        self.anchor = float(anchor)
        self.max_behind = int(max_behind)
        # per column: [bucket, time, value, quality] entries in time order, one per sample
        # interval (bucket k = the first sample at or after the entry's time)
        self._entries: list[list[list[float]]] = [[] for _ in range(columns)]
        self._heard = [-math.inf] * columns
        self._next: int | None = None
        #: updates that arrived for a row already closed (they hold for later rows)
        self.late = 0
        #: rows skipped because the clock jumped more than ``max_behind`` rows
        self.skipped = 0
        #: updates folded into a newer one of the same interval
        self.superseded = 0

    # -- the clock ---------------------------------------------------------------------------
    def seq_at(self, t: float) -> int:
        """The first sample at or after time ``t``.

        Examples
        --------
        >>> RowAssembler(1, period=2.0, staleness=1.0, anchor=10.0).seq_at(13.0)
        2
        >>> a = RowAssembler(1, period=0.1, staleness=1.0)
        >>> a.seq_at(a.time_of(3)), a.seq_at(a.time_of(3) + 1e-12)
        (3, 4)
        """
        # exact against time_of (tests/edge/test_rows.py::test_memory_is_bounded_and_rows_are_the_as_of_values):
        # the division's rounding may be one off either way
        k = math.ceil((t - self.anchor) / self.period)
        if self.time_of(k - 1) >= t:
            k -= 1
        elif self.time_of(k) < t:
            k += 1
        return k

    def time_of(self, seq: int) -> float:
        """Sample time of ``seq``."""
        return self.anchor + seq * self.period

    @property
    def next_seq(self) -> int | None:
        """The next row to close (None before :meth:`start`)."""
        return self._next

    def start(self, now: float, after: int | None = None) -> int:
        """Begin with the first sample after ``now - grace``, never at or before ``after``.

        ``after`` is the last ``seq`` already published (read back from the topic after a
        restart). Returns the rows between ``after`` and the first row this run closes:
        the gap of the restart (0 when nothing was missed or nothing was published before).
        """
        first = self.seq_at(now - self.grace)
        if after is None:
            self._next = first
            return 0
        self._next = max(first, after + 1)
        return self._next - (after + 1)

    # -- input -------------------------------------------------------------------------------
    def update(self, column: int, value: float | None, quality: int, source_ts: float, heard: float) -> None:
        """One update of ``column`` (value in the column's unit, quality code, times in s).

        ``heard`` is when it arrived; the value holds from ``min(source_ts, heard)``.
        A value of None, or one that is not a finite number, is MISSING unless the quality
        already says why it is unusable. :meth:`update_many` is the same for a batch.
        """
        if value is None or not math.isfinite(value):
            value = math.nan
            if quality == _GOOD:
                quality = _MISSING
        elif quality != _GOOD:
            value = math.nan
        t = source_ts if source_ts <= heard else heard
        if t != t:  # NaN source time: the arrival time
            t = heard
        bucket = self.seq_at(t)
        if heard > self._heard[column]:
            self._heard[column] = heard
        if self._next is not None and bucket < self._next:
            self.late += 1
            bucket = self._next - 1  # it holds from the last closed row on
        self._place(self._entries[column], bucket, t, value, quality)

    def update_many(
        self,
        columns: NDArray[np.intp],
        values: NDArray[np.float64],
        quality: NDArray[np.uint8],
        source_ts: NDArray[np.float64],
        heard: float,
    ) -> None:
        """A batch of updates that arrived together at ``heard``: the same as :meth:`update` on each
        in order (``tests/edge/test_rows.py::test_update_many_is_update_one_by_one``).

        Parameters
        ----------
        columns : (n,) int, the column of each update
        values : (n,) float64, in the columns' units (NaN: no value)
        quality : (n,) uint8 quality codes
        source_ts : (n,) float64, s: the time each value holds from (NaN: the arrival time)
        heard : arrival time of the batch, s
        """
        n = len(columns)
        if n == 0:
            return
        values = np.asarray(values, dtype=np.float64)
        quality = np.array(quality, dtype=np.uint8)
        # no finite value: MISSING unless the quality already says why; a value that is not good: NaN
        void = ~np.isfinite(values)
        quality[void & (quality == _GOOD)] = _MISSING
        values = np.where(void | (quality != _GOOD), np.nan, values)
        # t = min(source_ts, heard), NaN -> heard
        ts = np.asarray(source_ts, dtype=np.float64)
        t = np.where(ts <= heard, ts, heard)
        # bucket = seq_at(t), exact against time_of as seq_at: k = ceil((t - anchor) / period), then
        # one step down when t_(k-1) >= t, one up when t_k < t (the products in time_of's order)
        k = np.ceil((t - self.anchor) / self.period)
        k = np.where(self.anchor + (k - 1.0) * self.period >= t, k - 1.0, k)
        k = np.where(self.anchor + k * self.period < t, k + 1.0, k)
        buckets = k.astype(np.int64)
        if self._next is not None:
            late = buckets < self._next
            if late.any():
                self.late += int(late.sum())
                buckets[late] = self._next - 1  # they hold from the last closed row on
        heard_at = self._heard
        entries = self._entries
        place = self._place
        for c, bucket, tc, value, q in zip(
            columns.tolist(), buckets.tolist(), t.tolist(), values.tolist(), quality.tolist(), strict=True
        ):
            if heard > heard_at[c]:
                heard_at[c] = heard
            place(entries[c], bucket, tc, value, q)

    def _place(self, entries: list[list[float]], bucket: int, t: float, value: float, quality: int) -> None:
        """Keep the update in its column's ``entries`` (one per sample interval, the latest of each)."""
        if entries and entries[-1][0] >= bucket:
            last = entries[-1]
            if last[0] == bucket and last[1] <= t:
                last[1], last[2], last[3] = t, value, quality
                self.superseded += 1
                return
            # out of order: insert at its place (rare; a tag's updates come in time order)
            i = len(entries) - 1
            while i >= 0 and entries[i][1] > t:
                i -= 1
            if i >= 0 and entries[i][0] == bucket:
                entries[i][1:] = [t, value, quality]
                self.superseded += 1
            elif i + 1 < len(entries) and entries[i + 1][0] == bucket:
                self.superseded += 1  # a newer value of the same interval is already there
            else:
                entries.insert(i + 1, [bucket, t, value, quality])
            return
        entries.append([bucket, t, value, quality])

    def alive(self, columns: Iterable[int], heard: float) -> None:
        """The connection of ``columns`` vouches at ``heard`` that their last values still hold.

        A report-by-exception protocol (OPC UA subscriptions, Sparkplug) sends nothing while
        a value does not change; its keep-alives say the silence is not an outage.
        """
        for c in columns:
            if heard > self._heard[c]:
                self._heard[c] = heard

    # -- output ------------------------------------------------------------------------------
    def due(self, now: float) -> list[Row]:
        """Close every row whose sample time plus grace is at or before ``now``, in seq order."""
        if self._next is None:
            raise ConfigError("call start() before due()")
        # the last sample with time + grace <= now (exact against time_of, as seq_at)
        last = self.seq_at(now - self.grace)
        if self.time_of(last) + self.grace > now:
            last -= 1
        if last < self._next:
            return []
        if last - self._next + 1 > self.max_behind:
            jump = last - self.max_behind + 1 - self._next
            self.skipped += jump
            self._next += jump
        rows = [self._row(k) for k in range(self._next, last + 1)]
        self._next = last + 1
        return rows

    def _row(self, k: int) -> Row:
        t = self.time_of(k)
        fresh_after = t - self.staleness
        values = np.full(self.columns, np.nan)
        quality = np.full(self.columns, _MISSING, dtype=np.uint8)
        heard = self._heard
        for c, entries in enumerate(self._entries):
            # drop entries superseded at this sample (keep the latest at or before it)
            while len(entries) > 1 and entries[1][0] <= k:
                del entries[0]
            if not entries or entries[0][0] > k:
                continue  # never a value at or before this sample
            _, _, value, q = entries[0]
            if heard[c] < fresh_after:
                quality[c] = _STALE
            elif q == _GOOD:
                values[c] = value
                quality[c] = _GOOD
            else:
                quality[c] = q
        return Row(k, t, values, quality)
