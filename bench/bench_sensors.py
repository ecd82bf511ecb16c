"""Sensor-fault benchmark (issue 30, items 3 and 4): sensor faults told apart from process faults, and time.

On the simulated fault library (``bench/tep_library.py``: IDV 1..28 x fault seeds, nominal training and
FAR seeds; missing runs are simulated first) with the product (``config/tep.yaml``, trained on the
training seeds' nominal rows, flag epsilon inf):

* **sensor faults** injected into one tag at a time (seeded choice over every tag of every plant):
  ``stuck`` (the tag repeats its last value), ``flatline`` (its last value plus noise of 1 % of its
  nominal move), ``range`` (a broken transmitter loop: an open 4-20 mA loop reads 25 % of the span
  below the tag's range, the range its plant's checks use), ``stale`` (no value, quality Stale),
  ``bad`` (no value, quality Bad). On the nominal FAR runs (from row 300 for 200 rows,
  ``TAGS_PER_KIND`` tags per run and kind) and during every process fault (from ``DURING`` rows
  after its onset to the end, one kind and tag per run);
* **reported**: a ``sensor_fault`` event naming the tag's plant within ``WITHIN`` samples of the injection;
* **process root causes caused by a sensor fault** on the nominal runs: root verdicts of the injected
  run that the clean run does not issue (same verdict id);
* **process RCA**: majority root correct over the detected runs with a unit truth (``bench_faults``'
  scoring), clean vs with the sensor faults injected (the bar: within 0.05);
* **false sensor reports**: sensor events on the clean nominal and process-fault runs (a process
  fault taken for a broken sensor);
* the **peer without the checks** (``health.enabled: false``, the same detectors): what the same sensor
  faults do to the RCA when nobody checks the tags;
* **time**: the true root plant's rows shifted by +-``SHIFTS`` samples against the others (a plant
  clock that assigns seqs off by that much, invisible in the flags): majority root correct vs the shift.

    python bench/run.py sensors                 # in make bench
    python bench/bench_sensors.py --idvs 1,4 --fault-seeds 100     # quick
    python bench/bench_sensors.py --smoke       # tiny: 2 IDVs, 16-h runs (make test)

Exit 0 (the table is the record; the issue's bars are printed met or MISSED).
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_faults import (
    TRUTH,
    MonitorOutput,
    VerdictRecord,
    load_library,
    score_run,
    without_constant_sensors,
)
from fedrca.config import SiteConfig, load_config
from fedrca.contracts import SENSOR_FAULT
from fedrca.datasets.loader import PlantData, plant_frames
from fedrca.datasets.sensor_faults import SENSOR_FAULT_KINDS, inject_sensor_fault
from tep_library import FAR_SEEDS, FAULT_SEEDS, IDVS, ONSET_SAMPLE, TRAIN_SEEDS, Library

REPO = Path(__file__).resolve().parents[1]

KINDS = SENSOR_FAULT_KINDS
#: a nominal run's injected sensor fault: its first row and length
NOMINAL_ONSET, DURATION = 300, 200
#: rows after a process fault's onset at which its injected sensor fault starts
DURING = 40
#: tags per nominal FAR run and kind
TAGS_PER_KIND = 8
#: a sensor fault counts as reported when its plant's sensor event comes within this many samples
WITHIN = 10
#: samples the true root plant's rows are shifted by (both ways) in the time table
SHIFTS = (1, 2, 5, 10)
#: library of the full run
HOURS = 48.0

#: bench/run.py --smoke: 16-h runs of IDV 4 and 6, one seed of each kind, one tag per kind, one shift
SMOKE: dict[str, Any] = {
    "HOURS": 16.0,
    "TAGS_PER_KIND": 1,
    "SHIFTS": (2,),
    "NOMINAL_ONSET": 120,
    "DURATION": 80,
}


@dataclass
class Injection:
    """One injected sensor fault: plant, tag (column of the plant), kind, rows [start, stop)."""

    plant: str
    tag: int
    kind: str
    start: int
    stop: int


@dataclass
class Outcome:
    """What one run gave: its verdicts, its alarm (any plant's own flag), and per plant its sensor bits."""

    verdicts: list[Any]
    alarm: np.ndarray
    sensor: dict[str, np.ndarray] = field(default_factory=dict)

    def monitor(self) -> MonitorOutput:
        """The process verdicts as bench_faults scores them."""
        roots = [VerdictRecord(v.seq, v.root_cause, v.candidates) for v in self.verdicts if not v.is_sensor_event]
        return MonitorOutput(self.alarm, roots)

    def events(self) -> list[Any]:
        return [v for v in self.verdicts if v.is_sensor_event]


def with_checks(config: SiteConfig, enabled: bool) -> SiteConfig:
    """``config`` with every plant's sensor checks on or off."""
    plants = [p.model_copy(update={"health": p.health.model_copy(update={"enabled": enabled})}) for p in config.plants]
    return config.model_copy(update={"plants": plants})


def inject(
    arrays: dict[str, PlantData],
    nominal: dict[str, np.ndarray],
    inj: Injection,
    rng: np.random.Generator,
    ranges: dict[str, tuple[np.ndarray, np.ndarray]] | None = None,
) -> tuple[dict[str, PlantData], dict[str, np.ndarray]]:
    """The plants' rows with one sensor fault injected (:func:`fedrca.datasets.sensor_faults.inject_sensor_fault`,
    the nominal move from the training rows; a broken loop reads 25 % of the tag's range below it, ``ranges``:
    plant -> (low, high) per tag, the range the plant's checks use), and the quality codes of that plant."""
    limits = None if ranges is None else (float(ranges[inj.plant][0][inj.tag]), float(ranges[inj.plant][1][inj.tag]))
    Y, Q = inject_sensor_fault(
        arrays[inj.plant].Y, inj.tag, inj.kind, inj.start, inj.stop, nominal[inj.plant][:, inj.tag], rng, limits
    )
    out = dict(arrays)
    out[inj.plant] = PlantData(Y, arrays[inj.plant].U)
    return out, {inj.plant: Q}


def shifted(arrays: dict[str, PlantData], plant: str, by: int) -> dict[str, PlantData]:
    """``plant``'s rows moved ``by`` samples later (negative: earlier), edges held: its clock is off."""
    Y = arrays[plant].Y
    idx = np.clip(np.arange(len(Y)) - by, 0, len(Y) - 1)
    out = dict(arrays)
    out[plant] = PlantData(Y[idx], None if arrays[plant].U is None else arrays[plant].U[idx])
    return out


def run_site(site: Any, arrays: dict[str, PlantData], quality: dict[str, np.ndarray] | None = None) -> Outcome:
    from fedrca.application.site import run_pipeline

    run = run_pipeline(site, arrays, quality=quality)
    alarm = run.true_flags().astype(bool).any(axis=(1, 2))
    sensor = {p: h.fault for p, h in run.health.items()}
    return Outcome(run.verdicts, alarm, sensor)


def reported(out: Outcome, inj: Injection) -> int | None:
    """Samples from the injection to the first sensor event naming its plant (None: none within the run)."""
    for v in out.events():
        if v.outcome == SENSOR_FAULT and inj.plant in v.sensor_plants and v.seq >= inj.start:
            return v.seq - inj.start
    return None


def new_roots(out: Outcome, clean: Outcome) -> int:
    """Root verdicts of ``out`` that ``clean`` does not issue (by verdict id)."""
    seen = {v.id for v in clean.verdicts}
    return sum(1 for v in out.verdicts if v.root_cause is not None and v.id not in seen)


def rca_figure(outs: dict[tuple[int, int], Outcome]) -> tuple[float, float, int]:
    """(majority root correct over the detected runs with a unit truth, mean FDR, runs scored)."""
    rows = [score_run(o.monitor(), ONSET_SAMPLE, TRUTH.get(i)) for (i, _), o in outs.items()]
    fdr = float(np.mean([r["FDR"] for r in rows])) if rows else float("nan")
    scored = [r for (i, _), r in zip(outs, rows, strict=True) if TRUTH.get(i) and r["detected"]]
    correct = float(np.mean([bool(r["correct"]) for r in scored])) if scored else float("nan")
    return correct, fdr, len(scored)


def _fmt(x: float) -> str:
    return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.3f}"


