"""Evaluation metrics of detection and root cause analysis (all vectorised).

Conventions: samples are 0-based rows; a fault **event** is active on
``start <= t < end`` with one root plant. Because alarms and verdicts lag the
evidence (filters, smoothing, the RCA horizon), an event's **attribution
window** extends ``grace`` samples past its end (never into the next event).
Samples outside every attribution window are **in control**.

Detection (alarm series ``a(t)``, e.g. "any plant's Z_c is on")
---------------------------------------------------------------
* **ARL0** — average run length under nominal operation: the mean number of
  in-control samples from a (re)start to the first false alarm. Estimated as
  ``(in-control samples) / (false-alarm onsets)`` with an onset = a rising edge
  of ``a`` on an in-control sample (the renewal estimate; after an alarm is
  acknowledged the count restarts). ``inf`` when no false alarm occurred (the
  run is then censored at the number of in-control samples).
* **ARL1** — average run length under a fault: the mean over detected events
  of ``t_first_alarm - start + 1`` (1 = alarm on the first faulty sample),
  counting alarms in the attribution window only; missed events are excluded
  (see the detection rate).
* **FDR** — fault detection rate: fraction of faulty samples (``start <= t < end``) with an alarm.
* **FAR** — false-alarm rate: fraction of in-control samples with an alarm.

Root cause analysis (verdicts: seq + named root, or none)
---------------------------------------------------------
* a verdict naming a root is **correct** when it is issued inside an event's
  attribution window and names that event's root;
* **precision** — correct root verdicts / all root verdicts (verdicts outside
  every window or naming the wrong plant count against it);
* **recall** — events with at least one correct verdict / all events;
* **F1** — ``2 P R / (P + R)``;
* **accuracy** — events whose most frequent named root in the window (ties to
  the earliest issued) is the true root / all events (an event without any root
  verdict counts as wrong);
* **RCA delay** — per event ``seq of the first correct verdict - start``;
  averaged over the events that got one.

Examples
--------
>>> import numpy as np
>>> alarms = np.zeros(100, bool); alarms[[10, 11, 50]] = True; alarms[80:90] = True
>>> events = [FaultEvent(78, 90, "p1")]
>>> round(arl0(alarms, in_control_mask(100, events, grace=5)), 1)
41.5
>>> arl1(alarms, events, grace=5)
3.0
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from fedrca.exceptions import DataError

__all__ = [
    "DetectionScores",
    "FaultEvent",
    "RCAScores",
    "alarm_onsets",
    "arl0",
    "arl1",
    "attribution_windows",
    "detection_rate",
    "detection_scores",
    "diagnosis_timeline",
    "false_alarm_rate",
    "in_control_mask",
    "rca_scores",
    "run_lengths",
]

BoolArray = NDArray[np.bool_]
FloatArray = NDArray[np.float64]


@dataclass(frozen=True)
class FaultEvent:
    """A fault active on samples ``start <= t < end`` whose root cause is plant ``root``."""

    start: int
    end: int
    root: str


def _sorted_events(events: Sequence[FaultEvent]) -> list[FaultEvent]:
    ordered = sorted(events, key=lambda e: e.start)
    for a, b in itertools.pairwise(ordered):
        if b.start < a.end:
            raise DataError(f"fault events overlap: [{a.start}, {a.end}) and [{b.start}, {b.end})")
    for e in ordered:
        if e.end <= e.start:
            raise DataError(f"fault event must have end > start, got [{e.start}, {e.end})")
    return ordered


def attribution_windows(n_samples: int, events: Sequence[FaultEvent], grace: int) -> tuple[NDArray[np.int64], ...]:
    """(starts, ends) of the attribution windows ``[start, min(end + grace, next start, n))``."""
    ordered = _sorted_events(events)
    starts = np.array([e.start for e in ordered], dtype=np.int64)
    ends = np.array([e.end for e in ordered], dtype=np.int64) + int(grace)
    if len(starts):
        nxt = np.append(starts[1:], n_samples)
        ends = np.minimum(np.minimum(ends, nxt), n_samples)
    return starts, ends


def in_control_mask(n_samples: int, events: Sequence[FaultEvent], grace: int = 0) -> BoolArray:
    """(T,) True outside every attribution window."""
    starts, ends = attribution_windows(n_samples, events, grace)
    # +1 at window starts, -1 at window ends; a positive running sum = inside a window
    delta = np.zeros(n_samples + 1, dtype=np.int64)
    np.add.at(delta, np.minimum(starts, n_samples), 1)
    np.add.at(delta, ends, -1)
    return np.asarray(np.cumsum(delta)[:n_samples] == 0)


def faulty_mask(n_samples: int, events: Sequence[FaultEvent]) -> BoolArray:
    """(T,) True on samples where a fault is active."""
    return ~in_control_mask(n_samples, events, grace=0)


def alarm_onsets(alarms: ArrayLike) -> NDArray[np.int64]:
    """Indices where an alarm run starts (rising edges; sample 0 counts when on).

    Examples
    --------
    >>> alarm_onsets([0, 1, 1, 0, 1]).tolist()
    [1, 4]
    """
    a = np.asarray(alarms, dtype=bool)
    rising = a & ~np.concatenate([[False], a[:-1]])
    return np.flatnonzero(rising)


def arl0(alarms: ArrayLike, in_control: ArrayLike | None = None) -> float:
    """ARL0: in-control samples per false-alarm onset (inf when there is none)."""
    a = np.asarray(alarms, dtype=bool)
    mask = np.ones(len(a), dtype=bool) if in_control is None else np.asarray(in_control, dtype=bool)
    if mask.shape != a.shape:
        raise DataError(f"in-control mask has shape {mask.shape}, alarms {a.shape}")
    onsets = alarm_onsets(a)
    false_onsets = int(mask[onsets].sum())
    n = int(mask.sum())
    return float("inf") if false_onsets == 0 else n / false_onsets


def run_lengths(alarms: ArrayLike, events: Sequence[FaultEvent], grace: int = 0) -> FloatArray:
    """Per event (in start order) ``t_first_alarm - start + 1`` within its attribution window; nan when missed."""
    a = np.asarray(alarms, dtype=bool)
    starts, ends = attribution_windows(len(a), events, grace)
    hits = np.flatnonzero(a)
    if len(hits) == 0:
        return np.full(len(starts), np.nan)
    # first alarm at or after each start
    pos = np.searchsorted(hits, starts)
    first = hits[np.minimum(pos, len(hits) - 1)]
    ok = (pos < len(hits)) & (first < ends)
    return np.where(ok, first - starts + 1, np.nan).astype(np.float64)


def arl1(alarms: ArrayLike, events: Sequence[FaultEvent], grace: int = 0) -> float:
    """ARL1: mean run length to the first alarm over detected events (nan if none detected)."""
    rl = run_lengths(alarms, events, grace)
    return float(np.nanmean(rl)) if np.any(np.isfinite(rl)) else float("nan")


def detection_rate(alarms: ArrayLike, events: Sequence[FaultEvent]) -> float:
    """FDR: fraction of faulty samples with an alarm (nan without faulty samples)."""
    a = np.asarray(alarms, dtype=bool)
    faulty = faulty_mask(len(a), events)
    return float(a[faulty].mean()) if faulty.any() else float("nan")


def false_alarm_rate(alarms: ArrayLike, events: Sequence[FaultEvent], grace: int = 0) -> float:
    """FAR: fraction of in-control samples with an alarm (nan without in-control samples)."""
    a = np.asarray(alarms, dtype=bool)
    mask = in_control_mask(len(a), events, grace)
    return float(a[mask].mean()) if mask.any() else float("nan")


@dataclass(frozen=True)
class DetectionScores:
    """ARL0, ARL1, FDR, FAR and the share of events detected, of one alarm series."""

    arl0: float
    arl1: float
    fdr: float
    far: float
    detected: float
    in_control: int

    def as_dict(self) -> dict[str, float]:
        """Plain dict."""
        return {k: float(v) for k, v in asdict(self).items()}


def detection_scores(alarms: ArrayLike, events: Sequence[FaultEvent], grace: int = 0) -> DetectionScores:
    """All detection metrics of an alarm series (T,)."""
    a = np.asarray(alarms, dtype=bool)
    mask = in_control_mask(len(a), events, grace)
    rl = run_lengths(a, events, grace)
    return DetectionScores(
        arl0=arl0(a, mask),
        arl1=arl1(a, events, grace),
        fdr=detection_rate(a, events),
        far=float(a[mask].mean()) if mask.any() else float("nan"),
        detected=float(np.isfinite(rl).mean()) if len(rl) else float("nan"),
        in_control=int(mask.sum()),
    )


def diagnosis_timeline(
    seqs: ArrayLike, roots: Sequence[str | None], outcomes: Sequence[str], plants: Sequence[str], n_samples: int
) -> NDArray[np.int64]:
    """The standing diagnosis per sample from a verdict stream (T,).

    Each verdict holds until the next one: plant index when it names a root, -1
    for "no anomaly", -2 for other anomaly outcomes; -1 before the first verdict.
    """
    seq_arr = np.asarray(seqs, dtype=np.int64)
    code = np.array(
        [plants.index(r) if r is not None else (-1 if o == "no_anomaly" else -2) for r, o in zip(roots, outcomes)],
        dtype=np.int64,
    )
    out = np.full(n_samples, -1, dtype=np.int64)
    if len(seq_arr) == 0:
        return out
    # the latest verdict at or before each sample
    idx = np.searchsorted(seq_arr, np.arange(n_samples), side="right") - 1
    return np.where(idx >= 0, code[np.maximum(idx, 0)], -1)


@dataclass(frozen=True)
class RCAScores:
    """RCA metrics over a set of events (see the module docstring)."""

    precision: float
    recall: float
    f1: float
    accuracy: float
    delay: float
    n_events: int
    n_root_verdicts: int
    n_correct: int
    per_event: list[dict[str, Any]] = field(default_factory=list, compare=False)

    def as_dict(self, with_events: bool = False) -> dict[str, Any]:
        """Plain dict (per-event details optional)."""
        out = {k: v for k, v in asdict(self).items() if k != "per_event"}
        if with_events:
            out["per_event"] = self.per_event
        return out


def rca_scores(
    seqs: ArrayLike,
    roots: Sequence[str | None],
    events: Sequence[FaultEvent],
    n_samples: int,
    plants: Sequence[str],
    grace: int = 0,
) -> RCAScores:
    """Precision, recall, F1, accuracy and delay of root verdicts against fault events.

    Parameters
    ----------
    seqs : (V,) seq of each verdict (increasing)
    roots : (V,) named root (None for verdicts without a root; they are ignored)
    events : the fault events (non-overlapping)
    n_samples : rows of the recording
    plants : plant names (index space of the roots)
    grace : samples the attribution window extends past each event's end

    Examples
    --------
    >>> s = rca_scores([12, 15, 40, 70], ["a", "a", "b", "a"], [FaultEvent(10, 20, "a"), FaultEvent(60, 65, "b")],
    ...                100, ["a", "b"], grace=10)
    >>> s.precision, s.recall, s.accuracy, s.delay
    (0.5, 0.5, 0.5, 2.0)
    """
    ordered = _sorted_events(events)
    starts, ends = attribution_windows(n_samples, ordered, grace)
    names = list(plants)
    truth = np.array([names.index(e.root) for e in ordered], dtype=np.int64)
    seq_arr = np.asarray(seqs, dtype=np.int64)
    has_root = np.array([r is not None for r in roots], dtype=bool)
    seq_arr = seq_arr[has_root]
    named = np.array([names.index(r) for r in roots if r is not None], dtype=np.int64)
    E, M = len(ordered), len(names)
    idx = np.searchsorted(starts, seq_arr, side="right") - 1
    inside = (idx >= 0) & (seq_arr < ends[np.maximum(idx, 0)]) if E else np.zeros(len(seq_arr), dtype=bool)
    correct = inside & (named == truth[np.maximum(idx, 0)]) if E else inside
    n_root = len(seq_arr)
    precision = float(correct.sum() / n_root) if n_root else float("nan")
    hit_events = np.bincount(idx[correct], minlength=E)[:E] > 0 if E else np.zeros(0, dtype=bool)
    recall = float(hit_events.mean()) if E else float("nan")
    f1 = 2 * precision * recall / (precision + recall) if n_root and E and precision + recall > 0 else 0.0
    # majority root per event (ties -> the root named first)
    counts = np.zeros((E, M), dtype=np.float64)
    first = np.full((E, M), np.inf)
    np.add.at(counts, (idx[inside], named[inside]), 1.0)
    np.minimum.at(first, (idx[inside], named[inside]), seq_arr[inside].astype(np.float64))
    score = np.where(counts > 0, counts - first / (n_samples + 1.0), -np.inf)
    majority = np.argmax(score, axis=1) if E else np.zeros(0, dtype=np.int64)
    answered = counts.sum(axis=1) > 0
    accurate = answered & (majority == truth)
    accuracy = float(accurate.mean()) if E else float("nan")
    first_correct = np.full(E, np.inf)
    np.minimum.at(first_correct, idx[correct], seq_arr[correct].astype(np.float64))
    delays = first_correct - starts
    delay = float(np.mean(delays[np.isfinite(delays)])) if np.isfinite(delays).any() else float("nan")
    per_event = [
        {
            "start": int(e.start),
            "end": int(e.end),
            "root": e.root,
            "verdicts": int(counts[i].sum()),
            "majority": names[int(majority[i])] if answered[i] else None,
            "correct": bool(accurate[i]),
            "delay": float(delays[i]) if np.isfinite(delays[i]) else None,
        }
        for i, e in enumerate(ordered)
    ]
    return RCAScores(precision, recall, f1, accuracy, delay, E, n_root, int(correct.sum()), per_event)
