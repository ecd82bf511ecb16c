"""Sensor events: the RCA side of a plant's sensor faults (published bits in, events out).

Every plant publishes with each flag one bit, "I have a sensor fault" (:mod:`fedrca.detectors.health`
decides it inside the plant; randomized response of budget epsilon makes it private). The RCA
never learns which tag. :class:`SensorEvents` turns each plant's stream of bits into episodes and
issues a *sensor event* when one begins (outcome ``sensor_fault``) and when it ends
(``sensor_recovered``): a verdict with ``root_cause`` null and the plant in ``sensor_plants``,
never a process root cause.

With epsilon infinite a bit is the plant's own decision: an episode begins at the first 1 and
ends at the first 0. With a finite epsilon a published bit is the truth with probability
``p = e^eps / (1 + e^eps)``, so one bit is evidence ``log(p / (1 - p)) = eps`` nats for or against
a fault: each plant runs a one-sided CUSUM of that evidence, ``S_t = max(0, S_{t-1} +- eps)``
(towards a fault while none is reported, towards recovery while one is), and switches when it
reaches :data:`SENSOR_LOG_ODDS`. A row without the plant (its flag late, withheld or absent)
is no evidence: the plant's state is held.

The same rows in give the same events out; the state survives a restart
(:meth:`SensorEvents.get_state`).

Examples
--------
>>> events = SensorEvents("tep", ["feed", "reactor"])
>>> [v.outcome for v in events.update(5, {"feed": 0, "reactor": 1}, ts=15.0)]
['sensor_fault']
>>> events.update(6, {"feed": 0, "reactor": 1}), events.active
([], ('reactor',))
>>> v = events.update(7, {"feed": 0, "reactor": 0})[0]
>>> v.outcome, v.sensor_plants, v.evidence_window, v.root_cause
('sensor_recovered', ('reactor',), (5, 7), None)
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from fedrca.contracts import SENSOR_FAULT, SENSOR_RECOVERED, Verdict
from fedrca.exceptions import DataError

__all__ = ["SENSOR_LOG_ODDS", "SensorEvents"]

#: Evidence (natural log-odds) at which a plant's sensor state switches under randomized response:
#: ln 10^4, about 5 consecutive agreeing bits at epsilon 2 and 10 at epsilon 1.
SENSOR_LOG_ODDS = math.log(1e4)


class SensorEvents:
    """Sensor episodes per plant from the published bits (see the module docstring).

    Parameters
    ----------
    site : the site named in the events
    plants : every plant that publishes flags
    epsilon : budget of each published sensor bit (the flags' ``privacy.flag_epsilon``; inf = exact bits)
    """

    def __init__(self, site: str, plants: Sequence[str], epsilon: float = math.inf) -> None:
        self.site = site
        self.plants = list(plants)
        self.epsilon = float(epsilon)
        self.reset()

    def reset(self) -> None:
        """Forget the stream: every plant healthy."""
        self._faulty = dict.fromkeys(self.plants, False)
        self._evidence = dict.fromkeys(self.plants, 0.0)
        self._start: dict[str, int] = {}  # plant -> first row of its current run of evidence / episode
        self._pending: dict[str, int] = {}  # plant -> row where its CUSUM last left zero

    @property
    def active(self) -> tuple[str, ...]:
        """Plants with a sensor fault now, in configuration order."""
        return tuple(p for p in self.plants if self._faulty[p])

    def _posterior(self, evidence: float) -> float:
        return 1.0 if math.isinf(self.epsilon) else 1.0 / (1.0 + math.exp(-min(evidence, 700.0)))

    def update(self, seq: int, bits: Mapping[str, int | bool], ts: float = 0.0) -> list[Verdict]:
        """One aligned row: the published sensor bits of the plants present; returns its events
        (plants in configuration order)."""
        # the common row: no bit set while every plant is healthy without evidence against it, which
        # changes nothing (tests/streams/test_sensor_faults.py::test_a_quiet_row_changes_nothing)
        if not any(bits.values()) and not any(self._faulty.values()) and not any(self._evidence.values()):
            return []
        return self._update(seq, bits, ts)

    def _update(self, seq: int, bits: Mapping[str, int | bool], ts: float) -> list[Verdict]:
        out = []
        for plant in self.plants:
            if plant not in bits:
                continue  # no evidence from this plant for this row
            bit = bool(bits[plant])
            faulty = self._faulty[plant]
            if math.isinf(self.epsilon):
                switch, evidence = bit != faulty, math.inf
                if switch and not faulty:
                    self._pending[plant] = seq
            else:
                # S_t = max(0, S_{t-1} + eps) for a bit against the current state, - eps for one with it
                step = self.epsilon if bit != faulty else -self.epsilon
                before = self._evidence[plant]
                evidence = max(0.0, before + step)
                if before == 0.0 and evidence > 0.0:
                    self._pending[plant] = seq
                switch = evidence >= SENSOR_LOG_ODDS
                self._evidence[plant] = 0.0 if switch else evidence
            if not switch:
                continue
            self._faulty[plant] = not faulty
            if not faulty:
                start = self._start[plant] = self._pending.get(plant, seq)
                outcome = SENSOR_FAULT
            else:
                start = self._start.pop(plant, seq)
                outcome = SENSOR_RECOVERED
            self._pending.pop(plant, None)
            posterior = self._posterior(evidence)
            out.append(Verdict(self.site, ts, seq, None, (), posterior, (start, seq), outcome, sensor_plants=(plant,)))
        return out

    def run(self, seqs: ArrayLike, bits: ArrayLike, ts: ArrayLike | None = None) -> list[Verdict]:
        """Every row of a batch: ``bits`` (T, M) published sensor bits of the plants in order (negative =
        the plant absent from that row); the events in row order."""
        seq_arr = np.asarray(seqs, dtype=np.int64)
        bit_arr = np.asarray(bits, dtype=np.int64)
        if bit_arr.ndim != 2 or bit_arr.shape != (len(seq_arr), len(self.plants)):
            raise DataError(f"sensor bits must be (T, {len(self.plants)}) for {len(seq_arr)} rows, got {bit_arr.shape}")
        times = np.zeros(len(seq_arr)) if ts is None else np.asarray(ts, dtype=np.float64)
        out: list[Verdict] = []
        if math.isinf(self.epsilon):
            # exact bits: only the rows where a present plant's bit differs from its held state can switch it
            present = bit_arr >= 0
            state = np.array([self._faulty[p] for p in self.plants], dtype=np.int64)
            index = np.where(present, np.arange(len(seq_arr))[:, None], -1)
            last = np.maximum.accumulate(index, axis=0)  # the row each plant last reported, up to t
            held = np.where(last >= 0, np.take_along_axis(np.maximum(bit_arr, 0), np.maximum(last, 0), axis=0), state)
            before = np.vstack([state[None, :], held[:-1]])
            rows = np.flatnonzero((present & (held != before)).any(axis=1)).tolist()
        else:
            rows = list(range(len(seq_arr)))
        for t in rows:
            row = bit_arr[t]
            present_bits = {p: int(row[m]) for m, p in enumerate(self.plants) if row[m] >= 0}
            out.extend(self.update(int(seq_arr[t]), present_bits, float(times[t])))
        return out

    def get_state(self) -> dict[str, Any]:
        """JSON-friendly state."""
        return {
            "faulty": [p for p in self.plants if self._faulty[p]],
            "evidence": {p: v for p, v in self._evidence.items() if v},
            "start": dict(self._start),
            "pending": dict(self._pending),
        }

    def set_state(self, state: Mapping[str, Any] | None) -> None:
        """Restore :meth:`get_state` output (None: a fresh stream, e.g. a state written before sensor events)."""
        self.reset()
        if not state:
            return
        for p in state.get("faulty", ()):
            if p in self._faulty:
                self._faulty[p] = True
        self._evidence.update({p: float(v) for p, v in state.get("evidence", {}).items() if p in self._evidence})
        self._start = {p: int(v) for p, v in state.get("start", {}).items()}
        self._pending = {p: int(v) for p, v in state.get("pending", {}).items()}