def main(argv: list[str] | None = None, smoke: bool = False) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--idvs", default=",".join(map(str, IDVS)))
    parser.add_argument("--fault-seeds", default=",".join(map(str, FAULT_SEEDS)))
    parser.add_argument("--train-seeds", default=",".join(map(str, TRAIN_SEEDS)))
    parser.add_argument("--far-seeds", default=",".join(map(str, FAR_SEEDS)))
    parser.add_argument("--config", default=str(REPO / "config" / "tep.yaml"))
    parser.add_argument("--no-train", action="store_true", help="the untrained site (Theta = 0; faster)")
    parser.add_argument("--no-generate", action="store_true", help="fail instead of simulating missing runs")
    parser.add_argument("--available", action="store_true", help="use only the cached fault runs")
    parser.add_argument("--smoke", action="store_true", help="tiny run (IDV 4 and 6, 16-h runs): bench/run.py --smoke")
    args = parser.parse_args([] if argv is None else argv)
    smoke = smoke or args.smoke
    if smoke:
        args.idvs, args.fault_seeds, args.train_seeds, args.far_seeds = "4,6", "100", "200", "300"
        args.no_train = True
        for name, value in SMOKE.items():
            globals()[name] = value
    seeds = lambda text: tuple(int(s) for s in text.split(",") if s.strip())  # noqa: E731
    library = Library(
        seeds(args.fault_seeds), seeds(args.train_seeds), seeds(args.far_seeds), seeds(args.idvs), hours=HOURS
    )
    started = time.perf_counter()
    train, far_frames, fault_frames = load_library(library, generate=not args.no_generate, available=args.available)
    onset_rows = round(library.onset_h * 3600 / 180)
    print(
        f"library: {len(train)} training rows, {len(far_frames)} FAR runs, {len(fault_frames)} fault runs; "
        f"trained: {not args.no_train}",
        flush=True,
    )
    from fedrca.application.site import prepare_site

    config = without_constant_sensors(load_config(args.config), train)
    sites: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as params:
        if not args.no_train:
            from fedrca.application.training import train_site

            train_site(config, train, params, resume=False, progress=None)
        sites["checks"] = prepare_site(config, train, params_dir=None if args.no_train else params)
    # the peer: the same detectors and engine, nobody checking the tags (health.enabled false)
    sites["no checks"] = dataclasses.replace(
        sites["checks"], config=with_checks(sites["checks"].config, False), health={}
    )
    plants = sites["checks"].config.plant_names
    cfg = sites["checks"].config
    nominal = {p: d.Y for p, d in plant_frames(cfg, train, "training").items()}
    width = {p: nominal[p].shape[1] for p in plants}
    # each tag's range as its plant's checks have it (configured limits or the learned plausibility range)
    ranges = {p: (h.parameters.lo, h.parameters.hi) for p, h in sites["checks"].health.items()}
    tags = [(p, j) for p in plants for j in range(width[p])]
    arrays = lambda frame: plant_frames(cfg, frame, "library")  # noqa: E731
    far = {s: arrays(f) for s, f in far_frames.items()}
    faults = {k: arrays(f) for k, f in fault_frames.items()}
    print(f"  sites fitted ({time.perf_counter() - started:.1f} s)", file=sys.stderr, flush=True)

    # clean runs
    clean = {name: {s: run_site(site, a) for s, a in far.items()} for name, site in sites.items()}
    clean_faults = {name: {k: run_site(site, a) for k, a in faults.items()} for name, site in sites.items()}
    # sensor faults on the nominal runs
    reports: dict[str, list[int | None]] = {k: [] for k in KINDS}
    caused = {"checks": 0, "no checks": 0}
    injected_nominal = 0
    for s, a in far.items():
        for kind in KINDS:
            rng = np.random.default_rng([s, KINDS.index(kind)])
            for t in rng.choice(len(tags), size=min(TAGS_PER_KIND, len(tags)), replace=False):
                plant, j = tags[int(t)]
                inj = Injection(plant, j, kind, NOMINAL_ONSET, NOMINAL_ONSET + DURATION)
                values, quality = inject(a, nominal, inj, rng, ranges)
                injected_nominal += 1
                for name, site in sites.items():
                    out = run_site(site, values, quality)
                    caused[name] += new_roots(out, clean[name][s])
                    if name == "checks":
                        reports[kind].append(reported(out, inj))
    # sensor faults during the process faults
    during: dict[str, dict[tuple[int, int], Outcome]] = {name: {} for name in sites}
    during_reports: dict[str, list[int | None]] = {k: [] for k in KINDS}
    for n, (key, a) in enumerate(sorted(faults.items())):
        kind = KINDS[n % len(KINDS)]
        rng = np.random.default_rng([key[0], key[1], 7])
        plant, j = tags[int(rng.integers(len(tags)))]
        start = onset_rows + DURING
        inj = Injection(plant, j, kind, start, len(a[plant].Y))
        values, quality = inject(a, nominal, inj, rng, ranges)
        for name, site in sites.items():
            during[name][key] = run_site(site, values, quality)
        during_reports[kind].append(reported(during["checks"][key], inj))
    # time: the true root plant's rows shifted
    shift_rows = []
    for by in (0, *SHIFTS, *(-s for s in SHIFTS)):
        outs = {}
        for key, a in faults.items():
            truth = TRUTH.get(key[0])
            if not truth:
                continue
            root = sorted(truth)[0]
            outs[key] = run_site(sites["checks"], shifted(a, root, by) if by else a)
        correct, _, n_scored = rca_figure(outs)
        shift_rows.append({"shift (samples)": by, "majority root correct": _fmt(correct), "runs scored": n_scored})
    elapsed = time.perf_counter() - started

    # ---------------------------------------------------------------------------------------- report
    def share(values: list[int | None]) -> float:
        return float(np.mean([d is not None and d <= WITHIN for d in values])) if values else float("nan")

    def delay(values: list[int | None]) -> str:
        got = [d for d in values if d is not None]
        return f"{int(np.median(got))}" if got else "-"

    kinds_table = pd.DataFrame(
        [
            {
                "kind": k,
                "nominal runs": len(reports[k]),
                f"reported <= {WITHIN}": _fmt(share(reports[k])),
                "median delay": delay(reports[k]),
                "during faults": len(during_reports[k]),
                f"reported <= {WITHIN} ": _fmt(share(during_reports[k])),
                "median delay ": delay(during_reports[k]),
            }
            for k in KINDS
        ]
    )
    every = [d for k in KINDS for d in reports[k] + during_reports[k]]
    overall = share(every)
    print(
        f"\nSensor faults injected: {injected_nominal} on {len(far)} nominal runs, {len(faults)} during process "
        f"faults (onset + {DURING}); reported = a sensor_fault event naming the tag's plant\n"
        + kinds_table.to_string(index=False)
    )
    false_nominal = Counter(p for o in clean["checks"].values() for v in o.events() for p in v.sensor_plants
                            if v.outcome == SENSOR_FAULT)  # fmt: skip
    false_faults = Counter(p for o in clean_faults["checks"].values() for v in o.events() for p in v.sensor_plants
                           if v.outcome == SENSOR_FAULT)  # fmt: skip
    runs_false = sum(1 for o in clean_faults["checks"].values() if o.events())
    rca = {}
    for name in sites:
        rca[(name, "clean")] = rca_figure(clean_faults[name])
        rca[(name, "sensor faults")] = rca_figure(during[name])
    rca_table = pd.DataFrame(
        [
            {"monitor": name, "runs": what, "majority root correct": _fmt(c), "mean FDR": _fmt(f), "runs scored": n}
            for (name, what), (c, f, n) in rca.items()
        ]
    )
    print(
        "\nProcess RCA on the fault library, clean and with one sensor fault per run\n"
        + rca_table.to_string(index=False)
    )
    print(
        f"\nProcess root verdicts caused by the sensor faults on the nominal runs (not issued on the clean run): "
        f"with the checks {caused['checks']}, without {caused['no checks']}"
    )
    print(
        f"False sensor reports: {sum(false_nominal.values())} on {len(far)} clean nominal runs {dict(false_nominal)}; "
        f"{sum(false_faults.values())} on {runs_false} of {len(faults)} clean process-fault runs {dict(false_faults)}"
    )
    print(
        "\nTime: the true root plant's rows shifted against the others (checks on)\n"
        + pd.DataFrame(shift_rows).to_string(index=False)
    )
    clean_rca, with_rca = rca[("checks", "clean")][0], rca[("checks", "sensor faults")][0]
    bars = [
        f"reported as sensor faults of the right plant within {WITHIN} samples: {overall:.3f} (bar >= 0.95): "
        + ("met" if overall >= 0.95 else "MISSED"),
        f"process root-cause verdicts caused by a sensor fault on the nominal runs: {caused['checks']} (bar 0): "
        + ("met" if caused["checks"] == 0 else "MISSED"),
        f"process-fault RCA with sensor faults {_fmt(with_rca)} vs {_fmt(clean_rca)} without (bar: within 0.05): "
        + ("met" if abs(with_rca - clean_rca) <= 0.05 else "MISSED"),
    ]
    if not smoke:
        print("\nIssue-30 bars on this library:\n  " + "\n  ".join(bars))
    print(f"bench_sensors: done ({elapsed:.0f} s)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
