"""FedPC (issues 17, 23): federated causal structure learning against pooled and per-site PC, in one run.

0. Same computation: fedrca's PC (FedPC with one site) on pooled data has the same
   skeleton as causal-learn's PC-stable (the peer) on every linear data set below.
1. Linear-Gaussian DAGs (Erdős–Rényi, 2 neighbours per variable on average, weights
   ±U(0.5, 2), noise sd U(0.5, 1.5)) with p = 10, 20, 50 variables and 5000 samples split
   unevenly (each site at least half an even share) across K = 5 and 10 sites; 5 graphs
   (fixed seeds) per setting, Fisher-z, alpha 0.01. Methods: FedPC with pooled statistics
   (``fedrca graph``'s default: PC on the sites' securely summed sufficient statistics),
   FedPC's vote (P4, keep fraction 0.3: the baseline), PC on the pooled data (causal-learn,
   the peer), PC on each site alone (average and best SHD), the naive vote of the per-site
   DAGs (an arc kept by more than 30 % of them). SHD and arrowhead F1 of the DAG extensions
   against the true DAG. Time: FedPC = all sites and the server in this one process; per
   site = one site's PC; naive vote = all sites' PCs.
2. The same with weaker weights ±U(0.3, 1.0), 3 graphs per setting (sensitivity to the
   generator; no target).
3. Discrete Bayesian networks (8-12 binary/ternary variables, at most 3 parents,
   Dirichlet(0.5) CPTs), G-square, the same comparison.
4. TEP: the plant graph FedPC learns from d00.dat split into 3 and 5 sites (52 variables,
   aggregated to the 5 plants of config/tep.yaml), pooled statistics and vote, in the RCA
   engine next to the complete graph: the product's pipeline (detectors fitted on d00.dat,
   Theta = 0, published flags and severity levels) on the bundled fault files.
5. The noised pooled statistics (each site one Gaussian release of its standardised
   cross-products, rows clipped to 1.5 sqrt(p), (epsilon, 1e-5) per site): mean SHD over
   epsilon on the settings of 1 with 10 and 20 variables (no target: the curve is the record).

Targets (exit 1 when missed): in every linear and discrete setting FedPC's (pooled
statistics) mean SHD is below the per-site average and the naive vote and at most 1.2x
pooled PC's; FedPC is at least as fast as pooled causal-learn PC at p = 50; on TEP the
FedPC graph (pooled statistics, skeleton orientation: the ``fedrca graph`` default) names the
true root at least as often as the complete graph after every fault's onset.
"""

from __future__ import annotations

import dataclasses
import math
import sys
import time
import warnings
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd

from fedrca.causal.baselines import causallearn_pc
from fedrca.causal.citests import FisherZ, GSquare
from fedrca.causal.fedpc import FedPCServer, FedPCSite, fedpc
from fedrca.causal.pdag import pdag_to_dag, score_structure, vote_graphs
from fedrca.causal.pooled import PooledStatsServer
from fedrca.datasets.causal import discrete_network, linear_gaussian, random_dag, split_sites

REPO = Path(__file__).resolve().parents[1]
FEDPC = "FedPC pooled-stats"
VOTE = "FedPC vote (P4)"
EPSILONS = (0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0)
N_SAMPLES = 5000
ALPHA = 0.01
KEEP = 0.3
REPS = 5
SENSITIVITY_REPS = 3
LINEAR_VARIABLES = (10, 20, 50)
SITES = (5, 10)
GRAPH_SPLITS = (3, 5)  # TEP: d00.dat split into this many sites
NOISE_SETTINGS = ((10, 5), (10, 10), (20, 5), (20, 10))  # (variables, sites) of the noise curve
SMOKE = {  # bench/run.py --smoke
    "N_SAMPLES": 300,
    "REPS": 1,
    "SENSITIVITY_REPS": 1,
    "LINEAR_VARIABLES": (10,),
    "SITES": (5,),
    "GRAPH_SPLITS": (3,),
    "TEP_FAULTS": {"04": "reactor"},
    "NOISE_SETTINGS": ((10, 5),),
    "EPSILONS": (1.0, 8.0),
}  # bench/run.py --smoke
TEP_FAULTS = {"01": "feed", "04": "reactor", "05": "separator", "06": "feed"}


