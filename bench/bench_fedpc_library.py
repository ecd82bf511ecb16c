"""FedPC's plant graph in the RCA on the simulated TEP fault library (issue 23), per IDV, next to the complete graph.

Sites: the nominal training runs of the library (``bench/tep_library.py``, seeds 200-202,
48 h each), one site per run (3 sites of 960 rows) and each run cut in two (6 sites); the
variables are config/tep.yaml's plants' sensor and input columns (less the ones constant
in the nominal runs, sensors as ``bench_faults`` drops them, and inputs). Graphs: the
complete graph (the engine's default without a trained server), FedPC with pooled
statistics (the ``fedrca graph`` default) and FedPC's vote, each with the default
``skeleton`` orientation (every variable edge both ways) and, with 3 sites, ``cpdag``
(PC's directions kept). The detectors (``bench_faults``' variant Theta = 0, flag epsilon
inf) are fitted on the training runs and run once per fault run; every graph's engine
reads the same published flags and severity levels.

Per IDV (truth: ``bench_faults.TRUTH``; IDVs without a unit are listed, not scored):
verdicts from the onset on naming a true root / all root verdicts, summed over the fault
seeds, and the seeds whose majority root is true. Root verdicts on the nominal FAR runs.

Target (exit 1 when missed): for every scored IDV, FedPC (pooled statistics, skeleton
orientation, both site splits) names a true root at least as often as the complete graph. Runs are read from the
cache, never generated (``python bench/tep_library.py`` makes them); missing ones are left out.

    python bench/run.py fedpc_library
    python bench/run.py --smoke fedpc_library     # tiny library, generated when missing (make test)
"""

from __future__ import annotations

import sys
import time
from collections import Counter
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_faults import IDV_NAMES, TRUTH, load_library, without_constant_sensors
from fedrca.application.graph import learn_site_graph
from fedrca.application.site import prepare_site, run_pipeline
from fedrca.config import load_config
from fedrca.rca import InterdependencyGraph, build_engine
from tep_library import ONSET_SAMPLE, Library

REPO = Path(__file__).resolve().parents[1]
COMPLETE = "complete"


def without_constant_inputs(config, nominal: pd.DataFrame):
    """``config`` without the inputs that never change in the nominal runs (the valves the simulator's control
    holds still: no CI test can use a constant column)."""
    X = nominal.to_numpy(dtype=np.float64)
    std, mean = X.std(axis=0), X.mean(axis=0)
    # bench_faults.without_constant_sensors' criterion (fedrca.datasets.nominal.check_nominal)
    constant = {str(c) for c, flat in zip(nominal.columns, (std == 0) | (std <= 1e-12 * np.abs(mean))) if flat}
    plants = [p.model_copy(update={"inputs": [u for u in p.inputs if u not in constant]}) for p in config.plants]
    return config.model_copy(update={"plants": plants})


def graphs_from_training(config, train: pd.DataFrame) -> tuple[dict[str, InterdependencyGraph], pd.DataFrame]:
    """The graphs to compare and a description (edges, learning time) of each."""
    segments = train.attrs["segments"]
    bounds = np.concatenate([[0], np.cumsum(segments)])
    runs = [train.iloc[bounds[k] : bounds[k + 1]] for k in range(len(segments))]
    graphs = {COMPLETE: InterdependencyGraph.complete(config.plant_names)}
    rows = [{"graph": COMPLETE, "variable edges": "-", "plant arcs": len(graphs[COMPLETE].edges()), "learn s": 0.0}]
    for pieces in (1, 2):
        frames = []
        for k, run in enumerate(runs):
            cut = np.linspace(0, len(run), pieces + 1).astype(int)
            frames += [(f"run {k}[{cut[j]}:{cut[j + 1]}]", run.iloc[cut[j] : cut[j + 1]]) for j in range(pieces)]
        for mode in ("pooled-stats", "vote"):
            for orientation in ("skeleton", "cpdag") if pieces == 1 else ("skeleton",):
                started = time.perf_counter()
                graph, _, detail = learn_site_graph(config, frames, mode=mode, orientation=orientation)
                name = f"FedPC {mode}, {len(frames)} sites, {orientation}"
                graphs[name] = graph
                rows.append(
                    {
                        "graph": name,
                        "variable edges": len(detail["directed"]) + len(detail["undirected"]),
                        "plant arcs": len(graph.edges()),
                        "learn s": round(time.perf_counter() - started, 2),
                    }
                )
    return graphs, pd.DataFrame(rows)


