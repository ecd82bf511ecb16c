"""An in-sample BOUND on issue 35's candidate sets, not a method: how small the sets could be at the coverage asked,
with the stream-4 and kinetics runs held, were a set rule over the calibration features fitted ON the very runs it is
judged on (cheating on purpose).

The shipped calibration (``bench/rca_calibration.py``) is fitted and scored by a cross-validation over seeds and IDV
groups. Where its figures miss a bar, this asks whether any rule of the same family could meet it even with
hindsight. The family:

* a conditional logit over the features of a verdict's plants (:data:`fedrca.rca.calibration.FEATURES`; the
  ``plants`` family adds terms naming each plant: a bias per plant, and per plant its ``named`` and ``share``
  features (:func:`fedrca.rca.calibration.design`): a map of that family is fitted per site and does not carry to
  another site of the process, a map without them does);
* the ``plant`` set rule: the named root, then every plant of probability at least t
  (:func:`fedrca.rca.calibration.plant_set`);
* a run's set: the plants in at least half of its verdicts' sets (docs/faults.md).

Per setting and family, the map is fitted on every verdict of that setting's detected runs with a unit truth, the
stream-4 (IDV 2, 8) and kinetics (IDV 13) runs weighing ``upweight`` times more in the fit (so that the fit may trade
the other runs' sets for theirs), and t swept over [0, 1] on the same runs (:func:`sweep`). Reported: the smallest
mean size at which the sets hold a true root on >= 0.9 of the runs and both kinds on >= 2/3 (:func:`best`), and the
most kinetics runs held at coverage >= 0.9 and mean size <= 1.5 (:func:`most_held`). When even these in-sample
figures miss a bar, the fits searched here (maximum likelihood, the two kinds weighted up to 64 times) do not reach
it even on the runs they are fitted on: evidence, not a proof (the search does not cover every weight vector), that
the bar is out of reach of that family of maps over the verdicts' evidence, whatever the calibration's fitting.
``--held-out`` fits each run's map without its fault seed and IDV group (as ``rca_calibration`` holds them out),
the threshold still swept on the judged runs: what a family could give were only its threshold chosen with hindsight.
The method itself, map *and* threshold held out, for either family: ``python bench/bench_faults.py --load-outputs
OUT.pkl --compare-families plants --out -`` (``rca_calibration.family_figures``).

    python bench/rca_bound.py --load-outputs OUT.pkl     # OUT.pkl: written by bench/bench_faults.py --save-outputs
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from fedrca.rca.calibration import FAMILIES, design, fit_weights
from fedrca.rca.evidence import softmax
from rca_calibration import KINETICS, PENALTY, STREAM_4, Samples, _folds, collect, setting_key

#: how much more the stream-4 and kinetics runs weigh in the in-sample fit
UPWEIGHTS = (1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0)
#: the bars of issue 35, point 1
COVERAGE, SIZE, KINDS = 0.9, 1.5, 2.0 / 3.0


def sweep(
    probs: np.ndarray, truth: np.ndarray, root: np.ndarray, run: np.ndarray, idv: np.ndarray,
    thresholds: Sequence[float],
) -> list[dict[str, Any]]:  # fmt: skip
    """Per threshold t: the runs' sets of the ``plant`` rule at t and how they score.

    Parameters
    ----------
    probs : (N, M) the probabilities of N verdicts
    truth : (N, M) bool, the true roots of each verdict's run
    root : (N,) the named root of each verdict
    run, idv : (N,) each verdict's run and its IDV
    thresholds : the t to try

    Returns
    -------
    per t: ``threshold``, ``coverage`` (share of runs whose set holds a true root), ``size`` (mean over runs),
    ``stream-4`` and ``kinetics`` (runs held, runs) -- each verdict's set as
    :func:`fedrca.rca.calibration.plant_set` builds it, a run's the plants in at least half of its verdicts' sets,
    as ``rca_calibration.score`` scores them.
    """
    prob = np.asarray(probs, dtype=np.float64)
    N, M = prob.shape
    _, first, inverse = np.unique(run, return_index=True, return_inverse=True)
    R = len(first)
    per_run = np.bincount(inverse, minlength=R)
    # plant_set: the named root (of positive probability), then every plant of probability >= t (> 0)
    named = np.zeros((N, M), dtype=bool)
    named[np.arange(N), np.asarray(root)] = True
    named &= prob > 0.0
    run_truth = np.asarray(truth, dtype=bool)[first]
    kinds = {name: np.isin(np.asarray(idv)[first], kind) for name, kind in (("stream-4", STREAM_4),
                                                                              ("kinetics", KINETICS))}  # fmt: skip
    out = []
    for t in thresholds:
        joined = named | ((prob >= t - 1e-12) & (prob > 0.0))
        count = np.stack([np.bincount(inverse, weights=joined[:, m], minlength=R) for m in range(M)], axis=1)
        shown = 2 * count >= per_run[:, None]
        holds = (shown & run_truth).any(axis=1)
        point: dict[str, Any] = {
            "threshold": float(t),
            "coverage": float(holds.mean()),
            "size": float(shown.sum(axis=1).mean()),
        }
        for name, mine in kinds.items():
            point[name] = (int(holds[mine].sum()), int(mine.sum()))
        out.append(point)
    return out


def _share(held: tuple[int, int]) -> float:
    return held[0] / held[1] if held[1] else math.nan


def _kinds_met(point: Mapping[str, Any], kinds: float = KINDS) -> bool:
    return all(_share(point[k]) >= kinds - 1e-12 for k in ("stream-4", "kinetics") if point[k][1])


def best(
    points: Sequence[Mapping[str, Any]], coverage: float = COVERAGE, kinds: float = KINDS
) -> Mapping[str, Any] | None:
    """The point of the smallest mean size whose sets hold a true root on >= ``coverage`` of the runs and each kind
    (stream-4, kinetics; a kind without runs is no bar) on >= ``kinds`` of its runs (None: no point does)."""
    ok = [p for p in points if p["coverage"] >= coverage - 1e-12 and _kinds_met(p, kinds)]
    return min(ok, key=lambda p: (p["size"], -p["threshold"])) if ok else None


def most_held(points: Sequence[Mapping[str, Any]], coverage: float = COVERAGE, size: float = SIZE) -> Mapping[
        str, Any] | None:  # fmt: skip
    """Among the points at coverage >= ``coverage`` and mean size <= ``size``, the one holding the most kinetics runs
    (then the most stream-4 runs, then the smallest sets); None: no point meets both."""
    ok = [p for p in points if p["coverage"] >= coverage - 1e-12 and p["size"] <= size + 1e-12]
    return max(ok, key=lambda p: (p["kinetics"][0], p["stream-4"][0], -p["size"])) if ok else None


def bound(
    samples: Samples, family: str, upweight: float, grid: int = 100, penalty: float = PENALTY,
    held_out: bool = False,
) -> list[dict[str, Any]]:  # fmt: skip
    """The sweep (:func:`sweep`) of one setting's verdicts: the map of ``family`` fitted ON them (``held_out``: each
    run's probabilities from a map fitted without its fault seed and IDV group, as ``rca_calibration`` holds them out;
    the threshold still swept on the judged runs), the stream-4 and kinetics runs weighing ``upweight`` times more."""
    x = design(samples.x, family)
    heavy = np.isin(samples.idv, STREAM_4 + KINETICS)
    weight = samples.weight * np.where(heavy, upweight, 1.0)
    if not held_out:
        probs = softmax(x @ fit_weights(x, samples.truth, weight, penalty))
    else:
        probs = np.full(samples.truth.shape, np.nan)
        for train, test in _folds(samples):
            if train.any():
                probs[test] = softmax(x[test] @ fit_weights(x[train], samples.truth[train], weight[train], penalty))
    return sweep(probs, samples.truth, samples.root, samples.run, samples.idv, np.arange(grid, -1, -1) / grid)


def _point(p: Mapping[str, Any] | None) -> str:
    if p is None:
        return "none"
    return (f"t {p['threshold']:.2f}: holds {p['coverage']:.3f}, mean size {p['size']:.2f}, stream-4 "
            f"{p['stream-4'][0]}/{p['stream-4'][1]}, kinetics {p['kinetics'][0]}/{p['kinetics'][1]}")  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--load-outputs", required=True, metavar="PATH",
                        help="the monitors' outputs a bench/bench_faults.py --save-outputs run wrote")  # fmt: skip
    parser.add_argument("--families", default=",".join(FAMILIES))
    parser.add_argument("--upweights", default=",".join(f"{u:g}" for u in UPWEIGHTS))
    parser.add_argument("--held-out", action="store_true",
                        help="each run's probabilities from a map fitted without its fault seed and IDV group (the "
                        "threshold still swept on the judged runs: a bound on the threshold alone)")  # fmt: skip
    args = parser.parse_args(argv)
    import bench_faults as bf  # the library's truth and onset; its heavy imports only here

    saved = bf.load_outputs(args.load_outputs)
    results, run = saved["results"], saved["run"]
    fed = [v for v in bf.variants(run["rows"], run["epsilons"]) if v.kind == "fedrca"]
    samples = collect({v.key: results[v.key].faults for v in fed}, bf.TRUTH, bf.ONSET_SAMPLE)
    what = ("maps held out by fault seed and IDV group, the threshold swept on the judged runs" if args.held_out
            else "maps and thresholds fitted on the judged runs themselves")  # fmt: skip
    print(f"BOUND ({what}: not a method, not a figure of fedrca); bars: holds >= {COVERAGE}, mean size <= {SIZE}, "
          "stream-4 and kinetics >= 2/3")  # fmt: skip
    for v in sorted(fed, key=lambda v: setting_key(v.key), reverse=True):
        part = samples.where(samples.setting == v.key)
        print(f"\n{v.label}: {len(np.unique(part.run))} runs, {len(part)} verdicts")
        for family in args.families.split(","):
            for upweight in (float(u) for u in args.upweights.split(",")):
                points = bound(part, family, upweight, held_out=args.held_out)
                print(f"  {family}, stream-4 and kinetics x{upweight:g}: every bar at the smallest size: "
                      f"{_point(best(points))}; most kinetics at holds >= {COVERAGE} and size <= {SIZE}: "
                      f"{_point(most_held(points))}", flush=True)  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
