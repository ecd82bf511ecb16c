"""Why the loop lengthens a unit's alarms after a fault (docs/drift.md, *Measured*): the refresh at a fault's onset
replaced, in an otherwise unchanged run of ``bench/bench_drift.py``'s drifting plant.

Each variant runs fedrca (``config/tep-sim.yaml``, the loop on) over a judged seed's drifting run with faults and
counts one unit's alarming rows from the end of a fault to ``--until`` hours:

* **as shipped**;
* **onset skipped**: the scheduled refresh at the fault's onset is not taken (the baseline before it stays);
* **b0 at onset**: the commissioning baseline is installed at the onset, the loop runs on after it;
* **twin's baselines**: from the onset on, each refresh installs the baseline the loop takes at the same seq on
  the run's fault-free twin (an oracle: the loop as it would be had the fault not happened);
* **loop off**.

    python bench/drift_onset.py --seed 401                    # IDV 1, the feed unit, to 300 h
    python bench/drift_onset.py --seed 400 --plant reactor

Counts only; the runs are read from the cache (``python bench/drift_scenario.py`` makes them).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_drift as bd
import drift_scenario as scenario
from bench_faults import without_constant_sensors
from fedrca.application.site import prepare_site, run_pipeline
from fedrca.config import load_config
from fedrca.drift.keeper import BaselineKeeper, RefreshReport

VARIANTS = ("as shipped", "onset skipped", "b0 at onset", "twin's baselines", "loop off")


def alarms(variant: str, seed: int, fault: str, plant: str, until_h: float) -> int:
    """The plant's alarming rows (any flag) from the fault's end to ``until_h`` under ``variant``."""
    offset = int(scenario.TRAIN_H * bd.SAMPLES_PER_H)
    on_h, off_h = next((on, off) for name, _, on, off in scenario.FAULTS if name == fault)
    onset = int(on_h * bd.SAMPLES_PER_H) - offset
    frame = bd.frame_of(scenario.spec(seed, True, True), False)
    train, test = bd.split(frame, offset)
    config = without_constant_sensors(load_config(bd.CONFIG), train)
    original = BaselineKeeper._refresh
    oracle: dict[tuple[str, int], Any] = {}
    if variant == "twin's baselines":
        # the loop on the fault-free twin: its baseline after each refresh
        def record(self: BaselineKeeper, at: int, force: bool) -> RefreshReport:
            report = original(self, at, force)
            oracle[(self.detector.name, at)] = (self.baseline.state_c, self.baseline.state_a)
            return report

        twin_train, twin_test = bd.split(bd.frame_of(scenario.twins(seed=seed)["drift"], False), offset)
        BaselineKeeper._refresh = record  # type: ignore[method-assign]
        try:
            run_pipeline(prepare_site(bd.with_loop(config, True), twin_train), twin_test)
        finally:
            BaselineKeeper._refresh = original  # type: ignore[method-assign]

    def replaced(self: BaselineKeeper, at: int, force: bool) -> RefreshReport:
        name = self.detector.name
        if variant == "onset skipped" and at == onset:
            return self._report(RefreshReport(name, at, "refused", "diagnosis: skipped", self.version))
        if (variant == "b0 at onset" and at == onset) or (variant == "twin's baselines" and at >= onset):
            b0 = self._baselines[0]
            state_c, state_a = oracle[(name, at)] if oracle else (b0.state_c, b0.state_a)
            self._install(state_c, state_a, at, "forced")
            return self._report(RefreshReport(name, at, "forced", f"diagnosis: {variant}", self.version))
        return original(self, at, force)

    BaselineKeeper._refresh = replaced  # type: ignore[method-assign]
    try:
        site = prepare_site(bd.with_loop(config, variant != "loop off"), train)
        flags = run_pipeline(site, test).true_flags().astype(bool).any(axis=2)
    finally:
        BaselineKeeper._refresh = original  # type: ignore[method-assign]
    m = list(config.plant_names).index(plant)
    lo, hi = (int(h * bd.SAMPLES_PER_H) - offset for h in (off_h, until_h))
    return int(flags[lo:hi, m].sum())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seed", type=int, default=scenario.JUDGE_SEED)
    parser.add_argument("--fault", default="IDV 1", choices=[name for name, *_ in scenario.FAULTS])
    parser.add_argument("--plant", default="feed")
    parser.add_argument("--until", type=float, default=300.0, help="hours (of the run) to count alarms to")
    args = parser.parse_args(argv)
    end = next(off for name, _, _, off in scenario.FAULTS if name == args.fault)
    print(f"seed {args.seed}, {args.plant}: alarming rows from {args.fault}'s end ({end:g} h) to {args.until:g} h")
    for variant in VARIANTS:
        print(f"  {variant:<18} {alarms(variant, args.seed, args.fault, args.plant, args.until)}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