def compare(
    dag: np.ndarray, X: np.ndarray, parts: list[np.ndarray], test: str, checks: list[bool] | None = None
) -> dict[str, tuple[float, float, float]]:
    """(SHD, F1, seconds) per method on one data set."""
    names = [f"x{j:03d}" for j in range(X.shape[1])]
    out: dict[str, tuple[float, float, float]] = {}

    def dag_of(pdag: np.ndarray) -> np.ndarray:
        return pdag_to_dag(pdag)[0]

    sites = [FedPCSite(X[idx], names, test=test) for idx in parts]  # type: ignore[arg-type]
    started = time.perf_counter()
    result = PooledStatsServer(X.shape[1], test=test, alpha=ALPHA).run([s.handle for s in sites])  # type: ignore[arg-type]
    fed_time = time.perf_counter() - started
    s = score_structure(result.dag, dag)
    out[FEDPC] = (s.shd, s.f1, fed_time)

    started = time.perf_counter()
    result = FedPCServer(X.shape[1], alpha=ALPHA, keep_fraction=KEEP).run([s.handle for s in sites])
    vote_time = time.perf_counter() - started
    s = score_structure(result.dag, dag)
    out[VOTE] = (s.shd, s.f1, vote_time)

    started = time.perf_counter()
    pooled = causallearn_pc(X, ALPHA, test)  # type: ignore[arg-type]
    pooled_time = time.perf_counter() - started
    s = score_structure(dag_of(pooled), dag)
    out["PC pooled (causal-learn)"] = (s.shd, s.f1, pooled_time)
    if checks is not None:
        ours = fedpc([FisherZ(X) if test == "fisher-z" else GSquare(X)], ALPHA)
        checks.append(bool(np.array_equal(ours.skeleton, pooled | pooled.T)))

    local, times = [], []
    for idx in parts:
        started = time.perf_counter()
        local.append(dag_of(causallearn_pc(X[idx], ALPHA, test)))  # type: ignore[arg-type]
        times.append(time.perf_counter() - started)
    scores = [score_structure(g, dag) for g in local]
    out["PC per site (average)"] = (
        float(np.mean([x.shd for x in scores])),
        float(np.mean([x.f1 for x in scores])),
        float(np.mean(times)),
    )
    best = min(range(len(scores)), key=lambda k: scores[k].shd)
    out["PC per site (best)"] = (scores[best].shd, scores[best].f1, times[best])
    vote = vote_graphs(local, KEEP)
    s = score_structure(vote, dag)
    out["naive vote of site DAGs"] = (s.shd, s.f1, float(np.sum(times)))
    return out


def table(
    settings: list[tuple[str, int, int]],
    make: Callable[[str, int, int, int], tuple],
    test: str,
    checks: list[bool] | None = None,
    reps: int | None = None,
) -> tuple[pd.DataFrame, list[dict]]:
    """Mean SHD / F1 / time per method and setting over ``reps`` data sets, and the per-setting verdicts."""
    rows, verdicts = [], []
    for label, p, K in settings:
        acc: dict[str, list[tuple[float, float, float]]] = {}
        for rep in range(REPS if reps is None else reps):  # REPS read at the call: --smoke sets it
            dag, X = make(label, p, K, rep)
            parts = split_sites(len(X), K, seed=1000 * p + 10 * K + rep)
            for method, value in compare(dag, X, parts, test, checks).items():
                acc.setdefault(method, []).append(value)
        means = {m: np.mean(np.array(v), axis=0) for m, v in acc.items()}
        for method, (shd, f1, sec) in means.items():
            rows.append({"setting": label, "p": p, "sites": K, "method": method, "SHD": shd, "F1": f1, "time s": sec})
        fed, vote, pooled = means[FEDPC], means[VOTE], means["PC pooled (causal-learn)"]
        verdicts.append(
            {
                "setting": label,
                "p": p,
                "sites": K,
                "FedPC SHD": fed[0],
                "< site avg": fed[0] < means["PC per site (average)"][0],
                "< naive vote": fed[0] < means["naive vote of site DAGs"][0],
                "FedPC / pooled SHD": fed[0] / max(pooled[0], 1e-9),
                "<= 1.2x pooled": fed[0] <= 1.2 * pooled[0],
                "vote / pooled SHD": vote[0] / max(pooled[0], 1e-9),
                "FedPC / pooled time": fed[2] / pooled[2],
            }
        )
        print(f"  {label} p={p} K={K}: done", file=sys.stderr, flush=True)
    return pd.DataFrame(rows), verdicts