def verdicts_per_graph(site, frame: pd.DataFrame, graphs: dict[str, InterdependencyGraph]) -> dict[str, list]:
    """Run the detectors once; each graph's engine over the same published flags: (seq, root) per verdict."""
    run = run_pipeline(site, frame)
    config = site.config
    published = run.published()
    seqs = np.arange(run.n_samples)
    levels = np.column_stack([run.results[p].level_pub for p in config.plant_names]) if config.severity_levels else None
    out = {}
    for name, graph in graphs.items():
        engine = build_engine(config, trained=False, nominal_flags=site.nominal_flags, graph=graph)
        verdicts = engine.run(seqs, published, ts=seqs * config.dataset.sample_seconds, levels=levels)
        out[name] = [(v.seq, v.root_cause) for v in verdicts]
    return out


#: bench/run.py --smoke: 16-h runs (two training seeds: FedPC's pooled statistics need two sites), IDV 4 and 6,
#: generated when missing
SMOKE_LIBRARY = Library(fault_seeds=(100,), train_seeds=(200, 201), far_seeds=(300,), idvs=(4, 6), hours=16.0)


def main(smoke: bool = False) -> int:
    """Print the per-IDV table; non-zero when FedPC (pooled statistics) names a true root less often somewhere."""
    started = time.perf_counter()
    pd.set_option("display.width", 250)
    pd.set_option("display.max_columns", 30)
    if smoke:
        train, far, faults = load_library(SMOKE_LIBRARY, generate=True)
    else:
        train, far, faults = load_library(Library(), generate=False, available=True)
    config = without_constant_inputs(without_constant_sensors(load_config(REPO / "config/tep.yaml"), train), train)
    graphs, described = graphs_from_training(config, train)
    print(f"\nGraphs learned from the {len(train.attrs['segments'])} nominal training runs ({len(train)} rows):")
    print(described.to_string(index=False))
    site = prepare_site(config, train)
    correct: dict[str, Counter] = {name: Counter() for name in graphs}
    named: dict[str, Counter] = {name: Counter() for name in graphs}
    majority: dict[str, Counter] = {name: Counter() for name in graphs}
    seeds: Counter = Counter()
    for (idv, _seed), frame in sorted(faults.items()):
        truth = TRUTH.get(idv)
        seeds[idv] += 1
        for name, verdicts in verdicts_per_graph(site, frame, graphs).items():
            late = [root for seq, root in verdicts if seq >= ONSET_SAMPLE and root is not None]
            named[name][idv] += len(late)
            if truth:
                correct[name][idv] += sum(root in truth for root in late)
                top = Counter(late).most_common(1)
                majority[name][idv] += int(bool(top) and top[0][0] in truth)
    far_roots = {name: 0 for name in graphs}
    for frame in far.values():
        for name, verdicts in verdicts_per_graph(site, frame, graphs).items():
            far_roots[name] += sum(root is not None for _, root in verdicts)
    rows = []
    for idv in sorted(seeds):
        truth = TRUTH.get(idv)
        row = {"IDV": idv, "disturbance": IDV_NAMES.get(idv, ""), "truth": "/".join(sorted(truth)) if truth else "-",
               "seeds": seeds[idv]}  # fmt: skip
        for name in graphs:
            row[name] = (
                f"{correct[name][idv]}/{named[name][idv]} ({majority[name][idv]})" if truth else f"-/{named[name][idv]}"
            )
        rows.append(row)
    print("\nVerdicts from the onset naming a true root / all root verdicts (seeds with a true majority), "
          "summed over the fault seeds; Theta = 0, flag epsilon inf")  # fmt: skip
    print(pd.DataFrame(rows).to_string(index=False))
    print("\nRoot verdicts on the nominal FAR runs: " + ", ".join(f"{n}: {c}" for n, c in far_roots.items()))
    scored = [idv for idv in seeds if TRUTH.get(idv)]
    pooled = [name for name in graphs if "pooled-stats" in name and name.endswith("skeleton")]
    worse = {
        name: [idv for idv in scored if correct[name][idv] < correct[COMPLETE][idv]]
        for name in graphs
        if name != COMPLETE
    }
    for name, idvs in worse.items():
        better = [idv for idv in scored if correct[name][idv] > correct[COMPLETE][idv]]
        print(f"   {name}: fewer true-root verdicts than the complete graph on IDV {idvs or 'none'}; more on "
              f"{better or 'none'}")  # fmt: skip
    ok = bool(pooled) and all(not worse[name] for name in pooled)
    verdict = "met" if ok else "MISSED"
    print(f"   {verdict}: FedPC (pooled statistics, skeleton) at least as good as the complete graph per IDV")
    print(
        f"\nbench_fedpc_library: {len(faults)} fault runs, {len(far)} FAR runs ({time.perf_counter() - started:.0f} s)"
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
