"""The incident's memory: when each plant first alarmed, across the quiet rows between alarm episodes.

The engine's evidence window (``rca.horizon`` rows, cut at the current episode's start) and its
onsets (where a plant's CUSUM last left zero) describe the *current* episode. A disturbance that
enters a unit intermittently (a daily cycle, a sticking valve) alarms there in bursts: between
bursts its CUSUM returns to zero, its onset is forgotten, and when the units downstream later
alarm continuously the window shows them first. An **incident** spans the episodes of one
disturbance: it starts with the first alarm and ends when no plant has alarmed for
``rca.incident_gap`` rows. For every plant the memory keeps the row it first alarmed in the
incident and how many rows it has alarmed so far (O(M) state: it travels in the RCA worker's state
record); a plant that alarmed for fewer than ``rca.incident_rows`` rows and then stayed quiet for
``forget`` rows (the engine's horizon) is forgotten: a false alarm is not the start of an incident.

The engine uses it in two places: the onsets a verdict's reason reports (relative to the
incident's first alarm), and one piece of evidence (:meth:`IncidentMemory.penalty`): under "root k",
a plant j that first alarmed before k did, has alarmed for at least ``rca.incident_rows`` rows of
the incident and again for at least as many rows of the current episode (it is part of what is going
on now, not an earlier, finished event or one false alarm), and that k cannot reach in the graph,
contradicts the hypothesis (a downstream unit cannot be the root of what alarmed earlier
upstream), also in the rows where j is quiet. With the
complete graph every plant reaches every other and the penalty is zero
(``tests/rca/test_memory.py``).

Examples
--------
>>> import numpy as np
>>> memory = IncidentMemory(2, gap=5)
>>> for seq, on in enumerate([(1, 0), (0, 0), (1, 1), (0, 1)]):
...     memory.update(seq, np.array(on, dtype=bool), np.where(np.array(on, dtype=bool), seq, -1))
>>> memory.first.tolist(), memory.rows.tolist()
([0, 2], [2, 2])
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

__all__ = ["IncidentMemory", "MemoryRows", "penalty_rows", "started_rows"]

FloatArray = NDArray[np.float64]
IntArray = NDArray[np.int64]
BoolArray = NDArray[np.bool_]


class IncidentMemory:
    """Per plant, the first alarm row of the current incident and the rows it alarmed (see the module docstring).

    Parameters
    ----------
    n_plants : M
    gap : rows without any alarm that end an incident (>= 1)
    min_rows : rows of alarm that make a plant's part of the incident history
    forget : rows of quiet after which a plant with fewer than ``min_rows`` rows of alarm is forgotten

    Attributes
    ----------
    first : (M,) row each plant first alarmed in the incident (-1: not yet)
    rows : (M,) rows each plant has been alarming in the incident
    episode_rows : (M,) rows each plant has been alarming in the current episode (rows in which some
        plant alarms, without a break)
    """

    def __init__(self, n_plants: int, gap: int, min_rows: int = 1, forget: int | None = None) -> None:
        self.n_plants = int(n_plants)
        self.gap = int(gap)
        self.min_rows = int(min_rows)
        self.forget = self.gap if forget is None else int(forget)
        self.reset()

    def reset(self) -> None:
        """No incident."""
        M = self.n_plants
        self.first = np.full(M, -1, dtype=np.int64)
        self.rows = np.zeros(M, dtype=np.int64)
        self.episode_rows = np.zeros(M, dtype=np.int64)
        self.last = np.full(M, -1, dtype=np.int64)
        self.last_alarm: int | None = None

    @property
    def active(self) -> bool:
        """An incident is open."""
        return self.last_alarm is not None

    @property
    def start(self) -> int | None:
        """The incident's first alarm row (None: no incident)."""
        started = self.first[self.first >= 0]
        return int(started.min()) if started.size else None

    def update(self, seq: int, alarmed: BoolArray, onset: IntArray) -> None:
        """Add row ``seq`` given which plants alarm now and where their current alarm started (an episode
        ends at the first row no plant alarms)."""
        if self.last_alarm is None and not alarmed.any():
            return  # no incident, none starting: the common nominal row costs one test
        if alarmed.any():
            self.last_alarm = seq
            self.first = np.where(alarmed & (self.first < 0), onset, self.first)
            self.rows += alarmed
            self.episode_rows += alarmed
            self.last = np.where(alarmed, seq, self.last)
        else:
            self.episode_rows[:] = 0
            if self.last_alarm is not None and seq - self.last_alarm >= self.gap:
                self.reset()
                return
        # a short alarm long past (a false alarm) is not part of the incident
        stale = (self.rows < self.min_rows) & (self.first >= 0) & (self.last <= seq - self.forget)
        if stale.any():
            self.first[stale], self.rows[stale], self.last[stale] = -1, 0, -1

    def run(self, seqs: IntArray, alarmed: BoolArray, onset: IntArray) -> MemoryRows:
        """:meth:`update` over T rows (``seqs`` (T,), ``alarmed`` and ``onset`` (T, M)); the memory after each.

        The memory is a row-by-row state machine (its gap, its forgetting) over integers: it is
        stepped in plain Python ints, one list per attribute, which costs a fraction of
        :meth:`update`'s dozen numpy calls on arrays of M elements, and gives the same integers
        (``tests/rca/test_memory.py::test_run_equals_update_row_by_row``,
        ``tests/rca/test_block.py::test_blocks_equal_rows``).
        """
        T, M = alarmed.shape
        seq_list: list[int] = seqs.tolist()
        alarm_list: list[list[bool]] = alarmed.tolist()
        onset_list: list[list[int]] = onset.tolist()
        any_alarm: list[bool] = np.asarray(alarmed.any(axis=1)).tolist()
        first, rows, episode_rows, last = (
            self.first.tolist(), self.rows.tolist(), self.episode_rows.tolist(), self.last.tolist()
        )  # fmt: skip
        last_alarm = self.last_alarm
        gap, min_rows, forget = self.gap, self.min_rows, self.forget
        plants = range(M)
        out_first, out_rows, out_episode, active = [], [], [], []
        for t in range(T):
            seq = seq_list[t]
            if any_alarm[t]:
                last_alarm = seq
                on, at = alarm_list[t], onset_list[t]
                for m in plants:
                    if on[m]:
                        if first[m] < 0:
                            first[m] = at[m]
                        rows[m] += 1
                        episode_rows[m] += 1
                        last[m] = seq
            elif last_alarm is not None:
                episode_rows = [0] * M
                if seq - last_alarm >= gap:  # the incident is over
                    first, rows, episode_rows, last, last_alarm = [-1] * M, [0] * M, [0] * M, [-1] * M, None
            if last_alarm is not None:
                # a short alarm long past (a false alarm) is not part of the incident
                cut = seq - forget
                for m in plants:
                    if rows[m] < min_rows and first[m] >= 0 and last[m] <= cut:
                        first[m], rows[m], last[m] = -1, 0, -1
            out_first.append(first[:])
            out_rows.append(rows[:])
            out_episode.append(episode_rows[:])
            active.append(last_alarm is not None)
        self.first = np.array(first, dtype=np.int64)
        self.rows = np.array(rows, dtype=np.int64)
        self.episode_rows = np.array(episode_rows, dtype=np.int64)
        self.last = np.array(last, dtype=np.int64)
        self.last_alarm = last_alarm

        def table(values: list[list[int]]) -> IntArray:
            return np.array(values, dtype=np.int64).reshape(T, M)

        return MemoryRows(table(out_first), table(out_rows), table(out_episode), np.array(active, dtype=bool))

    def started(self, slack: int) -> BoolArray:
        """(M,) the plant that started the incident: it first alarmed more than ``slack`` rows before every
        other plant of the incident and has alarmed for at least ``min_rows`` rows (all False when none)."""
        return started_rows(self.first[None], self.rows[None], self.min_rows, slack)[0]

    def penalty(
        self,
        reach: BoolArray,
        slack: int,
        log_violation: float,
        covered: BoolArray,
    ) -> FloatArray:
        """Log evidence (M,) of the root hypotheses from the incident's order.

        ``[k]`` sums ``log_violation`` over the plants j that k cannot reach (``reach[k, j]`` false),
        that first alarmed more than ``slack`` rows before k (or at all, while k has not alarmed in
        the incident), that have alarmed for at least ``min_rows`` rows of the current episode, and
        whose order the window's evidence does not already count (``covered[k, j]``: j alarms now and
        started before k in the current episode).
        """
        return penalty_rows(
            self.first[None], self.episode_rows[None], self.min_rows, reach, slack, log_violation, covered[None]
        )[0]

    def get_state(self) -> dict[str, Any]:
        """JSON-friendly state."""
        return {
            "first": self.first.tolist(),
            "rows": self.rows.tolist(),
            "episode_rows": self.episode_rows.tolist(),
            "last": self.last.tolist(),
            "last_alarm": self.last_alarm,
        }

    def set_state(self, state: dict[str, Any] | None) -> None:
        """Restore :meth:`get_state` output (None: no incident, e.g. a state written before the memory existed)."""
        self.reset()
        if not state:
            return
        M = self.n_plants
        self.first = np.asarray(state["first"], dtype=np.int64).reshape(M)
        self.rows = np.asarray(state["rows"], dtype=np.int64).reshape(M)
        self.episode_rows = np.asarray(state["episode_rows"], dtype=np.int64).reshape(M)
        self.last = np.asarray(state["last"], dtype=np.int64).reshape(M)
        self.last_alarm = None if state["last_alarm"] is None else int(state["last_alarm"])


