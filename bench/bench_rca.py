"""RCA acceptance tables (issue 4) and the cost of the streaming engine.

1. Nonlinear two-plant benchmark (plant1 drives plant2, 100 injected root-cause
   events of 10 samples in 6000): RCA precision / recall / F1 / accuracy / delay
   for flag epsilon in {1, 2, 4, inf}, with trained parameters (``fedrca.training``)
   and without (Theta = 0), with the graph from the config and the learned one.
   Peer: the published result on this setting (P1: precision 0.73, recall 0.57, F1 0.64).
2. ARL0 / ARL1 / FAR of the augmented detector next to the proprietary-only one
   (and of the RCA's root verdicts), same data, no flag privacy.
3. Four-plant chain 1 -> 2 -> 3 -> 4, roots injected at each plant in turn: accuracy.
4. TEP (detectors fitted and trained on d00.dat with config/tep.yaml): per fault
   file, the verdicts issued after onset, how many name the true root, the RCA delay.
   Then the evidence on fault 01 (docs/rca.md): when each plant starts alarming, and
   what the same published flags give with the declared TEP flowsheet, with the feed's
   unseen entry (``rca.unobserved_entry``), and with a material-flow-only graph that
   leaves out the reactor -> feed control loops (not a true declaration: shown to make
   plain what naming the feed would take).
5. Cost per row of the streaming engine (``RCAEngine.update``) and of the batch
   path (``RCAEngine.run``), next to the look-up table applied per row (the
   cheapest possible RCA, P1's method) measured in the same run.

Targets (exit 1 when missed): two-plant F1 >= 0.80 without flag privacy (trained,
config graph); chain accuracy >= 0.9 (trained, config graph); every TEP fault's
majority root after onset correct (fault 01: the feed or the stripper, :data:`TEP_ACCEPTED`).
"""

from __future__ import annotations

import dataclasses
import math
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd

from fedrca.application.evaluation import evaluate_run
from fedrca.application.site import PipelineRun, prepare_site, run_pipeline
from fedrca.application.synthetic import run_synthetic
from fedrca.config import RCASettings, load_config
from fedrca.datasets import chain_graph, nonlinear_network, nonlinear_two_plant
from fedrca.datasets.tep import TEP_FLOWSHEET, TEP_MATERIAL_FLOW
from fedrca.rca import InterdependencyGraph, build_engine, engine_for, lookup
from fedrca.rca.metrics import FaultEvent

REPO = Path(__file__).resolve().parents[1]
EPSILONS = [1.0, 2.0, 4.0, math.inf]
TEP_FAULTS = {"01": "feed", "04": "reactor", "05": "separator", "06": "feed"}
#: roots accepted besides the true one: fault 01's stream-4 step enters through the stripper, whose
#: sensors do not analyse stream 4, so the flags cannot tell the feed from the stripper (docs/rca.md)
TEP_ACCEPTED = {"01": ("feed", "stripper")}
PUBLISHED = {"precision": 0.73, "recall": 0.57, "F1": 0.64}
TWO_PLANT_SIZES = {"n_train": 3000, "n_test": 6000, "n_events": 100}
CHAIN_SIZES = {"n_train": 4000, "n_test": 8000, "n_events": 100}
SPEED_PLANTS = (2, 5, 20)
SPEED_ROWS = 20_000
SMOKE = {  # bench/run.py --smoke
    "EPSILONS": [2.0, math.inf],
    "TWO_PLANT_SIZES": {"n_train": 800, "n_test": 800, "n_events": 4},
    "CHAIN_SIZES": {"n_train": 800, "n_test": 800, "n_events": 4},
    "SPEED_PLANTS": (2,),
    "SPEED_ROWS": 400,
    "TEP_FAULTS": {"04": "reactor"},
}


def chain4(**kw):
    return nonlinear_network(chain_graph(4), **kw)