def linear_maker(weight_range: tuple[float, float]) -> Callable[[str, int, int, int], tuple]:
    def make(label: str, p: int, K: int, rep: int) -> tuple:
        seed = 1000 * p + 10 * K + rep
        dag = random_dag(p, 2.0, seed=seed)
        return dag, linear_gaussian(dag, N_SAMPLES, seed=seed, weight_range=weight_range)

    return make


def discrete_make(label: str, p: int, K: int, rep: int) -> tuple:
    seed = 7000 + 10 * K + rep
    n_vars = 8 + (rep % 5)  # 8..12 variables
    dag = random_dag(n_vars, 2.0, seed=seed, max_parents=3)
    X, _ = discrete_network(dag, N_SAMPLES, seed=seed, concentration=0.5)
    return dag, X


def tep_table() -> tuple[pd.DataFrame, bool]:
    """RCA verdicts after onset with the complete graph and with FedPC graphs learned from d00.dat."""
    from fedrca.application.evaluation import evaluate_run
    from fedrca.application.graph import learn_site_graph, site_frames
    from fedrca.application.site import prepare_site, run_pipeline
    from fedrca.config import load_config
    from fedrca.rca import InterdependencyGraph, build_engine
    from fedrca.rca.metrics import FaultEvent

    config = load_config(REPO / "config/tep.yaml")
    site = prepare_site(config, REPO / "data/tep/d00.dat")
    graphs = {"complete": (InterdependencyGraph.complete(config.plant_names), "-", 0.0)}
    for split in GRAPH_SPLITS:
        resolved, frames = site_frames(config, [REPO / "data/tep/d00.dat"], split)
        for mode in ("pooled-stats", "vote"):
            for orientation in ("skeleton", "cpdag", "dag"):
                started = time.perf_counter()
                graph, _, detail = learn_site_graph(resolved, frames, mode=mode, orientation=orientation)
                n_edges = len(detail["directed"]) + len(detail["undirected"])
                graphs[f"FedPC {mode}, d00 in {split} sites, {orientation}"] = (
                    graph,
                    f"{n_edges} variable edges, {len(graph.edges())} plant arcs",
                    time.perf_counter() - started,
                )
    rows, correct = [], {}
    for name, (graph, size, seconds) in graphs.items():
        row: dict = {"graph": name, "size": size, "learn s": round(seconds, 2)}
        correct[name] = {}
        for fault in [*TEP_FAULTS, "00"]:
            # the product's path with this graph: detectors, published flags and severity levels, the engine
            engine = build_engine(site.config, trained=False, nominal_flags=site.nominal_flags, graph=graph)
            rerun = run_pipeline(dataclasses.replace(site, engine=engine), REPO / f"data/tep/d{fault}_te.dat")
            if fault == "00":
                row["d00_te root verdicts"] = len([v for v in rerun.verdicts if v.root_cause])
                continue
            after = evaluate_run(rerun, [FaultEvent(160, rerun.n_samples, TEP_FAULTS[fault])]).after_onset
            correct[name][fault] = after["correct"]
            delay = "-" if after["rca_delay"] is None else after["rca_delay"]
            row[f"d{fault} ({TEP_FAULTS[fault]})"] = (
                f"{after['correct']}/{after['verdicts']} {after['majority'] or '-'} {delay}"
            )
        rows.append(row)
    defaults = [name for name in graphs if name.startswith("FedPC pooled-stats") and name.endswith("skeleton")]
    ok = bool(defaults) and all(correct[name][f] >= correct["complete"][f] for name in defaults for f in TEP_FAULTS)
    return pd.DataFrame(rows), ok


