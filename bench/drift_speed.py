"""How fast nominal drift moves a plant's means, as the explaining refresh measures it (``drift.explain_shift``).

The explaining refresh (docs/drift.md, guard 5) takes the means of a plant's last ``min_rows`` rows while it
alarms only when they moved no further from where the plant was last measured (the re-fit of the refresh that
made the baseline in force) than nominal drift can in the time since. That rate is a property of the plant's
nominal drift, set on nominal drift only: this script runs the loop as configured over a run without faults
(the tuning run by default) and, at every refresh, records

* the re-fit a refresh steps toward (each mean the trend of the window's usable rows, now), and
* the explaining refresh's estimate (the average of the last ``min_rows`` rows, every row),

then prints, per plant and horizon (a refresh to one ``k`` refreshes later), the largest move of the second
from the first, in standard deviations per day (the largest over the moments; ``covariances: false``: every
baseline has the commissioning whitening). The loop's steps are not what is measured: a limited step lags the
plant on purpose.

    python bench/drift_speed.py                  # the tuning run (seed drift_scenario.TUNE_SEED)
    python bench/drift_speed.py --twin 402       # a judged seed's fault-free drifting twin (reported, never tuned on)
    python bench/drift_speed.py --hold 402 192 304   # baselines held from 192 h: the faulted run against its twin

Counts only; the runs are read from the cache (``python bench/drift_scenario.py`` makes them).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_drift as bd
import drift_scenario as scenario
from bench_faults import without_constant_sensors
from fedrca.application.site import prepare_site, run_pipeline
from fedrca.config import load_config
from fedrca.detectors.statistics import FamilyState
from fedrca.drift.baseline import mean_shift, refit_family
from fedrca.drift.guard import usable_rows
from fedrca.drift.keeper import BaselineKeeper, RefreshReport

MOMENTS = ("innovation", "level", "reconstruction")


def run_with_refresh(spec: Any, refresh: Callable[..., RefreshReport], original: Callable[..., RefreshReport]) -> None:
    """The loop on ``spec``'s rows after commissioning (``bench_drift``'s configuration, the loop on) with
    ``BaselineKeeper._refresh`` replaced by ``refresh`` for the run (``original``: what it calls through to)."""
    offset = int(scenario.TRAIN_H * bd.SAMPLES_PER_H)
    train, test = bd.split(bd.frame_of(spec, False), offset)
    config = without_constant_sensors(load_config(bd.CONFIG), train)
    BaselineKeeper._refresh = refresh  # type: ignore[method-assign]
    try:
        run_pipeline(prepare_site(bd.with_loop(config, True), train), test)
    finally:
        BaselineKeeper._refresh = original  # type: ignore[method-assign]


def measurements(spec: Any) -> dict[str, list[tuple[int, Any, Any]]]:
    """Per plant, at every refresh with a full window: (seq, the trend re-fit (None: too few usable rows), the
    average of the last min_rows rows), both :class:`FamilyState` of the proprietary model (Z_c)."""
    original = BaselineKeeper._refresh
    out: dict[str, list[tuple[int, Any, Any]]] = {}

    def measure(self: BaselineKeeper, at: int, force: bool) -> RefreshReport:
        s = self.settings
        seqs, Y, U, alarm = self.history.window(at, s.window)
        state = self.detector.baseline[0]
        if len(seqs) >= s.window and isinstance(state, FamilyState):
            ev = self.detector.baseline_evidence(Y, U, segments=[len(seqs)])
            use = usable_rows(alarm, s.guard)
            use[: max(self.detector.warmup, 10)] = False
            last = np.arange(len(seqs)) >= len(seqs) - s.min_rows
            try:
                target = refit_family(state, ev.r_c, ev.xh_c, ev.e_c, use, [len(seqs)], False,
                                      seqs.astype(np.float64), float(at))  # fmt: skip
            except Exception:  # too few usable rows: no target here
                target = None
            now = refit_family(state, ev.r_c, ev.xh_c, ev.e_c, last, [len(seqs)], False)
            out.setdefault(self.detector.name, []).append((at, target, now))
        return original(self, at, force)

    run_with_refresh(spec, measure, original)
    return out


def speeds(rows: list[tuple[int, Any, Any]], horizons: range) -> dict[int, float]:
    """The largest move (sd per day) from a refresh's re-fit to the estimate ``k`` refreshes later, per k."""
    best: dict[int, float] = {}
    for i, (t0, target, _) in enumerate(rows):
        if target is None:
            continue
        for k in horizons:
            if i + k >= len(rows):
                break
            t1, _, now = rows[i + k]
            moved = max(mean_shift(getattr(target, m), getattr(now, m)) for m in MOMENTS)
            best[k] = max(best.get(k, 0.0), moved / ((t1 - t0) / bd.SAMPLES_PER_DAY))
    return best