def synthetic_row(label: str, result, eps: float) -> dict:
    s = result.evaluation.rca
    return {
        "setting": label,
        "graph": result.run.site.graph.source,
        "epsilon": eps,
        "precision": s.precision,
        "recall": s.recall,
        "F1": s.f1,
        "accuracy": s.accuracy,
        "delay": s.delay,
        "events": s.n_events,
    }


def two_plant(trained: bool) -> tuple[list[dict], dict]:
    rows, arl = [], {}
    variants = [("trained", True), ("Theta = 0", False)] if trained else [("Theta = 0", False)]
    for label, train in variants:
        for graph in (True, False):
            if not graph and not train:
                continue  # without training there is no learned graph (complete graph instead)
            for eps in EPSILONS:
                with tempfile.TemporaryDirectory() as tmp:
                    result = run_synthetic(
                        nonlinear_two_plant,
                        **TWO_PLANT_SIZES,
                        epsilon=eps,
                        graph=graph,
                        params_dir=tmp if train else None,
                        train=train,
                    )
                rows.append(synthetic_row(label, result, eps))
                if math.isinf(eps) and graph:
                    arl[label] = result.evaluation.detection
                print(f"  two-plant {label}, graph {rows[-1]['graph']}, eps {eps}: done", file=sys.stderr)
    return rows, arl


def chain(trained: bool) -> list[dict]:
    rows = []
    variants = [("trained", True), ("Theta = 0", False)] if trained else [("Theta = 0", False)]
    # the cost of rca.unobserved_entry where it is not needed: every plant declared unseen
    unseen = RCASettings(unobserved_entry=["plant1", "plant2", "plant3", "plant4"])
    runs = [(label, train, graph, None) for label, train in variants for graph in (True, False) if graph or train]
    for label, train, graph, settings in [*runs, ("Theta = 0, all unseen", False, True, unseen)]:
        with tempfile.TemporaryDirectory() as tmp:
            result = run_synthetic(
                chain4, **CHAIN_SIZES, graph=graph, params_dir=tmp if train else None,
                train=train, settings=settings,
            )  # fmt: skip
        rows.append(synthetic_row(label, result, math.inf))
        per_root = {}
        for e in result.evaluation.rca.per_event:
            per_root.setdefault(e["root"], []).append(e["correct"])
        rows[-1].update({f"acc {r}": float(np.mean(v)) for r, v in sorted(per_root.items())})
        print(f"  chain {label}, graph {rows[-1]['graph']}: done", file=sys.stderr)
    return rows


#: Graph / setting variants of the fault-01 evidence table (name, edges, rca settings)
TEP_VARIANTS = [
    ("flowsheet", TEP_FLOWSHEET, {}),
    ("flowsheet + unseen feed", TEP_FLOWSHEET, {"unobserved_entry": ["feed"]}),
    ("material only + unseen feed", TEP_MATERIAL_FLOW, {"unobserved_entry": ["feed"]}),
]


def onset_rows(label: str, fault: str, run: PipelineRun, start: int = 160) -> dict:
    """First Z_c alarm per plant after the fault onset (samples after onset) and its alarm share early / late."""
    flags = run.true_flags()[:, :, 0]
    row: dict = {"parameters": label, "fault": f"d{fault}_te"}
    for m, plant in enumerate(run.plants):
        on = np.flatnonzero(flags[start:, m])
        first = f"+{on[0]}" if len(on) else "-"
        row[plant] = f"{first} ({flags[start : start + 100, m].mean():.2f}/{flags[start + 100 :, m].mean():.2f})"
    return row


def variant_rows(label: str, site, runs: dict[str, PipelineRun]) -> list[dict]:
    rows = []
    for name, edges, settings in TEP_VARIANTS:
        graph = InterdependencyGraph.from_edges(site.config.plant_names, edges)
        row: dict = {"parameters": label, "variant": name}
        for fault, run in runs.items():
            engine = build_engine(
                site.config,
                trained=site.params_version != "proprietary",
                nominal_flags=site.nominal_flags,
                graph=graph,
                settings=RCASettings(**settings),
            )
            verdicts = engine.run(np.arange(run.n_samples), run.published())
            rerun = PipelineRun(dataclasses.replace(site, engine=engine), run.results, verdicts)
            after = evaluate_run(rerun, [FaultEvent(160, run.n_samples, TEP_FAULTS[fault])]).after_onset
            delay = "-" if after["rca_delay"] is None else after["rca_delay"]
            row[f"d{fault}"] = f"{after['correct']}/{after['verdicts']} ({after['majority'] or '-'}, {delay})"
        rows.append(row)
    return rows


