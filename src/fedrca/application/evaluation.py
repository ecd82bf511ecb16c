"""Scoring one pipeline run against known fault events (used by ``fedrca evaluate`` and the benchmarks).

Detection metrics are computed for three alarm series, side by side:

* ``proprietary``: any plant's proprietary flag Z_c is on (the detector a plant
  has without federated learning — the "proprietary-only" baseline);
* ``augmented``: any plant's augmented flag Z_a is on;
* ``rca``: a verdict naming a root cause is standing (see
  :func:`fedrca.rca.metrics.diagnosis_timeline`).

Detector series use the plants' own flags (before randomized response) — they
measure the detectors; the RCA sees only published flags.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from fedrca.application.site import PipelineRun
from fedrca.rca.metrics import DetectionScores, FaultEvent, RCAScores, detection_scores, diagnosis_timeline, rca_scores

__all__ = ["Evaluation", "evaluate_run", "json_safe"]


@dataclass(frozen=True)
class Evaluation:
    """Detection scores per alarm series, RCA scores and after-onset verdict counts."""

    detection: dict[str, DetectionScores]
    rca: RCAScores
    after_onset: dict[str, Any]
    grace: int

    def detection_rows(self) -> list[dict[str, Any]]:
        """One row per alarm series (for tables)."""
        return [
            {
                "alarm series": name,
                "ARL0": s.arl0,
                "ARL1": s.arl1,
                "FDR": s.fdr,
                "FAR": s.far,
                "events detected": s.detected,
            }
            for name, s in self.detection.items()
        ]

    def rca_rows(self) -> list[dict[str, Any]]:
        """The RCA metrics as a one-row table."""
        r = self.rca
        row: dict[str, Any] = {
            "events": r.n_events,
            "root verdicts": r.n_root_verdicts,
            "precision": r.precision,
            "recall": r.recall,
            "F1": r.f1,
            "accuracy": r.accuracy,
            "RCA delay": r.delay,
        }
        if self.after_onset:
            row["after onset: correct / verdicts"] = f"{self.after_onset['correct']} / {self.after_onset['verdicts']}"
            row["majority root after onset"] = self.after_onset["majority"] or "-"
        return [row]

    def as_dict(self) -> dict[str, Any]:
        """JSON-friendly (nan -> null, inf -> "inf")."""
        return json_safe(
            {
                "detection": {k: v.as_dict() for k, v in self.detection.items()},
                "rca": self.rca.as_dict(with_events=self.rca.n_events <= 50),
                "after_onset": self.after_onset,
                "grace": self.grace,
            }
        )


def json_safe(value: Any) -> Any:
    """Replace nan by None and +-inf by "inf"/"-inf", recursively; numpy scalars to Python."""
    if isinstance(value, dict):
        return {k: json_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [json_safe(v) for v in value]
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float):
        if math.isnan(value):
            return None
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
    return value


def evaluate_run(run: PipelineRun, events: Sequence[FaultEvent], grace: int | None = None) -> Evaluation:
    """Score a run. ``grace`` (default: the engine's horizon) extends each event's attribution window."""
    plants = run.plants
    T = run.n_samples
    g = run.site.engine.horizon if grace is None else int(grace)
    flags = run.true_flags()
    # the process verdicts: a sensor event (a broken tag) names no root and changes no diagnosis
    verdicts = [v for v in run.verdicts if not v.is_sensor_event]
    seqs = [v.seq for v in verdicts]
    timeline = diagnosis_timeline(seqs, [v.root_cause for v in verdicts], [v.outcome for v in verdicts], plants, T)
    series = {
        "proprietary (Z_c)": flags[:, :, 0].any(axis=1),
        "augmented (Z_a)": flags[:, :, 1].any(axis=1),
        "RCA (root named)": timeline >= 0,
    }
    detection = {name: detection_scores(a, events, g) for name, a in series.items()}
    scores = rca_scores(seqs, [v.root_cause for v in verdicts], events, T, plants, g)
    after: dict[str, Any] = {}
    if len(events) == 1:
        ev = events[0]
        late = [v for v in verdicts if v.seq >= ev.start]
        named = [v.root_cause for v in late if v.root_cause is not None]
        correct = sum(1 for v in late if v.root_cause == ev.root)
        counts = {p: named.count(p) for p in sorted(set(named))}
        majority = max(counts, key=lambda p: counts[p]) if counts else None
        first = next((v.seq for v in late if v.root_cause == ev.root), None)
        after = {
            "verdicts": len(late),
            "correct": correct,
            "share_correct": correct / len(late) if late else float("nan"),
            "named": counts,
            "majority": majority,
            "first_correct_seq": first,
            "rca_delay": None if first is None else first - ev.start,
        }
    return Evaluation(detection, scores, after, g)