@dataclass(frozen=True)
class MemoryRows:
    """The memory after each row of a block (:meth:`IncidentMemory.run`).

    Attributes
    ----------
    first, rows, episode_rows : (T, M) as :class:`IncidentMemory`'s attributes after the row
    active : (T,) an incident is open after the row
    """

    first: IntArray
    rows: IntArray
    episode_rows: IntArray
    active: BoolArray


def started_rows(first: IntArray, rows: IntArray, min_rows: int, slack: int) -> BoolArray:
    """:meth:`IncidentMemory.started` of T memories at once (``first``, ``rows`` (T, M)) -> (T, M).

    Examples
    --------
    >>> started_rows(np.array([[3, 9], [3, 4], [-1, -1]]), np.array([[5, 1], [5, 1], [0, 0]]), 2, 2).tolist()
    [[True, False], [False, False], [False, False]]
    """
    T, M = first.shape
    began = first >= 0
    at = np.where(began, first.astype(np.float64), np.inf)
    # the earliest (the lowest index among ties), and the earliest of the others
    k = np.argmin(at, axis=1)
    t = np.arange(T)
    others = np.where(np.arange(M)[None, :] == k[:, None], np.inf, at).min(axis=1)
    ok = began.any(axis=1) & (rows[t, k] >= min_rows) & (others > at[t, k] + slack)
    out = np.zeros((T, M), dtype=bool)
    out[t, k] = ok
    return out


def penalty_rows(
    first: IntArray,
    episode_rows: IntArray,
    min_rows: int,
    reach: BoolArray,
    slack: int,
    log_violation: float,
    covered: BoolArray,
) -> FloatArray:
    """:meth:`IncidentMemory.penalty` of T memories at once (``first``, ``episode_rows`` (T, M); ``covered``
    (T, M, M)) -> (T, M): a count of violations times ``log_violation``, the same float whatever T."""
    M = first.shape[1]
    began = first >= 0
    at = np.where(began, first.astype(np.float64), np.inf)
    # earlier[t, k, j] = j first alarmed more than slack rows before k
    earlier = began[:, None, :] & (at[:, None, :] < at[:, :, None] - slack)
    present = episode_rows >= min_rows
    early = earlier & present[:, None, :] & ~reach[None] & ~covered
    diagonal = np.arange(M)
    early[:, diagonal, diagonal] = False
    return np.asarray(early.sum(axis=2) * log_violation, dtype=np.float64)