def tep(trained: bool) -> tuple[list[dict], bool, list[dict], list[dict]]:
    config = load_config(REPO / "config/tep.yaml")
    rows, all_ok, onsets, evidence = [], True, [], []
    variants = [("trained", True), ("Theta = 0", False)] if trained else [("Theta = 0", False)]
    for label, train in variants:
        with tempfile.TemporaryDirectory() as tmp:
            params = None
            if train:
                from fedrca.application.training import train_site
                from fedrca.datasets.loader import load_frame

                train_site(config, load_frame(config, REPO / "data/tep/d00.dat"), tmp, resume=False, progress=None)
                params = tmp
            site = prepare_site(config, REPO / "data/tep/d00.dat", params_dir=params)
            runs = {}
            for fault, root in TEP_FAULTS.items():
                run = run_pipeline(site, REPO / f"data/tep/d{fault}_te.dat")
                runs[fault] = run
                if train or not trained:
                    onsets.append(onset_rows(label, fault, run))
                ev = evaluate_run(run, [FaultEvent(160, run.n_samples, root)])
                after = ev.after_onset
                accepted = TEP_ACCEPTED.get(fault, (root,))
                held = sum(n for p, n in after["named"].items() if p in accepted)
                ok = after["majority"] in accepted and held > after["verdicts"] / 2
                if train or not trained:
                    all_ok &= ok
                rows.append(
                    {
                        "parameters": label,
                        "graph": site.graph.source,
                        "fault": f"d{fault}_te",
                        "true root": root,
                        "verdicts after onset": after["verdicts"],
                        "naming the root": after["correct"],
                        "share": after["share_correct"],
                        "majority": after["majority"],
                        "RCA delay": after["rca_delay"],
                        "ARL1 Z_c": ev.detection["proprietary (Z_c)"].arl1,
                        "ok": "yes" if ok else "NO",
                    }
                )
            evidence += variant_rows(label, site, runs)
            nominal = run_pipeline(site, REPO / "data/tep/d00_te.dat")
            rows.append(
                {
                    "parameters": label,
                    "graph": site.graph.source,
                    "fault": "d00_te (nominal)",
                    "true root": "-",
                    "verdicts after onset": len(nominal.verdicts),
                    "naming the root": 0,
                    "share": float("nan"),
                    "majority": ",".join(sorted({v.root_cause or v.outcome for v in nominal.verdicts})) or "-",
                    "RCA delay": None,
                    "ARL1 Z_c": float("nan"),
                    "ok": "-",
                }
            )
            print(f"  TEP {label}: done", file=sys.stderr)
    return rows, all_ok, onsets, evidence


