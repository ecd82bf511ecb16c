"""Candidates for the learned cross-plant part, measured on the fault library (issue 22; docs/rca.md).

Each candidate gives every plant an augmented flag Z_a that should mean "explained by the
other plants" (P1's (1, 0)), or gives the engine a graph; the same RCA engine (the
shipped ``config/tep.yaml`` settings: complete graph, unseen entries feed and stripper)
then reads the flag pairs (Z_c, Z_a) (``trained`` flag model when Z_a is its own flag).
Candidates (``bench/rca_diagnosis.py`` builds the flags):

* ``none``: Z_a = Z_c (the proprietary detector alone);
* ``P1 augmentation``: the product's trained Theta (``fedrca train``, config/tep.yaml's
  private moments estimator);
* ``exchange``: P1's server term at run time with the other plants' *true* states, no
  privacy (an upper bound for an incident-time exchange of states);
* ``decoupled``: a plant's innovation without the directions the other plants push (no exchange);
* ``inlet``: each plant's sensors explained by its own inlet sensors (declared per plant);
* graphs with Z_a = Z_c: the learned graph (the server artifact's Wald test at the shipped
  budget), the declared flowsheet (``fedrca.datasets.tep.TEP_FLOWSHEET``).

Per candidate: on the faulty rows where a plant's proprietary flag is on, the share
where Z_a is off ((1, 0): explained), for the plants that are the IDV's root (should be
low) and for those that only show its effect (should be high); the FAR of Z_a on the FAR
seeds; and the RCA's majority root correct over the detected runs (as docs/faults.md).

    python bench/bench_rca_candidates.py                  # the library of bench/tep_library.py (cached)
    python bench/run.py --smoke rca_candidates            # tiny
"""

from __future__ import annotations

import argparse
import math
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_faults as bf
import rca_diagnosis as dx
from fedrca.config import load_config
from fedrca.datasets.tep import TEP_FLOWSHEET
from fedrca.rca.engine import build_engine
from fedrca.rca.graph import InterdependencyGraph
from tep_library import ONSET_SAMPLE, Library

REPO = Path(__file__).resolve().parents[1]
#: bench/run.py --smoke
SMOKE: dict[str, Any] = {}


def majority(verdicts: list[Any], onset: int) -> str | None:
    counts = Counter(v.root_cause for v in verdicts if v.seq >= onset and v.root_cause is not None)
    return counts.most_common(1)[0][0] if counts else None


def main(argv: list[str] | None = None, smoke: bool = False) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", default=str(REPO / "config" / "tep.yaml"))
    parser.add_argument("--available", action="store_true", help="use only the cached fault runs")
    parser.add_argument("--smoke", action="store_true", help="tiny library (16-h runs, IDV 4 and 6)")
    args = parser.parse_args([] if argv is None else argv)
    started = time.perf_counter()
    library = Library()
    if smoke or args.smoke:
        library = Library((100,), (200,), (300,), (4, 6), hours=16.0)
    train, far, faults = bf.load_library(library, available=args.available)
    config = bf.without_constant_sensors(load_config(args.config), train)
    print(f"library: {len(train)} training rows, {len(far)} FAR runs, {len(faults)} fault runs", flush=True)

    from fedrca.application.site import prepare_site, run_pipeline
    from fedrca.application.training import train_site
    from fedrca.contracts import SERVER, load_artifacts

    site = prepare_site(config, train)
    with tempfile.TemporaryDirectory() as params:
        train_site(config, train, params, resume=False, progress=None)
        trained = prepare_site(config, train, params_dir=params)
        learned = InterdependencyGraph.from_server_artifact(load_artifacts(params)[SERVER])
    builder = dx.CandidateFlags(site, train)
    plants = list(site.config.plant_names)

    def published(s: Any, frame: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
        run = run_pipeline(s, frame)
        z = np.stack([np.column_stack([run.results[p].zc, run.results[p].za]) for p in plants], axis=1)
        return z.astype(np.int64), np.column_stack([run.results[p].level for p in plants])

    flags: dict[str, dict[Any, np.ndarray]] = {k: {} for k in ("none", "P1 augmentation", *dx.CandidateFlags.KINDS)}
    levels: dict[Any, np.ndarray] = {}
    frames = {("far", s): f for s, f in far.items()} | {k: f for k, f in faults.items()}
    for key, frame in frames.items():
        z, lv = published(site, frame)
        levels[key] = lv
        flags["none"][key] = z
        flags["P1 augmentation"][key] = published(trained, frame)[0]
        for kind, za in builder.flags(frame).items():
            flags[kind][key] = np.stack([z[:, :, 0], za.astype(np.int64)], axis=2)
    print(f"flags of every candidate: {time.perf_counter() - started:.0f} s", flush=True)

    graphs = {
        "complete (shipped)": None,
        "learned at the shipped budget": learned,
        "declared flowsheet": InterdependencyGraph.from_edges(plants, TEP_FLOWSHEET),
    }
    rows = []
    settings = config.rca.model_copy(update={"graph": config.rca.graph.model_copy(update={"source": "complete"})})
    for name, per_run in flags.items():
        for graph_name, graph in graphs.items():
            if name != "none" and graph is not None:
                continue
            own = name != "none"
            nominal = {p: np.concatenate([per_run[("far", s)][:, m] for s in far]) for m, p in enumerate(plants)}
            engine = build_engine(
                site.config, trained=own, nominal_flags=nominal, graph=graph, settings=settings, epsilon=math.inf
            )
            correct = detected = 0
            explained = {"root": [0, 0], "effect": [0, 0]}
            for (idv, seed), z in ((k, v) for k, v in per_run.items() if k[0] != "far"):
                truth = bf.TRUTH.get(idv)
                if truth is None:
                    continue
                for m, p in enumerate(plants):
                    on = z[ONSET_SAMPLE:, m, 0] == 1
                    cell = explained["root" if p in truth else "effect"]
                    cell[0] += int(on.sum())
                    cell[1] += int((on & (z[ONSET_SAMPLE:, m, 1] == 0)).sum())
                if z.any(axis=2).any(axis=1)[ONSET_SAMPLE:].mean() < bf.DETECTED:
                    continue
                engine.reset()
                verdicts = engine.run(np.arange(len(z)), z, levels=levels[(idv, seed)])
                detected += 1
                correct += majority(verdicts, ONSET_SAMPLE) in truth
            far_za = float(np.mean([per_run[("far", s)][:, :, 1].any(axis=1).mean() for s in far]))
            rows.append(
                {
                    "candidate": name,
                    "graph": graph_name,
                    "(1, 0) on effects": explained["effect"][1] / max(explained["effect"][0], 1),
                    "(1, 0) on roots": explained["root"][1] / max(explained["root"][0], 1),
                    "FAR of Z_a": far_za,
                    "majority root correct": f"{correct}/{detected} ({correct / max(detected, 1):.2f})",
                }
            )
    table = pd.DataFrame(rows)
    pd.set_option("display.width", 200)
    print("\nCandidates on the fault library (RCA: config/tep.yaml's engine; detected runs with a unit truth)")
    print(table.to_string(index=False, float_format=lambda x: f"{x:.3f}"))
    print(f"\nbench_rca_candidates: done ({time.perf_counter() - started:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