def held(spec: Any, hold_h: float, until_h: float) -> dict[str, list[tuple[float, float]]]:
    """Per plant, every baseline held from ``hold_h`` on (each later refresh refused), the explaining refresh's
    measure at each refresh to ``until_h``: (h, the move of the last ``min_rows`` rows' means from the baseline
    held, largest over the moments, in sd)."""
    offset = int(scenario.TRAIN_H * bd.SAMPLES_PER_H)
    original = BaselineKeeper._refresh
    hold = int(hold_h * bd.SAMPLES_PER_H) - offset
    out: dict[str, list[tuple[float, float]]] = {}

    def measure(self: BaselineKeeper, at: int, force: bool) -> RefreshReport:
        if at <= hold:
            return original(self, at, force)
        h = (at + offset) / bd.SAMPLES_PER_H
        state = self.detector.baseline[0]
        if h <= until_h and isinstance(state, FamilyState):
            s = self.settings
            seqs, Y, U, _ = self.history.window(at, s.window)
            ev = self.detector.baseline_evidence(Y, U, segments=[len(seqs)])
            last = np.arange(len(seqs)) >= len(seqs) - s.min_rows
            now = refit_family(state, ev.r_c, ev.xh_c, ev.e_c, last, [len(seqs)], False)
            moved = max(mean_shift(getattr(state, m), getattr(now, m)) for m in MOMENTS)
            out.setdefault(self.detector.name, []).append((h, moved))
        return self._report(RefreshReport(self.detector.name, at, "refused", "held", self.version))

    run_with_refresh(spec, measure, original)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--twin", type=int, help="a judged seed's fault-free drifting twin instead of the tuning run")
    parser.add_argument("--hold", type=float, nargs=3, metavar=("SEED", "FROM_H", "TO_H"),
                        help="instead: a judged seed's drifting run with faults and its fault-free twin, every "
                             "baseline held from FROM_H; the explaining refresh's measure (sd from the baseline "
                             "held) at each refresh to TO_H, on both")  # fmt: skip
    args = parser.parse_args(argv)
    if args.hold is not None:
        seed, lo, hi = int(args.hold[0]), args.hold[1], args.hold[2]
        run = held(scenario.spec(seed, True, True), lo, hi)
        twin = held(scenario.twins(seed=seed)["drift"], lo, hi)
        print(f"seed {seed}, every baseline held from {lo:g} h: the means of the last min_rows rows, sd from it "
              "(the faulted run / its fault-free twin)")  # fmt: skip
        hours = [h for h, _ in next(iter(run.values()))]
        print("| plant | " + " | ".join(f"{h:g} h" for h in hours) + " |")
        print("|---|" + "---|" * len(hours))
        for plant in run:
            cells = [f"{a:.2f} / {b:.2f}" for (_, a), (_, b) in zip(run[plant], twin[plant], strict=True)]
            print(f"| {plant} | " + " | ".join(cells) + " |")
        return 0
    spec = scenario.runs()["tune"] if args.twin is None else scenario.twins(seed=args.twin)["drift"]
    config = load_config(bd.CONFIG)
    every = config.drift.rows("every", config.dataset.sample_seconds)
    horizons = range(1, 4 * bd.SAMPLES_PER_DAY // every + 1)
    label = f"seed {scenario.TUNE_SEED} (tuning)" if args.twin is None else f"seed {args.twin}'s drifting twin"
    print(f"nominal drift of {label}: the largest move of a plant's means (sd per day) from a refresh's re-fit to "
          "the explaining refresh's estimate, by horizon (days)")  # fmt: skip
    print("| plant | " + " | ".join(f"{k * every / bd.SAMPLES_PER_DAY:.2f}" for k in horizons) + " |")
    print("|---|" + "---|" * len(horizons))
    worst: dict[int, float] = {}
    for plant, rows in measurements(spec).items():
        best = speeds(rows, horizons)
        print(f"| {plant} | " + " | ".join(f"{best.get(k, float('nan')):.2f}" for k in horizons) + " |")
        for k, v in best.items():
            worst[k] = max(worst.get(k, 0.0), v)
    print("| any | " + " | ".join(f"{worst.get(k, float('nan')):.2f}" for k in horizons) + " |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