def noise_curve(settings: list[tuple[int, int]], reps: int | None = None) -> pd.DataFrame:
    """Mean SHD of FedPC with noised pooled statistics per epsilon (per site), next to the exact run and pooled PC."""
    from fedrca.privacy.accounting import gaussian_mu

    make = linear_maker((0.5, 2.0))
    rows = []
    for p, K in settings:
        shd: dict[str, list[float]] = {}
        for rep in range(REPS if reps is None else reps):
            dag, X = make("linear", p, K, rep)
            parts = split_sites(len(X), K, seed=1000 * p + 10 * K + rep)
            names = [f"x{j:03d}" for j in range(p)]
            for eps in (*EPSILONS, math.inf):
                mu = gaussian_mu(eps, 1e-5)
                sites = [FedPCSite(X[idx], names, seed=100 * rep + k) for k, idx in enumerate(parts)]
                result = PooledStatsServer(p, alpha=ALPHA, mu=mu).run([s.handle for s in sites])
                shd.setdefault(f"eps {eps:g}", []).append(score_structure(result.dag, dag).shd)
            pooled = pdag_to_dag(causallearn_pc(X, ALPHA, "fisher-z"))[0]
            shd.setdefault("PC pooled (causal-learn)", []).append(score_structure(pooled, dag).shd)
        rows.append({"p": p, "sites": K, **{k: float(np.mean(v)) for k, v in shd.items()}})
        print(f"  noise p={p} K={K}: done", file=sys.stderr, flush=True)
    return pd.DataFrame(rows)


def main() -> int:
    """Print the tables; non-zero when a target is missed."""
    warnings.filterwarnings("ignore")
    pd.set_option("display.width", 200)
    pd.set_option("display.max_columns", 20)
    started = time.perf_counter()
    linear_settings = [("linear", p, K) for p in LINEAR_VARIABLES for K in SITES]
    checks: list[bool] = []
    lin, lin_verdicts = table(linear_settings, linear_maker((0.5, 2.0)), "fisher-z", checks)
    same = f"{sum(checks)}/{len(checks)}"
    print(f"\n0. fedrca PC (FedPC, one site) on pooled data: skeleton == causal-learn PC-stable in {same}")
    print(f"\n1. Linear-Gaussian, weights ±U(0.5, 2), {N_SAMPLES} samples, mean of {REPS} graphs per setting")
    print(lin.round(3).to_string(index=False))
    print(pd.DataFrame(lin_verdicts).round(2).to_string(index=False))

    weak, weak_verdicts = table(linear_settings, linear_maker((0.3, 1.0)), "fisher-z", reps=SENSITIVITY_REPS)
    print("\n2. Linear-Gaussian, weights ±U(0.3, 1.0) (sensitivity, no target), mean of 3 graphs per setting")
    print(weak.round(3).to_string(index=False))
    print(pd.DataFrame(weak_verdicts).round(2).to_string(index=False))

    disc, disc_verdicts = table([("discrete", 0, K) for K in SITES], discrete_make, "g-square")
    print(f"\n3. Discrete Bayesian networks, 8-12 binary/ternary variables, G-square, mean of {REPS} networks")
    print(disc.drop(columns=["p"]).round(3).to_string(index=False))
    print(pd.DataFrame(disc_verdicts).drop(columns=["p"]).round(2).to_string(index=False))

    tep, tep_ok = tep_table()
    print("\n4. TEP (Theta = 0): RCA verdicts after the onset naming the true root / all, majority, delay (samples)")
    print(tep.to_string(index=False))

    curve = noise_curve(list(NOISE_SETTINGS))
    print(f"\n5. Noised pooled statistics: mean SHD over epsilon per site (delta 1e-5, clip 1.5), {REPS} graphs per "
          "setting")  # fmt: skip
    print("   ('eps inf' = the exact statistics)")
    print(curve.round(2).to_string(index=False))

    verdicts = lin_verdicts + disc_verdicts
    quality = all(v["< site avg"] and v["< naive vote"] and v["<= 1.2x pooled"] for v in verdicts)
    speed = all(v["FedPC / pooled time"] <= 1.0 for v in lin_verdicts if v["p"] == 50)
    results = {
        "SHD below site average and naive vote, within 20 % of pooled PC": quality,
        "FedPC at least as fast as pooled causal-learn PC at p = 50": speed,
        "TEP: FedPC graph names the root at least as often as the complete graph": tep_ok,
        "fedrca PC == causal-learn PC skeleton": all(checks),
    }
    for name, good in results.items():
        print(f"   {'met' if good else 'MISSED'}: {name}")
    missed = [name for name, good in results.items() if not good]
    print(f"\nbench_fedpc: {'all targets met' if not missed else 'missed ' + str(len(missed))} "
          f"({time.perf_counter() - started:.0f} s)")  # fmt: skip
    return 0 if not missed else 1


if __name__ == "__main__":
    sys.exit(main())