def speed() -> list[dict]:
    rng = np.random.default_rng(0)
    rows = []
    for M in SPEED_PLANTS:
        plants = [f"p{m}" for m in range(M)]
        graph = InterdependencyGraph.from_edges(plants, [(plants[m], plants[m + 1]) for m in range(M - 1)])
        T = SPEED_ROWS if M <= 5 else SPEED_ROWS // 4
        truth = np.zeros((T, M, 2), dtype=np.int64)
        for start in range(100, T - 60, 200):  # an event every 200 rows at a rotating root
            k = (start // 200) % M
            truth[start : start + 40, k:, 0] = 1
            truth[start : start + 40, k, 1] = 1
        flags = truth ^ (rng.random(truth.shape) < 0.05)
        engine = engine_for(plants, graph, epsilon=2.0, trained=True)
        started = time.perf_counter()
        engine.run(np.arange(T), flags)
        batch = (time.perf_counter() - started) / T
        engine = engine_for(plants, graph, epsilon=2.0, trained=True)
        rows_dicts = [{p: (int(flags[t, m, 0]), int(flags[t, m, 1])) for m, p in enumerate(plants)} for t in range(T)]
        started = time.perf_counter()
        for t in range(T):
            engine.update(t, rows_dicts[t])
        streaming = (time.perf_counter() - started) / T
        pairs = [tuple(map(tuple, flags[t, :2])) for t in range(T)]
        started = time.perf_counter()
        for c1, c2 in pairs:
            lookup(c1, c2)
        table = (time.perf_counter() - started) / T
        rows.append(
            {
                "plants": M,
                "rows": T,
                "engine.update us/row": streaming * 1e6,
                "engine.run us/row": batch * 1e6,
                "rows/s (update)": 1.0 / streaming,
                "peer: table lookup us/row (2 plants)": table * 1e6,
                "update / table": streaming / table,
            }
        )
    return rows


def main() -> int:
    pd.set_option("display.width", 200)
    pd.set_option("display.max_columns", 20)
    trained = True  # fedrca.training is part of the package
    started = time.perf_counter()
    two, arl = two_plant(trained)
    table2 = pd.DataFrame(two)
    print("\n1. Nonlinear two-plant benchmark, 100 root-cause events (P1 published: P 0.73, R 0.57, F1 0.64)")
    print(table2.round(3).to_string(index=False))
    key = "trained" if trained else "Theta = 0"
    best = table2[(table2.setting == key) & (table2.graph == "config") & (np.isinf(table2.epsilon))]
    f1 = float(best.F1.iloc[0])
    print(f"   F1 without flag privacy ({key}, config graph): {f1:.3f}  (target >= 0.80; published {PUBLISHED['F1']})")

    print("\n2. Detection on the same data, no flag privacy (ARL in samples; proprietary = proprietary-only peer)")
    arl_rows = [
        {"parameters": label, "alarm series": name, **{k: v for k, v in s.as_dict().items() if k != "in_control"}}
        for label, series in arl.items()
        for name, s in series.items()
    ]
    print(pd.DataFrame(arl_rows).round(4).to_string(index=False))

    chain_rows = chain(trained)
    print("\n3. Four-plant chain 1 -> 2 -> 3 -> 4, 100 events with roots at each plant in turn, no flag privacy")
    table3 = pd.DataFrame(chain_rows)
    print(table3.round(3).to_string(index=False))
    acc = float(table3[(table3.setting == key) & (table3.graph == "config")].accuracy.iloc[0])
    print(f"   accuracy ({key}, config graph): {acc:.3f}  (target >= 0.9)")

    tep_rows, tep_ok, onsets, evidence = tep(trained)
    print("\n4. TEP, fault from sample 160 (verdicts after onset naming the true root; delay in samples of 3 min)")
    print(pd.DataFrame(tep_rows).round(3).to_string(index=False))
    print("\n   First proprietary alarm per plant, samples after onset (alarm share in the first 100 / the rest)")
    print(pd.DataFrame(onsets).to_string(index=False))
    print("\n   The same published flags, other graphs / settings: correct / verdicts after onset (majority, delay)")
    print(pd.DataFrame(evidence).to_string(index=False))

    print("\n5. Cost of the engine (published flags with epsilon 2, chain graph)")
    print(pd.DataFrame(speed()).round(2).to_string(index=False))

    checks = {"two-plant F1 >= 0.80": f1 >= 0.8, "chain accuracy >= 0.9": acc >= 0.9, "TEP majority root": tep_ok}
    missed = [name for name, good in checks.items() if not good]
    verdict = "all targets met" if not missed else "missed: " + ", ".join(missed)
    print(f"\nbench_rca: {verdict} ({time.perf_counter() - started:.0f} s)")
    return 0 if not missed else 1


if __name__ == "__main__":
    sys.exit(main())
