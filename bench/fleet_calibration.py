"""Why one pooled threshold left the fleet blind on the simulated library, and what each fix adds (issue 23).

On ``config/fleet-tep-sim.yaml`` (five 100-row d00.dat segments + the simulated nominal
training seeds 200-202), with the centralised twin (``fit_centralised``: the fleet's
model on exact sums, the same EM) and the fleet's own settings:

1. **scores per participant**: in-sample 50th / 99.5th percentile, and the held-out
   99.5th percentile with the cross-fitting blocks held out of every participant at
   once ("together", the issue-18 scheme) and staggered (participant i holds out block
   (f + i) mod F, :func:`fedrca.fleet.calibration.held_out_block`);
2. **held-out score medians by block** of the simulated participants under both schemes
   (block 0 = the simulator's start-up, the first ~10 h of every run);
3. **K from nominal data**: the held-out nominal log-likelihood (staggered folds,
   sum over every participant's held-out rows of ln p^s(x) under the fold's model and
   its own weights) for K = 1, 2, 3, 4 patterns before pruning; the configuration's K is
   the smallest with the best value;
4. **the library, one fix at a time** (simulated participants; FDR mean over IDV 1..28 x
   fault seeds from row 160, FAR largest over participants x nominal FAR seeds), from the
   issue-18 fleet (K = 1): one pooled threshold (together) -> one pooled threshold
   (staggered) -> each participant's own threshold (staggered, ``fedrca.fleet.calibration``)
   -> the same on the EWMA of the score (lambda = 0.1) -> the configuration's K.

Fold models are ``fit_centralised`` runs on the remaining rows from the full fit's
initialisation (the same computation as the fleet's fold fits). Reads the library from
the run cache (``python bench/tep_library.py`` fills it).

    nice -n 10 .venv/bin/python bench/fleet_calibration.py
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import warnings
from pathlib import Path

import numpy as np
from scipy.special import logsumexp

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_fleet_library import CONFIG, load_runs
from fedrca.application.fleet.config import load_fleet_config
from fedrca.application.fleet.sources import load_participants
from fedrca.exceptions import PrivacyWarning
from fedrca.fleet.calibration import ewma_scores, held_out_block, own_calibration
from fedrca.fleet.collabdict import FleetSettings, component_nll, fit_centralised
from tep_library import ONSET_SAMPLE, Library

REPO = Path(__file__).resolve().parents[1]


def held_out(
    data: dict[str, np.ndarray], settings: FleetSettings, staggered: bool
) -> tuple[dict[str, list[np.ndarray]], float]:
    """Every participant's cross-fitted scores (one array per block, the blocks together or staggered)
    and the held-out nominal log-likelihood sum_s sum_rows ln p^s(x)."""
    full = fit_centralised(list(data.values()), settings)
    names = list(data)
    F = settings.folds
    out: dict[str, list[np.ndarray]] = {n: [] for n in names}
    loglik = 0.0
    for f in range(F):
        rows = [held_out_block(len(data[n]), F, f, i if staggered else 0) for i, n in enumerate(names)]
        fold = fit_centralised(
            [np.delete(data[n], r, axis=0) for n, r in zip(names, rows, strict=True)],
            dataclasses.replace(settings, folds=0),
            init=full.init,
        )
        m = fold.model
        for i, (n, r) in enumerate(zip(names, rows, strict=True)):
            out[n].append(m.score(data[n][r], fold.weights[i]))
            # ln p^s(x) = logsumexp_k (ln pi_k^s - (-ln N(x | mu_k, Lambda_k^-1)))
            nll = component_nll(m.standardise(data[n][r]), m.means, m.precisions)
            with np.errstate(divide="ignore"):
                loglik += float(logsumexp(np.log(fold.weights[i])[None, :] - nll, axis=1).sum())
    return out, loglik


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", type=Path, default=CONFIG)
    parser.add_argument("--ewma", type=float, default=0.1, help="lambda of the smoothed score (last variants)")
    parser.add_argument("--components", default="1,2,3,4", help="K before pruning for the log-likelihood scan")
    args = parser.parse_args(argv)
    os.chdir(REPO)
    config = load_fleet_config(args.config)
    data, _ = load_participants(config)
    chosen = dataclasses.replace(config.settings(), ewma=None, threshold_scope="participant", chunks=1)
    settings = dataclasses.replace(chosen, n_components=1)  # the issue-18 fleet
    p = settings.percentile
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PrivacyWarning)
        fit = fit_centralised(list(data.values()), settings)
        schemes = {name: held_out(data, settings, name == "staggered")[0] for name in ("together", "staggered")}
        scan = {}
        for K in (int(k) for k in args.components.split(",")):
            scan[K] = (
                fit_centralised(list(data.values()), dataclasses.replace(chosen, n_components=K, folds=0)),
                held_out(data, dataclasses.replace(chosen, n_components=K), staggered=True),
            )
        kfit = fit_centralised(list(data.values()), chosen)
        kheld, _ = held_out(data, chosen, staggered=True)
    model, names = fit.model, list(data)
    weights = dict(zip(names, fit.weights, strict=True))
    simulated = [p_.name for p_ in config.participants if p_.simulate is not None]

    print(f"{args.config}: the issue-18 fleet (K = 1), {settings.folds} folds, percentile {p}\n")
    print(f"| participant | rows | in-sample p50 | in-sample p{p:g} | held out together | held out staggered |")
    print("|---|---|---|---|---|---|")
    for n in names:
        ins = model.score(data[n], weights[n])
        tog, stag = (np.percentile(np.concatenate(schemes[s][n]), p) for s in ("together", "staggered"))
        print(
            f"| {n} | {len(data[n])} | {np.percentile(ins, 50):.1f} | {np.percentile(ins, p):.1f} | "
            f"{tog:.1f} | {stag:.1f} |"
        )
    print("\nheld-out score medians by block (simulated participants; block 0 = the first fifth of the run)")
    for scheme in ("together", "staggered"):
        for n in simulated:
            cells = " ".join(f"{np.median(b):6.1f}" for b in schemes[scheme][n])
            print(f"  {scheme:<9} {n}: {cells}")

    print("\nK from nominal data: held-out nominal log-likelihood (staggered folds), K before -> after pruning")
    for K, (kf, (_, ll)) in scan.items():
        groups = sorted({tuple(round(float(x), 3) for x in w) for w in kf.weights})
        print(f"  K = {K} -> {kf.model.n_components}: {ll:,.0f} (participants' weights: {groups})")
    print(f"  configuration: components {chosen.n_components} -> {kfit.model.n_components}")

    library = Library()
    _, far, faults = load_runs(library)
    fits = {"K1": (model, weights), "chosen": (kfit.model, dict(zip(names, kfit.weights, strict=True)))}
    raw = {
        v: {key: {n: m.score(X, w[n]) for n in simulated} for key, X in faults.items()} for v, (m, w) in fits.items()
    }
    far_raw = {v: {s: {n: m.score(X, w[n]) for n in simulated} for s, X in far.items()} for v, (m, w) in fits.items()}

    def pooled(scheme: str) -> float:
        return float(np.percentile(np.concatenate([np.concatenate(b) for b in schemes[scheme].values()]), p))

    def own(lam: float | None, held: dict[str, list[np.ndarray]] = schemes["staggered"]) -> dict[str, float]:
        out = {}
        for n in simulated:
            rule = own_calibration(held[n], p, lam)
            if rule is None:
                raise SystemExit(f"fleet_calibration: {n} has too few held-out scores for its own threshold")
            out[n] = rule.threshold
        return out

    K = chosen.n_components
    variants = [
        (
            "K = 1, one pooled threshold, blocks together (issue 18)",
            {n: pooled("together") for n in simulated},
            None,
            "K1",
        ),
        ("K = 1, one pooled threshold, blocks staggered", {n: pooled("staggered") for n in simulated}, None, "K1"),
        ("K = 1, own threshold, blocks staggered", own(None), None, "K1"),
        (f"K = 1, own threshold on the EWMA {args.ewma:g}, blocks staggered", own(args.ewma), args.ewma, "K1"),
        (
            f"K = {K}, own threshold on the EWMA {args.ewma:g}, blocks staggered",
            own(args.ewma, kheld),
            args.ewma,
            "chosen",
        ),
    ]
    print(f"\nsimulated participants {', '.join(simulated)} on the library (fault seeds {library.fault_seeds})\n")
    print("| variant | thresholds | FAR (worst) | mean FDR | IDV with FDR < 0.5 |")
    print("|---|---|---|---|---|")
    for label, thr, lam, which in variants:

        def stat(a: np.ndarray, lam: float | None = lam) -> np.ndarray:
            return a if lam is None else ewma_scores(a, lam)

        far_worst = max(float(np.mean(stat(v[n]) > thr[n])) for v in far_raw[which].values() for n in simulated)
        per_idv: dict[int, list[float]] = {}
        for (idv, _), by in raw[which].items():
            per_idv.setdefault(idv, []).extend(float(np.mean(stat(by[n])[ONSET_SAMPLE:] > thr[n])) for n in simulated)
        fdr = {i: float(np.mean(v)) for i, v in sorted(per_idv.items())}
        low = ",".join(f"{i}" for i, v in fdr.items() if v < 0.5)
        shown = "/".join(f"{t:.1f}" for t in thr.values())
        print(f"| {label} | {shown} | {far_worst:.4f} | {np.mean(list(fdr.values())):.3f} | {low} |")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
