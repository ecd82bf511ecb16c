"""Fault-library benchmark (issues 13 and 22): detection and root cause on every TEP disturbance, with peers.

Library (``bench/tep_library.py``, cached in ``~/.cache/fedrca/tep-library``): the
revised TEP model under its decentralised control (``fedrca.connectors.simulator``),
IDV 1..28 x fault seeds (48 h, onset at 8 h = row 160 of 3-minute samples), nominal
training seeds (detectors are fitted, and Theta trained, on these only) and nominal
FAR seeds. Every seed is >= 100: seeds below 100 are for the independent check.

Monitors, measured in the same run on the same rows:

* **fedrca** (``config/tep.yaml`` as shipped: trained parameters, the site's
  cross-plant model) at flag epsilon inf and 2;
* **learned part off** (ablation): the same site untrained (Theta = 0), its configured
  structure kept;
* **learned graph**: the trained site with the graph its training learns (the server
  artifact's Wald test) instead of the configured one (``config/tep.yaml``: complete);
* **cross-plant off** (ablation): the same detectors and engine with the whole
  cross-plant part switched off (:func:`cross_plant_off`: Theta = 0, no graph edges, no
  unseen entries: the engine reasons on each plant's own flags), at epsilon inf and 2;
* **first alarm** (the simplest thing a user could do): on fedrca's own published
  flags, the plant whose alarm (held 3 rows) starts first after the onset (ties: the
  higher published severity over those rows, then the configuration's order);
* **centralised reference** (all raw data, no privacy): PCA on the pooled nominal
  data (all 52 variables, 90 % variance), and while it alarms, the unit with the
  largest reconstruction-based contribution (Alcala & Qin 2009) summed over its
  variables; its detection is the PCA T^2 + SPE monitor at 99 % limits (F,
  Jackson-Mudholkar).

Every fedrca figure is given for detectors trained on the 2,880 nominal rows of the
training seeds and on their first 500 rows (25 h, as long as the recorded d00.dat).

Per run (IDV x seed): **FDR** (share of rows from the onset with an alarm: any plant,
Z_c or Z_a), **delay** (rows to the first alarm that lasts 3 rows), **detected**
(FDR >= 0.5), **root** (majority among the verdicts naming a root from the onset
on), **correct** (the root is in the IDV's truth set), **candidates** (the plants
shown next to the root in at least half of those verdicts: their number, and whether
the truth is among them), **RCA delay** (rows to the first verdict naming a true
root). RCA is scored over the runs each monitor detects; the undetected are listed
apart. **FAR** on the nominal FAR seeds. **ROC points**: every monitor's FDR when
its alarm threshold is moved so that its FAR on the FAR seeds equals PCA's own, and
equals 2 %.

    python bench/run.py faults                      # in make bench / make docs-figures: writes docs/faults.md
    python bench/bench_faults.py --out -            # print only
    python bench/bench_faults.py --idvs 1,4 --fault-seeds 100 --rows 2880 --out -     # quick
    python bench/bench_faults.py --smoke            # tiny: 2 IDVs, 1 seed, short runs (make test)
    python bench/bench_faults.py --save-outputs out.pkl                 # also keep every monitor's outputs
    python bench/bench_faults.py --load-outputs out.pkl --calibration config/tep.calibration.json
                                                    # fit, score and write again from them (no monitor run)
    python bench/bench_faults.py --load-outputs out.pkl --compare-families plants --out -
                                                    # the per-plant maps (family plants) by the same nested
                                                    # cross-validation, next to the shipped family

Runs missing from the cache are generated first (one process, about 15 s of CPU per
48-h run). The bench reports; the acceptance bars of issue 22 are printed next to the
figures (exit 0 when the library is complete, even when a bar is missed: the table
is the record).
"""

from __future__ import annotations

import argparse
import math
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from scipy import stats

sys.path.insert(0, str(Path(__file__).resolve().parent))

from fedrca.config import SiteConfig, load_config
from fedrca.connectors.simulator import SimulatedRun, SimulationSpec, cached_run
from fedrca.datasets.tep import TEP_COLUMNS, TEP_FLOWSHEET, load_tep
from fedrca.rca.calibration import FAMILIES
from tep_library import FAR_SEEDS, IDVS, ONSET_SAMPLE, RCA_FAULT_SEEDS, TRAIN_SEEDS, Library

REPO = Path(__file__).resolve().parents[1]

#: Origin unit of every IDV (config/tep.yaml plants). None: no unit scored.
TRUTH: dict[int, frozenset[str] | None] = {
    **{i: frozenset({"feed"}) for i in (6, 7, 23, 24, 25, 26)},
    **{i: frozenset({"reactor"}) for i in (4, 11, 13, 14, 17, 27)},
    **{i: frozenset({"separator"}) for i in (5, 12, 15, 18, 28)},
    16: frozenset({"stripper"}),
    **{i: frozenset({"feed", "stripper"}) for i in (1, 2, 8)},  # stream 4 composition
    **{i: None for i in (3, 9, 10, 19, 20, 21, 22)},
}
#: Short names of the disturbances (tep-studio's schema descriptions, abbreviated).
IDV_NAMES = {
    1: "A/C ratio, str. 4 (step)", 2: "B comp., str. 4 (step)", 3: "D feed temp. (step)",
    4: "reactor CW inlet temp. (step)", 5: "condenser CW inlet temp. (step)", 6: "A feed loss (step)",
    7: "C header pressure loss (step)", 8: "A/B/C comp., str. 4 (random)", 9: "D feed temp. (random)",
    10: "C feed temp. (random)", 11: "reactor CW inlet temp. (random)", 12: "condenser CW inlet temp. (random)",
    13: "reaction kinetics (drift)", 14: "reactor CW valve (sticking)", 15: "condenser CW valve (sticking)",
    16: "stripper heat transfer (random)", 17: "reactor heat transfer (random)",
    18: "condenser heat transfer (random)", 19: "valve stiction group", 20: "unknown (random)",
    21: "A feed temp. (random)", 22: "E feed temp. (random)", 23: "A feed pressure (random)",
    24: "D feed pressure (random)", 25: "E feed pressure (random)", 26: "A+C feed pressure (random)",
    27: "reactor CW pressure (random)", 28: "condenser CW pressure (random)",
}  # fmt: skip
RECORDED = {"01": frozenset({"feed", "stripper"}), "04": frozenset({"reactor"}), "05": frozenset({"separator"}),
            "06": frozenset({"feed"})}  # fmt: skip
#: rows an alarm must last to count as the detection (delay) and as a first alarm (peer)
PERSIST = 3
#: a run counts as detected by a monitor when its FDR reaches this
DETECTED = 0.5
#: training rows of the short-history figures (as long as the recorded d00.dat)
SHORT_ROWS = 500
#: flag epsilons measured
EPSILONS = (math.inf, 2.0)


# --------------------------------------------------------------------------------------------
# the contract a monitor satisfies
@dataclass(frozen=True)
class VerdictRecord:
    """One verdict as the bench scores it: the row, the named root (None: no root), the candidates shown and
    their probabilities (empty: the monitor gives none)."""

    seq: int
    root: str | None
    candidates: tuple[str, ...] = ()
    probabilities: tuple[float, ...] = ()


@dataclass(frozen=True)
class MonitorOutput:
    """What one monitored run gives.

    ``alarm`` (T,) bool (any plant, any flag); ``score`` (T,) the alarm statistic over its
    threshold (alarm where > 1; moved for the ROC points); ``verdicts`` the root verdicts;
    ``flags`` (T, M, 2) and ``levels`` (T, M) what the RCA saw (the first-alarm peer reads them);
    ``features`` (V, M, F) the calibration features of every verdict (fedrca: :func:`fedrca.rca.calibration.features`
    of the engine's evidence when it issued them); ``ranking`` (T, M) a per-row score of every plant (the
    centralised reference's contributions) for its candidate sets.
    """

    alarm: np.ndarray
    verdicts: list[VerdictRecord] = field(default_factory=list)
    score: np.ndarray | None = None
    flags: np.ndarray | None = None
    levels: np.ndarray | None = None
    plants: tuple[str, ...] = ()
    features: np.ndarray | None = None
    ranking: np.ndarray | None = None
    evidence: list[Any] | None = None


Monitor = Callable[[pd.DataFrame], MonitorOutput]
#: ``factory(nominal training frame (T, 52)) -> monitor``; must use nothing but the nominal frame to calibrate
MonitorFactory = Callable[[pd.DataFrame], Monitor]


def cross_plant_off(config: SiteConfig) -> SiteConfig:
    """``config`` with its cross-plant model switched off: no graph edges, no unseen entries, so the engine
    reasons on the complete graph from each plant's own flags (the trained augmentation is left out by the
    caller: Theta = 0)."""
    rca = config.rca.model_copy(update={"unobserved_entry": [], "graph": config.rca.graph.model_copy(
        update={"source": "complete"})})  # fmt: skip
    return config.model_copy(update={"rca": rca, "graph": None})


def learned_graph_only(config: SiteConfig) -> SiteConfig:
    """``config`` with the graph its training learns (the server artifact's Wald test) instead of the configured
    one; the unseen entries are kept."""
    rca = config.rca.model_copy(update={"graph": config.rca.graph.model_copy(update={"source": "learned"})})
    return config.model_copy(update={"rca": rca, "graph": None})


def fedrca_factory(
    config: SiteConfig, trained: bool = False, epsilon: float = math.inf, settings: Any = None
) -> MonitorFactory:
    """The product: ``prepare_site`` (+ ``train_site`` when ``trained``) then ``run_pipeline``."""
    from fedrca.application.site import prepare_site, run_pipeline

    # the severity levels (when the plants publish them) get the flags' epsilon
    privacy = config.privacy.model_copy(update={"flag_epsilon": epsilon, "level_epsilon": epsilon})
    # no shipped calibration map: the bench fits its maps on the library itself, cross-validated
    # (rca_calibration.py), and the verdicts it scores must not carry a map fitted on these runs
    rca = config.rca.model_copy(update={"calibration": config.rca.calibration.model_copy(update={"path": None})})
    config = config.model_copy(update={"privacy": privacy, "rca": rca})

    def factory(nominal: pd.DataFrame) -> Monitor:
        config_run = without_constant_sensors(config, nominal)
        learned = None
        with tempfile.TemporaryDirectory() as params:
            if trained:
                from fedrca.application.training import train_site
                from fedrca.contracts import SERVER, load_artifacts
                from fedrca.rca.graph import InterdependencyGraph

                train_site(config_run, nominal, params, resume=False, progress=None)
                server = load_artifacts(params).get(SERVER)
                learned = None if server is None else InterdependencyGraph.from_server_artifact(server)
            site = prepare_site(config_run, nominal, params_dir=params if trained else None, settings=settings)
        plants = tuple(site.config.plant_names)
        thresholds = {p: site.detectors[p].thresholds for p in plants}

        def monitor(frame: pd.DataFrame) -> MonitorOutput:
            from fedrca.rca.calibration import features

            engine = site.engine
            engine.evidence_log = []
            run = run_pipeline(site, frame)
            evidence, engine.evidence_log = engine.evidence_log, None
            # sensor events (a tag's sensor fault, docs/sensors.md) are no process verdicts: no engine evidence
            process = [v for v in run.verdicts if not v.is_sensor_event]
            assert len(evidence) == len(process), "one evidence per issued process verdict"
            X = np.stack([features(e, engine.graph, engine.settings) for e in evidence]) if evidence else None
            flags = run.true_flags().astype(bool)  # (T, M, 2)
            score = np.max(
                [
                    np.maximum(run.results[p].d2_c / thresholds[p][0], run.results[p].d2_a / thresholds[p][1])
                    for p in plants
                ],
                axis=0,
            )
            # the warm-up rows never alarm
            score = np.where(flags.any(axis=(1, 2)) | (score <= 1.0), score, np.minimum(score, 1.0))
            levels = np.column_stack([run.results[p].level_pub for p in plants])
            verdicts = [VerdictRecord(v.seq, v.root_cause, v.candidates, v.probabilities) for v in process]
            published = run.published() > 0  # a degraded row (-1) is no alarm
            return MonitorOutput(
                flags.any(axis=(1, 2)), verdicts, score, published, levels, plants, features=X, evidence=evidence
            )

        # the diagnosis (bench/rca_diagnosis.py) reads the site and the graph the training learned
        monitor.site = site  # type: ignore[attr-defined]
        monitor.learned_graph = learned  # type: ignore[attr-defined]
        return monitor

    return factory


def without_constant_sensors(config: SiteConfig, nominal: pd.DataFrame) -> SiteConfig:
    """``config`` without the sensors (and inputs) that never change in the nominal frame (a detector refuses a
    constant column: under the simulator's decentralised control the stripper steam valve XMV(9) stays shut)."""
    X = nominal.to_numpy(dtype=np.float64)
    std, mean = X.std(axis=0), X.mean(axis=0)
    # the criterion of fedrca.datasets.nominal.check_nominal
    constant = {str(c) for c, flat in zip(nominal.columns, (std == 0) | (std <= 1e-12 * np.abs(mean))) if flat}
    if not constant:
        return config
    plants = [
        p.model_copy(
            update={
                "sensors": [s for s in p.sensors if s not in constant],
                "inputs": [u for u in p.inputs if u not in constant],
            }
        )
        for p in config.plants
    ]
    return config.model_copy(update={"plants": plants})


class CentralReference:
    """PCA on pooled nominal data (all variables, ``variance`` explained), T^2 + SPE alarms at ``1 - alpha``
    limits, and the unit of the largest reconstruction-based contribution of the combined index, summed over its
    variables (Alcala & Qin 2009): the centralised peer with all raw data and no privacy.

    ``units`` maps each column to its unit (plant name), None for a column of no unit.
    """

    def __init__(self, units: dict[str, str | None], variance: float = 0.9, alpha: float = 0.01) -> None:
        self.units = units
        self.variance = variance
        self.alpha = alpha

    def __call__(self, nominal: pd.DataFrame) -> Monitor:
        X = nominal.to_numpy(dtype=np.float64)
        n = len(X)
        mean = X.mean(axis=0)
        std = X.std(axis=0, ddof=1)
        std = np.where(std > 1e-12, std, 1.0)
        Z = (X - mean) / std
        # eigen-decomposition of the correlation matrix, largest first
        lam, vecs = np.linalg.eigh(np.cov(Z, rowvar=False))
        lam, vecs = lam[::-1].clip(min=0.0), vecs[:, ::-1]
        a = int(np.searchsorted(np.cumsum(lam) / lam.sum(), self.variance) + 1)
        P, lam_a = vecs[:, :a], lam[:a]
        # T^2 limit: a (n^2 - 1) / (n (n - a)) F_{1-alpha}(a, n - a)
        t2_lim = a * (n**2 - 1) / (n * (n - a)) * stats.f.ppf(1 - self.alpha, a, n - a)
        # SPE limit (Jackson & Mudholkar 1979) from the discarded eigenvalues
        rest = lam[a:]
        th1, th2, th3 = rest.sum(), (rest**2).sum(), (rest**3).sum()
        h0 = 1 - 2 * th1 * th3 / (3 * th2**2)
        c = stats.norm.ppf(1 - self.alpha)
        spe_lim = th1 * (c * math.sqrt(2 * th2 * h0**2) / th1 + 1 + th2 * h0 * (h0 - 1) / th1**2) ** (1 / h0)
        # combined index phi(z) = z' Phi z,  Phi = P Lambda^-1 P' / t2_lim + (I - P P') / spe_lim
        Phi = P @ np.diag(1.0 / lam_a) @ P.T / t2_lim + (np.eye(len(P)) - P @ P.T) / spe_lim
        names = [self.units.get(str(col)) for col in nominal.columns]
        plants = tuple(dict.fromkeys(u for u in names if u is not None))
        member = np.array([[u == p for u in names] for p in plants], dtype=np.float64)  # (M, D)

        def monitor(frame: pd.DataFrame) -> MonitorOutput:
            Zf = (frame.to_numpy(dtype=np.float64) - mean) / std
            T = Zf @ P
            # T^2 = sum_i t_i^2 / lambda_i ;  SPE = ||z - P P' z||^2
            t2 = (T**2 / lam_a).sum(axis=1)
            spe = ((Zf - T @ P.T) ** 2).sum(axis=1)
            score = np.maximum(t2 / t2_lim, spe / spe_lim)
            alarm = score > 1.0
            # RBC_i = (xi_i' Phi z)^2 / (xi_i' Phi xi_i), summed over each unit's variables
            rbc = (Zf @ Phi) ** 2 / np.diag(Phi)
            unit = np.argmax(rbc @ member.T, axis=1)
            units = rbc @ member.T  # (T, M) contribution of each unit
            verdicts = [VerdictRecord(int(t), plants[unit[t]], (plants[unit[t]],)) for t in np.flatnonzero(alarm)]
            return MonitorOutput(alarm, verdicts, score, plants=plants, ranking=units)

        return monitor


def first_alarm(out: MonitorOutput, onset: int, hold: int = PERSIST) -> MonitorOutput:
    """The first-alarm peer on ``out``'s published flags: one verdict at the row the first alarm (held ``hold``
    rows) after ``onset`` is known, naming its plant (ties: the higher published severity over those rows, then
    the plants' order). No alarm: no verdict."""
    if out.flags is None:
        raise ValueError("the first-alarm peer needs the published flags")
    alarm = out.flags.any(axis=2)  # (T, M)
    levels = out.levels if out.levels is not None else np.zeros(alarm.shape, dtype=np.int64)
    best: tuple[int, int, int] | None = None
    for m in range(alarm.shape[1]):
        held = np.convolve(alarm[onset:, m].astype(np.int64), np.ones(hold, dtype=np.int64), mode="valid") == hold
        hits = np.flatnonzero(held)
        if len(hits):
            t = int(hits[0])
            key = (t, -int(np.maximum(levels[onset + t : onset + t + hold, m], 0).sum()), m)
            best = key if best is None or key < best else best
    verdicts = []
    if best is not None:
        plant = out.plants[best[2]]
        verdicts = [VerdictRecord(onset + best[0] + hold - 1, plant, (plant,))]
    return MonitorOutput(out.alarm, verdicts, out.score, out.flags, out.levels, out.plants)


def alarm_order(out: MonitorOutput, onset: int, hold: int = PERSIST) -> list[int]:
    """The plants in the order their first alarm (held ``hold`` rows) after ``onset`` starts (ties: the higher
    published severity, then the plants' order); plants that never alarm are left out. The first-alarm peer
    made into a set: its first k plants."""
    if out.flags is None:
        raise ValueError("the first-alarm order needs the published flags")
    alarm = out.flags.any(axis=2)
    levels = out.levels if out.levels is not None else np.zeros(alarm.shape, dtype=np.int64)
    keys = []
    for m in range(alarm.shape[1]):
        held = np.convolve(alarm[onset:, m].astype(np.int64), np.ones(hold, dtype=np.int64), mode="valid") == hold
        hits = np.flatnonzero(held)
        if len(hits):
            t = int(hits[0])
            keys.append((t, -int(np.maximum(levels[onset + t : onset + t + hold, m], 0).sum()), m))
    return [m for *_, m in sorted(keys)]


# --------------------------------------------------------------------------------------------
# figures of one run
def detection_delay(alarm: np.ndarray, onset: int, persist: int = PERSIST) -> int | None:
    """Rows from ``onset`` to the first alarm that lasts ``persist`` rows (None: never)."""
    a = np.asarray(alarm[onset:], dtype=np.int64)
    if len(a) < persist:
        return None
    runs = np.convolve(a, np.ones(persist, dtype=np.int64), mode="valid") == persist
    hit = np.flatnonzero(runs)
    return int(hit[0]) if len(hit) else None


def score_run(out: MonitorOutput, onset: int, truth: frozenset[str] | None) -> dict[str, Any]:
    """FDR, delay, detection, majority root (share, correct), candidates and RCA delay of one faulty run."""
    late = [v for v in out.verdicts if v.seq >= onset and v.root is not None]
    counts = Counter(v.root for v in late)
    majority, top = counts.most_common(1)[0] if counts else (None, 0)
    shown = Counter(p for v in late for p in (v.candidates or (v.root,)))
    candidates = sorted(p for p, n in shown.items() if n * 2 >= len(late)) if late else []
    first = next((v.seq for v in late if truth and v.root in truth), None)
    fdr = float(np.mean(out.alarm[onset:])) if len(out.alarm) > onset else float("nan")
    return {
        "FDR": fdr,
        "delay": detection_delay(out.alarm, onset),
        "detected": bool(fdr >= DETECTED),
        "root": majority,
        "root share": top / len(late) if late else float("nan"),
        "root verdicts": len(late),
        "correct": None if truth is None else (majority in truth if majority else False),
        "candidates": len(candidates),
        "holds truth": None if truth is None else bool(truth & set(candidates)),
        "RCA delay": None if first is None else first - onset,
    }


# --------------------------------------------------------------------------------------------
# the library
def _frame(run: SimulatedRun) -> pd.DataFrame:
    return pd.DataFrame(run.values, columns=list(TEP_COLUMNS))


def load_library(
    library: Library, generate: bool = True, available: bool = False
) -> tuple[pd.DataFrame, dict[int, pd.DataFrame], dict]:
    """(nominal training frame, FAR frames by seed, fault frames by (idv, seed)); missing runs generated.

    With ``available`` missing fault runs are left out (and listed) instead.
    """

    def get(spec: SimulationSpec) -> SimulatedRun:
        run = cached_run(spec, generate=generate)
        if run is None:
            raise SystemExit(f"bench_faults: run {spec.key('?')} is not cached; run python bench/tep_library.py")
        if run.terminated:
            print(f"  note: {spec.key(run.version)} shut down after {len(run.values)} rows ({run.shutdown})")
        return run

    runs = [_frame(get(library.nominal(s))) for s in library.train_seeds]
    train = pd.concat(runs, ignore_index=True)
    # which nominal run each training row comes from (monitors may use it for folds); the product reads
    # the run lengths (each run is a fresh stream, fedrca.detectors.factory.SEGMENTS)
    train.attrs["groups"] = np.repeat(np.arange(len(runs)), [len(r) for r in runs])
    train.attrs["segments"] = [len(r) for r in runs]
    far = {s: _frame(get(library.nominal(s))) for s in library.far_seeds}
    faults = {}
    for s in library.fault_seeds:
        for i in library.idvs:
            if available and cached_run(library.fault(i, s), generate=False) is None:
                print(f"  left out (not cached): IDV {i} seed {s}")
                continue
            faults[(i, s)] = _frame(get(library.fault(i, s)))
    return train, far, faults


def short_history(train: pd.DataFrame, rows: int = SHORT_ROWS) -> pd.DataFrame:
    """The first ``rows`` nominal rows of the first training run, as one recording."""
    first = train.iloc[: min(rows, train.attrs["segments"][0])].reset_index(drop=True)
    first.attrs["groups"] = np.zeros(len(first), dtype=np.int64)
    first.attrs["segments"] = [len(first)]
    return first


@dataclass
class Measured:
    """Every output of one monitor on the library: FAR runs by seed, fault runs by (idv, seed), recorded files."""

    far: dict[int, MonitorOutput]
    faults: dict[tuple[int, int], MonitorOutput]
    recorded: dict[str, MonitorOutput] = field(default_factory=dict)
    #: the fedrca monitor's site and the graph its training learned (None for the peers)
    site: Any = None
    learned_graph: Any = None

    def derived(self, fn: Callable[[MonitorOutput, int], MonitorOutput], onset: int = ONSET_SAMPLE) -> Measured:
        """A peer computed from these outputs (e.g. :func:`first_alarm`)."""
        return Measured(
            {s: fn(o, onset) for s, o in self.far.items()},
            {k: fn(o, onset) for k, o in self.faults.items()},
            {f: fn(o, 160) for f, o in self.recorded.items()},
        )


def measure(
    factory: MonitorFactory,
    train: pd.DataFrame,
    far: dict[int, pd.DataFrame],
    faults: dict[tuple[int, int], pd.DataFrame],
    recorded: dict[str, pd.DataFrame] | None = None,
) -> Measured:
    """Calibrate on ``train`` only, then run every frame (the recorded files with a monitor fitted on d00.dat)."""
    monitor = factory(train)
    out = Measured({s: monitor(f) for s, f in far.items()}, {k: monitor(f) for k, f in faults.items()})
    out.site, out.learned_graph = getattr(monitor, "site", None), getattr(monitor, "learned_graph", None)
    if recorded:
        rec_monitor = factory(recorded["d00"])
        out.recorded = {name: rec_monitor(f) for name, f in recorded.items() if name != "d00"}
    return out


def fault_rows(m: Measured, onset: int = ONSET_SAMPLE) -> list[dict[str, Any]]:
    return [{"idv": i, "seed": s, **score_run(o, onset, TRUTH.get(i))} for (i, s), o in m.faults.items()]


def far_rows(m: Measured) -> list[dict[str, Any]]:
    return [
        {"seed": s, "FAR": float(np.mean(o.alarm)), "root verdicts": sum(v.root is not None for v in o.verdicts)}
        for s, o in m.far.items()
    ]


def load_recorded(data_dir: Path = REPO / "data" / "tep") -> dict[str, pd.DataFrame]:
    """The bundled Braatz files: d00 (training), d00_te and the faulty d01/d04/d05/d06 test files."""
    files = {"d00": load_tep(data_dir / "d00.dat"), "d00_te": load_tep(data_dir / "d00_te.dat")}
    files.update({f"d{f}_te": load_tep(data_dir / f"d{f}_te.dat") for f in RECORDED})
    return files


def recorded_training_rows(data_dir: Path = REPO / "data" / "tep") -> int:
    """The nominal rows the recorded files' monitor is fitted on (d00.dat): the training size whose map its site
    gets."""
    return len(load_tep(data_dir / "d00.dat"))


def recorded_rows(m: Measured) -> list[dict[str, Any]]:
    rows = []
    for name, out in m.recorded.items():
        if name == "d00_te":
            rows.append({"file": name, "FAR": float(np.mean(out.alarm))})
        else:
            rows.append({"file": name, **score_run(out, 160, RECORDED[name[1:3]])})
    return rows


def evaluate_recorded(factory: MonitorFactory, data_dir: Path = REPO / "data" / "tep") -> list[dict[str, Any]]:
    """The bundled Braatz files, fitted on d00.dat: FAR on d00_te, FDR / delay / root on 01, 04, 05, 06."""
    files = load_recorded(data_dir)
    monitor = factory(files["d00"])
    m = Measured({}, {}, {name: monitor(f) for name, f in files.items() if name != "d00"})
    return recorded_rows(m)


# --------------------------------------------------------------------------------------------
# summaries
def roc_threshold(scores: Iterable[np.ndarray], far: float) -> float:
    """The score level above which the nominal rows alarm at rate ``far`` (the (1 - far) quantile)."""
    pooled = np.concatenate([np.asarray(s, dtype=np.float64) for s in scores])
    return float(np.quantile(pooled, 1.0 - far))


def nominal_far(m: Measured, onset: int = ONSET_SAMPLE) -> float:
    """The monitor's alarm rate on the FAR runs' rows from ``onset`` on (the rows an FDR is measured on)."""
    return float(np.mean(np.concatenate([o.alarm[onset:] for o in m.far.values()])))


def roc_fdr(m: Measured, target_far: float, onset: int = ONSET_SAMPLE) -> dict[int, float]:
    """Mean FDR per IDV with the alarm level moved so that the FAR on the FAR runs is ``target_far``.

    Both rates are taken on the rows from ``onset`` on, so a start-up transient of the nominal
    runs (rows a faulty run's FDR never counts) does not move the level.
    """
    level = roc_threshold((o.score[onset:] for o in m.far.values() if o.score is not None), target_far)
    per: dict[int, list[float]] = {}
    for (idv, _), o in m.faults.items():
        assert o.score is not None
        per.setdefault(idv, []).append(float(np.mean(o.score[onset:] > level)))
    return {i: float(np.mean(v)) for i, v in per.items()}


def roc_standard_error(m: Measured, idv: int, rate: float, onset: int = ONSET_SAMPLE) -> float:
    """Standard error of a mean FDR ``rate`` over the IDV's runs (binomial over their rows): the scale of the
    differences an FDR comparison can resolve, e.g. where both monitors alarm at their false-alarm rate."""
    rows = sum(len(o.alarm) - onset for (i, _), o in m.faults.items() if i == idv)
    return math.sqrt(max(rate * (1.0 - rate), 1e-12) / max(rows, 1))


def _median(values: Iterable[int | None]) -> str:
    vals = list(values)
    got = [v for v in vals if v is not None]
    if not got:
        return "-"
    missing = len(vals) - len(got)
    return f"{np.median(got):g}" + (f" ({missing} never)" if missing else "")


def rca_summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """RCA figures over the detected runs with a unit truth."""
    scored = [r for r in rows if r["correct"] is not None]
    detected = [r for r in scored if r["detected"]]
    n = len(detected)
    correct = sum(bool(r["correct"]) for r in detected)
    delays = [r["RCA delay"] for r in detected]
    got = [d for d in delays if d is not None]
    return {
        "detected": f"{n}/{len(scored)}",
        "correct": correct,
        "n": n,
        "share": correct / n if n else float("nan"),
        "candidates": float(np.mean([r["candidates"] for r in detected])) if n else float("nan"),
        "holds truth": float(np.mean([bool(r["holds truth"]) for r in detected])) if n else float("nan"),
        "RCA delay": float(np.median(got)) if got else float("nan"),
        "never": len(delays) - len(got),
        "undetected": sorted(f"{r['idv']}/{r['seed']}" for r in scored if not r["detected"]),
    }


# --------------------------------------------------------------------------------------------
# tables
def _fmt(x: Any, digits: int = 3) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "-"
    if isinstance(x, bool):
        return "yes" if x else "no"
    if isinstance(x, float):
        return f"{x:.{digits}f}"
    return str(x)


def _md(frame: pd.DataFrame) -> str:
    cols = list(frame.columns)
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    lines += ["| " + " | ".join(_fmt(v) for v in row) + " |" for row in frame.itertuples(index=False)]
    return "\n".join(lines)


@dataclass(frozen=True)
class Variant:
    """One measured monitor: its label, how it is built and, for fedrca, its training rows and epsilon."""

    key: str
    label: str
    rows: int | None = None
    epsilon: float | None = None
    kind: str = "fedrca"  # fedrca | learned-off | learned-graph | off | first | central


def variants(rows: Sequence[int], epsilons: Sequence[float]) -> list[Variant]:
    """The monitors measured for each training size: fedrca, its ablations and the peers."""
    out = []
    for n in rows:
        for eps in epsilons:
            e = "inf" if math.isinf(eps) else f"{eps:g}"
            out.append(Variant(f"fedrca-{n}-{e}", f"fedrca, {n} rows, eps {e}", n, eps, "fedrca"))
            if math.isinf(eps):
                out.append(Variant(f"learned-off-{n}-{e}", f"learned part off (Theta = 0), {n} rows, eps {e}", n, eps,
                                   "learned-off"))  # fmt: skip
                out.append(Variant(f"learned-graph-{n}-{e}", f"learned graph instead of the configured one, {n} rows, "
                                   f"eps {e}", n, eps, "learned-graph"))  # fmt: skip
            out.append(Variant(f"off-{n}-{e}", f"cross-plant off, {n} rows, eps {e}", n, eps, "off"))
            out.append(Variant(f"first-{n}-{e}", f"first alarm on fedrca's flags, {n} rows, eps {e}", n, eps, "first"))
        out.append(Variant(f"central-{n}", f"centralised reference (RBC-PCA), {n} rows", n, None, "central"))
    return out


def summary_table(results: dict[str, Measured], vs: Sequence[Variant]) -> pd.DataFrame:
    rows = []
    for v in vs:
        m = results[v.key]
        s = rca_summary(fault_rows(m))
        fars = [r["FAR"] for r in far_rows(m)]
        rows.append(
            {
                "monitor": v.label,
                "FAR max": max(fars),
                "mean FDR": float(np.mean([r["FDR"] for r in fault_rows(m)])),
                "detected": s["detected"],
                "majority root correct": f"{s['correct']}/{s['n']} ({s['share']:.2f})",
                "median RCA delay": s["RCA delay"],
                "never named": s["never"],
                "root verdicts on nominal": None
                if v.kind == "central"
                else sum(r["root verdicts"] for r in far_rows(m)),
            }
        )
    return pd.DataFrame(rows)


def idv_table(results: dict[str, Measured], rows: int, epsilon: float, idvs: Sequence[int]) -> pd.DataFrame:
    """One row per IDV: detection (own threshold and ROC points) of fedrca and PCA, roots and correct runs."""
    e = "inf" if math.isinf(epsilon) else f"{epsilon:g}"
    mine, off, first, central = (
        results[f"fedrca-{rows}-{e}"],
        results[f"off-{rows}-{e}"],
        results[f"first-{rows}-{e}"],
        results[f"central-{rows}"],
    )
    pca_far = nominal_far(central)
    roc_mine_pca, roc_pca_pca = roc_fdr(mine, pca_far), roc_fdr(central, pca_far)
    roc_mine_2, roc_pca_2 = roc_fdr(mine, 0.02), roc_fdr(central, 0.02)
    by = {k: {(r["idv"], r["seed"]): r for r in fault_rows(results[k])} for k in results}
    out = []
    for idv in idvs:
        truth = TRUTH[idv]
        keys = sorted(k for k in mine.faults if k[0] == idv)
        mr = [by[f"fedrca-{rows}-{e}"][k] for k in keys]
        pr = [by[f"central-{rows}"][k] for k in keys]

        def correct(key: str, truth: frozenset[str] | None = truth, keys: list = keys) -> str:
            if truth is None:
                return "-"
            det = [r for r in (by[key][k] for k in keys) if r["detected"]]
            return f"{sum(bool(r['correct']) for r in det)}/{len(det)}"

        out.append(
            {
                "IDV": idv,
                "disturbance": IDV_NAMES[idv],
                "truth": "/".join(sorted(truth)) if truth else "(none)",
                "FDR fedrca": float(np.mean([r["FDR"] for r in mr])),
                "FDR PCA": float(np.mean([r["FDR"] for r in pr])),
                "FDR at PCA's FAR: fedrca / PCA": f"{roc_mine_pca[idv]:.3f} / {roc_pca_pca[idv]:.3f}",
                "FDR at 2 % FAR: fedrca / PCA": f"{roc_mine_2[idv]:.3f} / {roc_pca_2[idv]:.3f}",
                "delay fedrca": _median(r["delay"] for r in mr),
                "majority roots (fedrca)": ", ".join(f"{r['root'] or '-'} {_fmt(r['root share'], 2)}" for r in mr),
                "correct fedrca": correct(f"fedrca-{rows}-{e}"),
                "correct off": correct(f"off-{rows}-{e}"),
                "correct first alarm": correct(f"first-{rows}-{e}"),
                "correct central": correct(f"central-{rows}"),
                "RCA delay fedrca": "-" if truth is None else _median(r["RCA delay"] for r in mr if r["detected"]),
            }
        )
    del off, first
    return pd.DataFrame(out)


def acceptance(results: dict[str, Measured], rows: Sequence[int]) -> list[str]:
    """The issue-22 bars, measured (informational)."""
    lines = []
    for n in rows:
        fed, off, first = (rca_summary(fault_rows(results[f"{k}-{n}-inf"])) for k in ("fedrca", "off", "first"))
        central = rca_summary(fault_rows(results[f"central-{n}"]))
        learned_off = results.get(f"learned-off-{n}-inf")
        margins = [("first alarm", first), ("cross-plant off", off)]
        if learned_off is not None:
            margins.append(("learned part off", rca_summary(fault_rows(learned_off))))
        verdicts = "; ".join(
            f"{name} {peer['share']:.2f} (margin {fed['share'] - peer['share']:+.2f}, bar +0.10) -> "
            + ("met" if fed["share"] - peer["share"] >= 0.1 - 1e-12 else "MISSED")
            for name, peer in margins
        )
        lines.append(
            f"{n} rows: majority root correct {fed['share']:.2f} on the detected runs (bar 0.90) -> "
            f"{'met' if fed['share'] >= 0.9 else 'MISSED'}; {verdicts}; centralised reference {central['share']:.2f}"
        )
        eps2 = rca_summary(fault_rows(results[f"fedrca-{n}-2"])) if f"fedrca-{n}-2" in results else None
        if eps2 is not None:
            lines.append(
                f"{n} rows, flag epsilon 2: majority root correct {eps2['share']:.2f} (bar 0.80) -> "
                f"{'met' if eps2['share'] >= 0.8 else 'MISSED'}"
            )
        fars = [r["FAR"] for r in far_rows(results[f"fedrca-{n}-inf"])]
        lines.append(
            f"{n} rows: FAR (any plant, any flag) max {max(fars):.4f} over the nominal seeds (bar 0.02) -> "
            f"{'met' if max(fars) <= 0.02 else 'MISSED'}"
        )
        central_m = results[f"central-{n}"]
        pca_far = nominal_far(central_m)
        mine, peer = roc_fdr(results[f"fedrca-{n}-inf"], pca_far), roc_fdr(central_m, pca_far)
        # lower by more than two standard errors of the difference: a real loss, not the draw of the rows
        bad, tied = [], []
        for i in sorted(mine):
            se = math.hypot(roc_standard_error(central_m, i, mine[i]), roc_standard_error(central_m, i, peer[i]))
            if mine[i] < peer[i] - 2.0 * se:
                bad.append(f"{i} ({mine[i]:.3f} < {peer[i]:.3f})")
            elif mine[i] < peer[i]:
                tied.append(str(i))
        lines.append(
            f"{n} rows: FDR >= PCA's at PCA's own FAR ({pca_far:.4f}) on every IDV -> "
            + ("met" if not bad else "MISSED on IDV " + ", ".join(bad))
            + (f" (lower within two standard errors on IDV {', '.join(tied)})" if tied else "")
        )
        lines.append(
            f"{n} rows: median RCA delay {fed['RCA delay']:g} samples on the detected runs (bar 10) -> "
            f"{'met' if fed['RCA delay'] <= 10 else 'MISSED'}"
        )
    return lines


#: what the written file's set threshold is fitted on, in words (rca_calibration.THRESHOLDS_FROM)
FILE_THRESHOLDS = {
    "inner": "fitted on the inner folds of the nested cross-validation pooled: maps that saw neither of two seeds and "
    "two IDV groups, as those the thresholds above come from",
    "outer": "fitted on these out-of-fold probabilities of every run",
}


@dataclass
class CalibrationSection:
    """The candidate sets and calibration figures of every setting (issue 35), and the maps fitted on them all."""

    table: pd.DataFrame
    reliability: dict[str, pd.DataFrame]
    panels: list[tuple[str, list[dict[str, float]], list[dict[str, float]]]]
    bars: list[str]
    calibration: Any  # fedrca.rca.calibration.CalibrationMaps
    counts: str
    maps_text: str = "the four settings pooled"
    thresholds_text: str = "one for every setting"
    file_thresholds_text: str = FILE_THRESHOLDS["inner"]
    folds_text: str = ""


#: what a map weighs, in words (rca_calibration.FAMILIES): a plant-agnostic map as before families existed
FAMILY_TEXT = {
    "features": "",
    "plants": ", each with per-plant terms (the family `plants`: a bias, `named` and `share` per unit, so a map of "
    "this site's plants alone, fitted per site, that does not carry to another process)",
}

#: what one map (one set threshold) is fitted for, in words (rca_calibration.MAPS_BY)
FITTED_FOR = {
    "pooled": ("the four settings pooled", "one for every setting"),
    "rows": ("one map per training size (both flag epsilons pooled)", "one per training size"),
    "rows-shrunk": ("one map per training size, shrunk toward a shared one", "one per training size"),
    "setting": ("one map per setting", "one per setting"),
    "setting-shrunk": ("one map per setting, shrunk toward its training size's", "one per setting"),
}


def calibration_section(
    results: dict[str, Measured], vs: Sequence[Variant], level: float, thresholds_by: str = "pooled",
    maps_by: str = "pooled", rule: str | None = None, thresholds_from: str | None = None, family: str | None = None,
    compare: Sequence[str] = (),
) -> CalibrationSection:  # fmt: skip
    """Cross-validated calibrated sets of fedrca (:mod:`rca_calibration`) next to its uncalibrated posterior, the
    first-alarm peer made into sets and the centralised reference ranked by contribution, per setting (one map
    per ``maps_by`` and one set threshold per ``thresholds_by``: :func:`rca_calibration.threshold_key`; the sets by
    ``rule``, None: :data:`rca_calibration.SET_RULE`; the maps of ``family``, None:
    :data:`rca_calibration.SHIPPED_FAMILY`), and the sets of the same out-of-fold probabilities at the
    threshold of the written file (fitted on ``thresholds_from``, None:
    :data:`rca_calibration.SHIPPED_THRESHOLDS_FROM`): what the file's threshold gives on runs of a seed and an IDV
    group its probabilities' map did not see. ``compare``: other families whose maps go through the same nested
    cross-validation, their rows and bars next to those of ``family`` (the file is ``family``'s)."""
    import rca_calibration as rc

    rule = rule or rc.SET_RULE
    thresholds_from = thresholds_from or rc.SHIPPED_THRESHOLDS_FROM
    family = family or rc.SHIPPED_FAMILY

    fed = [v for v in vs if v.kind == "fedrca"]
    samples = rc.collect({v.key: results[v.key].faults for v in fed}, TRUTH, ONSET_SAMPLE)
    plants = next(o.plants for v in fed for o in results[v.key].faults.values())
    fitted_on = {
        "library": "bench/tep_library.py",
        "settings": [v.key for v in fed],
        "fault seeds": sorted(int(x) for x in np.unique(samples.seed)),
        "runs": len(np.unique(samples.run)),
        "verdicts": len(samples),
        "penalty": rc.PENALTY,
        "threshold levels": list(rc.LEVELS),
        "set rule": rule,
        "thresholds from": thresholds_from,
    }
    order = [v.key for v in fed]

    def figures_of(fam: str) -> Any:
        return rc.family_figures(samples, plants, level, fam, thresholds_by, maps_by, rule, thresholds_from,
                                 fitted_on, order)  # fmt: skip

    figures = figures_of(family)
    maps = figures.maps
    # a plant-agnostic map's rows are labelled as before families existed
    family_label = "" if family == "features" else f", maps of family {family}"
    rows: dict[str, list[dict[str, Any]]] = {}
    bars: dict[str, str] = {}
    reliabilities, panels = {}, []
    how = "sets reach" if rule == "mass" else "a plant joins the named root at"
    for v in fed:
        sel = samples.setting == v.key
        part = samples.where(sel)
        mine = figures.fold[v.key]
        engine = rc.score(part, part.engine, level)
        low, high = figures.interval[v.key]
        floor = figures.floor[v.key]
        e = "inf" if math.isinf(v.epsilon or math.inf) else f"{v.epsilon:g}"
        first = rc.first_alarm_sets(results[v.key].faults, TRUTH, ONSET_SAMPLE, alarm_order)
        central = rc.ranking_sets(results[f"central-{v.rows}"].faults, TRUTH, ONSET_SAMPLE)
        setting = f"{v.rows} rows, eps {e}"

        ece_cell = f"{mine['ece']:.3f} ({rc.fmt_interval(low, high)}; exactly calibrated: {floor[0]:.3f})"
        rows[v.key] = [_set_row(setting, f"fedrca{family_label}, calibrated at {level:g} (cross-validated; {how} "
                                f"{_reached(mine)})", mine, ece_cell)]  # fmt: skip
        rows[v.key].append(_set_row(setting, f"fedrca, the engine's posterior at {level:g} (uncalibrated)", engine,
                                    f"{engine['ece']:.3f}"))  # fmt: skip
        for name, sets, ece in (
            ("first alarm", first, f"{1.0 - first[1]['coverage']:.3f}" if first else "-"),
            ("centralised RBC-PCA", central, f"{central[1]['ece']:.3f}" if central else "-"),
        ):
            if not sets:
                continue
            rows[v.key].append(_set_row(setting, f"{name}, first plant", sets[1], ece))
            reach = rc.smallest_reaching(sets, mine["coverage"])
            if reach is None:
                rows[v.key].append(_set_row(setting, f"{name}: no k holds a true root as often as fedrca",
                                            sets[max(sets)], "-"))  # fmt: skip
            elif reach[0] > 1:
                rows[v.key].append(_set_row(setting, f"{name}, first {reach[0]} plants (as often as fedrca)",
                                            reach[1], "-"))  # fmt: skip
        reliabilities[setting] = _reliability_table(mine)
        panels.append((setting, mine["reliability"], engine["reliability"]))
        peers = []
        for name, sets in (("first alarm", first), ("centralised RBC-PCA", central)):
            reach = rc.smallest_reaching(sets, mine["coverage"]) if sets else None
            larger = reach is None or reach[1]["size"] > mine["size"]
            peers.append(f"{name} {'needs' if reach else 'never reaches'} "
                         + (f"k = {reach[0]} (mean size {reach[1]['size']:.2f})" if reach else "it")
                         + (" -> larger" if larger else " -> NOT larger"))  # fmt: skip
        bars[v.key] = (
            f"{setting}: 0.9 sets hold a true root on {mine['coverage']:.2f} of {mine['runs']} detected runs "
            f"(bar 0.90), mean size {mine['size']:.2f} (bar 1.5) -> {_met(_size_bar(mine))}; stream-4 "
            f"{_of(mine, 'stream-4')}, kinetics {_of(mine, 'kinetics')} (bar 2/3) -> {_met(_kinds_bar(mine))}; "
            "same coverage: "
            + "; ".join(peers)
            + f"; ECE {mine['ece']:.3f} (90 % over runs {rc.fmt_interval(low, high)}; were these probabilities "
            + f"exactly calibrated: {floor[0]:.3f}, 90 % {rc.fmt_interval(floor[1], floor[2])}; bar 0.05) -> "
            + ("met" if mine["ece"] <= 0.05 else "MISSED")
            + f" (uncalibrated {engine['ece']:.3f}); top-1 {mine['top1']:.2f}"
        )
    calibration = figures.calibration
    # the written file's threshold on the same out-of-fold probabilities: what it gives on runs of a seed and an IDV
    # group their map did not see (the threshold itself fitted on every run: not held out)
    for v in fed:
        shipped, t = figures.file[v.key], figures.file_threshold[v.key]
        label = (f"fedrca{family_label}, calibrated at {level:g}, the file's threshold on the same probabilities "
                 f"({how} {t:.2f}; fitted on every run)")  # fmt: skip
        rows[v.key].insert(1, _set_row(rows[v.key][0]["setting"], label, shipped, "as above"))
        bars[v.key] += (
            f"; with the file's threshold ({t:.2f}, fitted on every run) on the same probabilities: "
            f"{shipped['coverage']:.2f}, mean size {shipped['size']:.2f} -> {_met(_size_bar(shipped))}, stream-4 "
            f"{_of(shipped, 'stream-4')}, kinetics {_of(shipped, 'kinetics')} -> {_met(_kinds_bar(shipped))}"
        )
    # the other families, by the same nested cross-validation on the same runs: their fold and file rows after the
    # file's family's two, their bars after its bars
    compared = []
    for other in (f for f in dict.fromkeys(compare) if f != family):
        theirs = figures_of(other)
        for v in fed:
            setting = rows[v.key][0]["setting"]
            mine = theirs.fold[v.key]
            low, high = theirs.interval[v.key]
            floor = theirs.floor[v.key]
            ece_cell = f"{mine['ece']:.3f} ({rc.fmt_interval(low, high)}; exactly calibrated: {floor[0]:.3f})"
            label = f"fedrca, maps of family {other}, calibrated at {level:g}"
            at = 2 + 2 * len(compared)
            rows[v.key].insert(at, _set_row(setting, f"{label} (cross-validated; {how} {_reached(mine)})", mine,
                                            ece_cell))  # fmt: skip
            rows[v.key].insert(at + 1, _set_row(setting, f"{label}, the file's threshold on the same probabilities "
                                                f"({how} {theirs.file_threshold[v.key]:.2f}; fitted on every run)",
                                                theirs.file[v.key], "as above"))  # fmt: skip
            reliabilities[f"{setting}, maps of family {other}"] = _reliability_table(mine)
        compared.append([rc.family_bar(v.key, theirs) for v in fed])
    counts = (
        f"{len(samples)} verdicts of {len(np.unique(samples.run))} detected runs with a unit truth over "
        f"{len(fed)} settings, fault seeds {fitted_on['fault seeds']}"
    )
    # each fold's threshold at the level, by the IDV group it holds out: the kinds of fault each group's runs hold
    # are scored at its folds' thresholds only (docs/rca.md, "Which threshold ships")
    reach = np.array([m.threshold(level) for m in maps])
    group = samples.idv % rc.IDV_GROUPS
    fold_t: dict[int, list[float]] = {}
    for s, g in sorted(set(zip(samples.seed.tolist(), group.tolist(), strict=True))):
        fold_t.setdefault(int(g), []).append(float(reach[(samples.seed == s) & (group == g)].mean()))
    kinds = {g: [f"{name} IDV {i}" for name, kind in (("stream-4", rc.STREAM_4), ("kinetics", rc.KINETICS))
                 for i in kind if i % rc.IDV_GROUPS == g] for g in fold_t}  # fmt: skip
    per_group = [
        f"IDV mod {rc.IDV_GROUPS} = {g}{' (' + ', '.join(kinds[g]) + ')' if kinds[g] else ''}: "
        f"{np.mean(ts):.2f} ({min(ts):.2f}-{max(ts):.2f})"
        for g, ts in sorted(fold_t.items())
    ]
    folds_text = (
        "The folds' thresholds by the IDV group they hold out (mean over the fault seeds, range): "
        + "; ".join(per_group)
        + "."
    )
    table = pd.DataFrame([r for v in fed for r in rows[v.key]])
    return CalibrationSection(table, reliabilities, panels, [bars[v.key] for v in fed]
                              + [b for lines in compared for b in lines], calibration, counts,
                              FITTED_FOR[maps_by][0] + FAMILY_TEXT[family], FITTED_FOR[thresholds_by][1],
                              FILE_THRESHOLDS[thresholds_from], folds_text)  # fmt: skip


def _reached(r: Mapping[str, Any]) -> str:
    """The mean of the folds' set thresholds a setting's sets were built at, and their range when they differ."""
    low, high = r["thresholds"]
    return f"{r['threshold']:.2f}" + (f", {low:.2f}-{high:.2f} over the folds" if high > low else "")


def _reliability_table(r: Mapping[str, Any]) -> pd.DataFrame:
    """The reliability bins of a setting's scored probabilities (:func:`rca_calibration.score`)."""
    return pd.DataFrame(
        [{"bin": f"{b['low']:.1f}-{b['high']:.1f}", "mean probability": b["confidence"],
          "share right": b["accuracy"], "weight (runs)": b["weight"]} for b in r["reliability"]]
    )  # fmt: skip


def _set_row(setting: str, monitor: str, r: Mapping[str, Any], ece: str) -> dict[str, Any]:
    """One row of the candidate sets' table."""
    return {
        "setting": setting,
        "monitor": monitor,
        "runs": r.get("runs"),
        "holds a true root": r["coverage"],
        "mean size": r["size"],
        "stream-4 (IDV 2, 8)": r.get("stream-4", float("nan")),
        "kinetics (IDV 13)": r.get("kinetics", float("nan")),
        "ECE": ece,
    }


def _of(r: Mapping[str, Any], kind: str) -> str:
    """``k/n`` runs of a kind (``stream-4``, ``kinetics``) whose set holds a true root."""
    n = int(r[f"{kind} runs"])
    return f"{round(r[kind] * n)}/{n}" if n else "-"


def _size_bar(r: Mapping[str, Any]) -> bool:
    return bool(r["coverage"] >= 0.9 and r["size"] <= 1.5)


def _kinds_bar(r: Mapping[str, Any]) -> bool:
    return all(x >= 2 / 3 - 1e-12 for x in (r["stream-4"], r["kinetics"]) if not math.isnan(x))


def _met(ok: bool) -> str:
    return "met" if ok else "MISSED"


def recorded_sets(results: dict[str, Measured], vs: Sequence[Variant], maps: Any, level: float) -> pd.DataFrame:
    """The recorded files' verdicts (fedrca at 2,880 rows' configuration, fitted on d00.dat) with the library's map
    of their site (``maps``: :class:`fedrca.rca.calibration.CalibrationMaps`; the map of d00.dat's rows and the
    variant's flag epsilon, as the RCA side picks it): the named root's calibrated probability (mean over the
    verdicts from the onset on) and the set shown."""
    out = []
    rows = recorded_training_rows()
    for v in vs:
        if v.kind != "fedrca" or not results[v.key].recorded:
            continue
        calibration = maps.select(rows, math.inf if v.epsilon is None else v.epsilon)
        for name, o in sorted(results[v.key].recorded.items()):
            if name == "d00_te" or o.features is None:
                continue
            picked = [i for i, r in enumerate(o.verdicts) if r.seq >= 160 and r.root is not None]
            if not picked:
                out.append({"monitor": v.label, "file": name, "root": "-"})
                continue
            plants = list(o.plants)
            probs = calibration.apply(o.features[picked])
            roots = [plants.index(o.verdicts[i].root) for i in picked]
            sets = [calibration.candidates(p, level, first=r) for p, r in zip(probs, roots, strict=True)]
            shown = Counter(m for s_ in sets for m in s_)
            majority = sorted((m for m, n in shown.items() if 2 * n >= len(sets)), key=lambda m: -shown[m])
            root = Counter(roots).most_common(1)[0][0]
            truth = RECORDED[name[1:3]]
            out.append(
                {
                    "monitor": v.label,
                    "file": name,
                    "root": plants[root],
                    "map": calibration.name,
                    "P(root), calibrated": float(np.mean([p[r] for p, r in zip(probs, roots, strict=True)])),
                    "set at the level": ", ".join(plants[m] for m in majority),
                    "set holds a true root": bool(truth & {plants[m] for m in majority}),
                }
            )
    return pd.DataFrame(out)


CALIBRATION_TEXT = (
    "Every fedrca verdict carries a candidate set: the named root first, then every other plant whose root "
    "probability reaches the calibration map's threshold for the configured coverage (`rca.coverage`, 0.9; the map's "
    "set rule `plant`, `fedrca.rca.calibration.plant_set`): the largest threshold at which the sets of the map's "
    "fitting runs held a true root on 0.9 of the verdicts in every setting. The "
    "probabilities below are **calibrated** by a map fitted on the library (`bench/rca_calibration.py`) and "
    "**cross-validated**: every run's probabilities come from a map fitted on the runs of the other fault seeds and "
    "the other IDV groups (IDV mod 4), {maps}, and its threshold ({thresholds}; `a plant joins the named root "
    "at`: the mean over the runs) from a cross-validation inside those runs. `the file's threshold`: the same "
    "out-of-fold probabilities with the set threshold the written map carries ({file_thresholds}; fitted on every run, "
    "so not held out): what the file gives on runs of a seed and an IDV group its map did not see. "
    "`holds a true root` = share of the detected runs with a unit truth whose set (the plants in at least half of "
    "the run's verdicts' sets) holds a true unit; `ECE` = expected calibration error of the named root's "
    "probability over the verdicts from the onset on (10 bins, every run weighing one; in brackets a 90 % bootstrap "
    "interval over the runs: how much this many runs can say; `exactly calibrated`: the mean ECE these probabilities "
    "would show were each run's truth drawn with its mean probability, a run right or wrong as a whole: the ECE's "
    "floor at this many runs). The peers on the same runs: the first-alarm peer's "
    "first k plants to alarm (its ECE: it names one plant for sure, so 1 - top-1), the centralised reference's k "
    "units of the largest contribution per alarm row (its contributions normalised as probabilities), each at "
    "k = 1 and at the smallest k that holds a true root as often as fedrca's sets. "
    "[docs/rca.md](rca.md#what-the-probabilities-mean) reads them."
)


DIAGNOSIS_TEXT = (
    "Measured on the same rows by `bench/rca_diagnosis.py` (its docstring says how), with the trained site of the "
    "first training size; [docs/rca.md](rca.md#why-the-learned-part-moves-no-verdict) reads them."
)


def diagnose(
    measured: Measured,
    train: pd.DataFrame,
    far: dict[int, pd.DataFrame],
    faults: dict[tuple[int, int], pd.DataFrame],
    config: SiteConfig,
    smoke: bool = False,
) -> list[tuple[str, pd.DataFrame]]:
    """The diagnosis tables of :mod:`rca_diagnosis` for a trained fedrca monitor (epsilon inf: its published
    flags are its true flags)."""
    import rca_diagnosis as dx

    site = measured.site
    if site is None:
        return []
    flags = {k: o.flags for k, o in measured.faults.items() if o.flags is not None}
    plants = list(site.config.plant_names)
    tables = [
        ("Trained Z_a against Z_c on the faulty rows", dx.augmented_agreement(flags, plants, TRUTH, ONSET_SAMPLE)),
        ("What Theta predicts on new nominal data (FAR seeds)", dx.prediction_gain(site, list(far.values()))),
    ]
    if measured.learned_graph is not None:
        tables.append(
            ("The graph the training learns (server Wald test) against the TEP flowsheet",
             dx.learned_graph_table(measured.learned_graph, list(TEP_FLOWSHEET))),
        )  # fmt: skip
    return tables


def units_of(config: SiteConfig) -> dict[str, str | None]:
    """Each TEP column's plant in ``config`` (None for a column no plant has)."""
    owner: dict[str, str | None] = {str(c): None for c in TEP_COLUMNS}
    for p in config.plants:
        for s in p.sensors:
            owner[s] = p.name
    return owner


def measure_all(
    args: argparse.Namespace, library: Library, config: SiteConfig
) -> tuple[dict[str, Measured], list[tuple[str, pd.DataFrame]], dict[str, Any]]:
    """Run every monitor on the library (and the recorded files): (outputs by monitor key, diagnosis tables, what
    was run: the ``run`` record :func:`save_outputs` keeps)."""
    started = time.perf_counter()
    train, far_frames, fault_frames = load_library(library, generate=not args.no_generate, available=args.available)
    print(
        f"library: {len(train)} training rows ({len(library.train_seeds)} nominal seeds), "
        f"{len(far_frames)} FAR runs, {len(fault_frames)} fault runs ({time.perf_counter() - started:.1f} s)",
        flush=True,
    )
    recorded = None if args.no_recorded else load_recorded()
    rows = [len(train) if int(r) == 0 else int(r) for r in args.rows.split(",")]
    epsilons = [float(e) for e in args.epsilons.split(",")]
    results: dict[str, Measured] = {}
    for v in variants(rows, epsilons):
        if v.kind == "first":
            continue
        t0 = time.perf_counter()
        nominal = train if v.rows == len(train) else short_history(train, v.rows or len(train))
        # the recorded files are fitted on d00.dat (500 rows) whatever the library's training rows
        rec = recorded if v.rows == len(train) else None
        if v.kind == "central":
            factory: MonitorFactory = CentralReference(units_of(config))
        else:
            cfg = {"off": cross_plant_off, "learned-graph": learned_graph_only}.get(v.kind, lambda c: c)(config)
            trained = v.kind in ("fedrca", "learned-graph")
            factory = fedrca_factory(cfg, trained=trained, epsilon=v.epsilon or math.inf)
        results[v.key] = measure(factory, nominal, far_frames, fault_frames, rec)
        if v.kind == "fedrca":
            e = "inf" if math.isinf(v.epsilon or math.inf) else f"{v.epsilon:g}"
            results[f"first-{v.rows}-{e}"] = results[v.key].derived(first_alarm)
        print(f"  {v.label}: {time.perf_counter() - t0:.1f} s", file=sys.stderr, flush=True)
    diagnosis = diagnose(results[f"fedrca-{rows[0]}-inf"], train, far_frames, fault_frames, config, args.smoke)
    run = {
        "rows": rows,
        "epsilons": epsilons,
        "recorded": recorded is not None,
        "fault runs": sorted(fault_frames),
        "train rows": len(train),
        "fault seeds": list(library.fault_seeds),
        "train seeds": list(library.train_seeds),
        "far seeds": list(library.far_seeds),
    }
    return results, diagnosis, run


#: the format of a --save-outputs file
OUTPUTS_FORMAT = "fedrca-bench-faults-outputs/1"


def save_outputs(
    path: str | Path, results: dict[str, Measured], diagnosis: list[tuple[str, pd.DataFrame]], run: dict[str, Any]
) -> Path:
    """Pickle every monitor's outputs (without the trained sites, which hold open resources) for
    :func:`load_outputs`: a local cache of this bench's own work, read back only by it."""
    import pickle

    slim = {k: Measured(m.far, m.faults, m.recorded) for k, m in results.items()}
    out = Path(path)
    with out.open("wb") as f:
        pickle.dump({"format": OUTPUTS_FORMAT, "results": slim, "diagnosis": diagnosis, "run": run}, f, protocol=5)
    return out


def load_outputs(path: str | Path) -> dict[str, Any]:
    """What :func:`save_outputs` wrote (a pickle: read only files this bench wrote itself)."""
    import pickle

    with Path(path).open("rb") as f:
        data = pickle.load(f)  # the bench's own cache file
    if not isinstance(data, dict) or data.get("format") != OUTPUTS_FORMAT:
        raise SystemExit(f"bench_faults: {path} is not a --save-outputs file ({OUTPUTS_FORMAT})")
    return data


#: bench/run.py --smoke: the smoke run's library (16-h runs, IDV 4 and 6, one seed of each kind)
SMOKE: dict[str, Any] = {}


def main(argv: list[str] | None = None, smoke: bool = False) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--idvs", default=",".join(map(str, IDVS)))
    parser.add_argument("--fault-seeds", default=",".join(map(str, RCA_FAULT_SEEDS)))
    parser.add_argument("--train-seeds", default=",".join(map(str, TRAIN_SEEDS)))
    parser.add_argument("--far-seeds", default=",".join(map(str, FAR_SEEDS)))
    parser.add_argument("--rows", default=f"0,{SHORT_ROWS}", help="training rows: 0 = all of the training seeds")
    parser.add_argument("--epsilons", default="inf,2", help="flag epsilons")
    parser.add_argument("--config", default=str(REPO / "config" / "tep.yaml"))
    parser.add_argument("--out", default=str(REPO / "docs" / "faults.md"), help="markdown file, '-' to only print")
    parser.add_argument("--no-generate", action="store_true", help="fail instead of simulating missing runs")
    parser.add_argument("--available", action="store_true", help="use only the cached fault runs (partial library)")
    parser.add_argument("--no-recorded", action="store_true", help="leave out the recorded Braatz files")
    parser.add_argument(
        "--calibration", default=None, metavar="PATH",
        help="write the calibration maps fitted on every run here, one per part of the library --maps names, keyed by "
        "its training rows (and flag epsilon) (config/tep.calibration.json is the shipped file)",
    )  # fmt: skip
    parser.add_argument(
        "--save-outputs", default=None, metavar="PATH",
        help="also write every monitor's outputs (verdicts, the engine's evidence, flags) and the diagnosis tables "
        "to PATH (a pickle): --load-outputs then scores them again without running the monitors, e.g. to refit the "
        "calibration map",
    )  # fmt: skip
    parser.add_argument(
        "--load-outputs", default=None, metavar="PATH",
        help="score the outputs a --save-outputs run wrote instead of running the monitors (the library's runs are "
        "not read; the same monitors, the fedrca of this checkout's outputs as they were when saved)",
    )  # fmt: skip
    parser.add_argument(
        "--set-thresholds", default=None, choices=("pooled", "rows", "setting"),
        help="what the candidate sets' thresholds are fitted for in the cross-validation: one for every setting "
        "(pooled), one per training size or one per setting (default: rca_calibration.SHIPPED_THRESHOLDS, what "
        "config/tep.calibration.json ships; with --calibration, no finer than --maps: each map has one table)",
    )  # fmt: skip
    parser.add_argument(
        "--maps", default=None, choices=("pooled", "rows", "setting", "rows-shrunk", "setting-shrunk"),
        help="what one calibration map is fitted for in the cross-validation, and how the maps --calibration writes "
        "are keyed: every setting (pooled: one map), each training size, each setting (training size and flag "
        "epsilon), each training size shrunk toward a shared map, or each setting shrunk toward its training size's "
        "map (default: rca_calibration.SHIPPED_MAPS, what config/tep.calibration.json ships)",
    )  # fmt: skip
    parser.add_argument(
        "--thresholds-from", default=None, choices=("inner", "outer"),
        help="what the written file's set thresholds are fitted on: inner, the inner folds of the nested "
        "cross-validation pooled (maps that saw neither of two seeds and two IDV groups, as those of the figures' "
        "thresholds); outer, the cross-validation's out-of-fold probabilities (maps that saw all but one seed and one "
        "IDV group) (default: rca_calibration.SHIPPED_THRESHOLDS_FROM, what config/tep.calibration.json ships; the "
        "table shows the file's threshold on the out-of-fold probabilities next to the cross-validated sets)",
    )  # fmt: skip
    parser.add_argument(
        "--set-rule", default=None, choices=("mass", "plant"),
        help="how a candidate set is built from the calibrated probabilities (default: rca_calibration.SET_RULE, "
        "what config/tep.calibration.json ships; the other is an ablation: not with --calibration): mass, the most "
        "probable plants until their sum reaches the threshold; plant, every plant of probability at least it",
    )  # fmt: skip
    parser.add_argument(
        "--family", default=None, choices=FAMILIES,
        help="what the calibration maps weigh, in the cross-validation and in the file --calibration writes "
        "(default: rca_calibration.SHIPPED_FAMILY, what config/tep.calibration.json ships): features, the "
        "plant-agnostic features alone; plants, also a bias, the named and the share feature per plant: a map of "
        "this site's plants alone, fitted per site (a site of other plants refuses it)",
    )  # fmt: skip
    parser.add_argument(
        "--compare-families", default="", metavar="FAMILIES",
        help="other families (comma-separated: features, plants) scored by the same nested cross-validation on the "
        "same runs, their rows and bars next to --family's (the file is --family's)",
    )  # fmt: skip
    parser.add_argument(
        "--smoke", action="store_true", help="tiny run (IDV 4 and 6, one seed of each kind, 16-h runs, eps inf): "
        "the same code path, no figure to keep (bench/run.py --smoke)"
    )  # fmt: skip
    # bench/run.py calls main() without arguments: the defaults, never run.py's own argv
    argv = [] if argv is None else list(argv)
    args = parser.parse_args(argv)
    args.maps, args.set_thresholds = args.maps or _shipped()[0], args.set_thresholds or _shipped()[1]
    if args.calibration and not _shippable(args.maps, args.set_thresholds):
        parser.error(f"--set-thresholds {args.set_thresholds} is finer than --maps {args.maps}: a map of the file "
                     "would need several threshold tables; leave out --calibration (an ablation of the "
                     "cross-validated figures) or fit the maps as finely")  # fmt: skip
    compare = [f for f in args.compare_families.split(",") if f.strip()]
    unknown = sorted(set(compare) - {"features", "plants"})
    if unknown:
        parser.error(f"--compare-families: unknown {', '.join(unknown)}; one or more of features, plants")
    if args.calibration and args.set_rule not in (None, _set_rule()):
        parser.error(f"--set-rule {args.set_rule} is an ablation; the shipped map's rule is {_set_rule()}: leave out "
                     "--calibration")  # fmt: skip
    seeds = lambda text: tuple(int(s) for s in text.split(",") if s.strip())  # noqa: E731
    hours = 48.0
    if args.smoke or smoke:
        args.idvs, args.fault_seeds, args.train_seeds, args.far_seeds = "4,6", "100", "200", "300"
        args.rows, args.epsilons, args.out, args.no_recorded, args.smoke, hours = "0", "inf", "-", True, True, 16.0
    library = Library(
        seeds(args.fault_seeds), seeds(args.train_seeds), seeds(args.far_seeds), seeds(args.idvs), hours=hours
    )
    if min((*library.fault_seeds, *library.train_seeds, *library.far_seeds)) < 100:
        print("bench_faults: note: seeds below 100 are the independent check's; use them only for that check")
    started = time.perf_counter()
    config = load_config(args.config)
    if args.load_outputs:
        saved = load_outputs(args.load_outputs)
        results, diagnosis, run = saved["results"], saved["diagnosis"], saved["run"]
        print(f"outputs of {len(results)} monitors read from {args.load_outputs} (saved by: {run['command']})")
    else:
        results, diagnosis, run = measure_all(args, library, config)
        run["command"] = ("python bench/bench_faults.py " + " ".join(argv)).strip()
        run["seconds"] = time.perf_counter() - started
        if args.save_outputs:
            save_outputs(args.save_outputs, results, diagnosis, run)
            print(f"wrote the monitors' outputs to {args.save_outputs}", flush=True)
    rows, epsilons, vs = run["rows"], run["epsilons"], variants(run["rows"], run["epsilons"])
    has_recorded = run["recorded"]
    fault_keys, train_rows = run["fault runs"], run["train rows"]
    idvs = sorted({i for i, _ in fault_keys})
    summary = summary_table(results, vs)
    pd.set_option("display.width", 250)
    pd.set_option("display.max_columns", 30)
    pd.set_option("display.max_colwidth", 70)
    print("\nSummary (RCA over the detected runs with a unit truth)\n" + summary.to_string(index=False))
    tables = {}
    for n in rows:
        for eps in epsilons:
            tables[(n, eps)] = idv_table(results, n, eps, idvs)
            print(f"\nPer IDV, {n} training rows, flag epsilon {eps:g}\n" + tables[(n, eps)].to_string(index=False))
    if has_recorded:
        rec_rows = []
        for v in vs:
            if v.rows != train_rows:
                continue
            for r in recorded_rows(results[v.key]):
                rec_rows.append({"monitor": v.label, **{k: r.get(k) for k in (
                    "file", "FAR", "FDR", "delay", "root", "root share", "correct", "RCA delay")}})  # fmt: skip
        rec_table = pd.DataFrame(rec_rows)
        print("\nRecorded Braatz files (fitted on d00.dat)\n" + rec_table.to_string(index=False))
    far_table = pd.DataFrame(
        [{"monitor": v.label, **{f"seed {r['seed']}": r["FAR"] for r in far_rows(results[v.key])}} for v in vs]
    )
    print("\nFAR per nominal seed\n" + far_table.to_string(index=False))
    bars = [] if args.smoke else acceptance(results, rows)
    section = calibration_section(
        results, vs, config.rca.coverage, args.set_thresholds, args.maps, args.set_rule, args.thresholds_from,
        args.family, compare,
    )  # fmt: skip
    print(f"\nCandidate sets and calibration ({section.counts})\n" + section.table.to_string(index=False))
    print(section.folds_text)
    for setting, table in section.reliability.items():
        print(f"\nReliability, {setting} (cross-validated)\n" + table.to_string(index=False))
    if has_recorded:
        rec_sets = recorded_sets(results, vs, section.calibration, config.rca.coverage)
        print("\nRecorded files with the library's map\n" + rec_sets.to_string(index=False))
    if args.calibration:
        Path(args.calibration).write_text(section.calibration.to_json())
        print(f"\nwrote the calibration map(s) {section.calibration.id} to {args.calibration}:")
        for m, r in zip(section.calibration.maps, section.calibration.ranges, strict=True):
            where = "; ".join(f"{k} [{lo:g}, {hi:g})" for k, (lo, hi) in r.items()) or "every site"
            print(f"  {m.id} ({where}): 0.9 threshold {m.threshold(0.9):g}")
    for title, table in diagnosis:
        print(f"\n{title}\n" + table.to_string(index=False))
    if bars:
        print("\nIssue-22 bars on this library:\n  " + "\n  ".join(bars))
        print("\nIssue-35 bars on this library:\n  " + "\n  ".join(section.bars))
    elapsed = time.perf_counter() - started
    if args.out != "-":
        cmd = ("python bench/bench_faults.py " + " ".join(argv)).strip()
        timing = f"{elapsed:.0f} s"
        if args.load_outputs:  # the monitors' outputs are a saved run's: the command without the cache, no time
            kept = [
                a
                for a, b in zip(argv, ["", *argv[:-1]], strict=True)
                if a not in ("--load-outputs", "--save-outputs") and b not in ("--load-outputs", "--save-outputs")
            ]
            cmd, timing = ("python bench/bench_faults.py " + " ".join(kept)).strip(), "TODO(lead: time alone)"
        parts = [
            "# Fault library: detection and root cause on every TEP disturbance",
            "",
            "Generated by `bench/bench_faults.py` (`make docs-figures`); do not edit by hand.",
            f"Command: `{cmd.strip()}` ({timing}).",
            "",
            f"Library: revised TEP (tep-studio {_version()}) under its decentralised control at the design rate "
            f"(0.0005 h), mode 1, 48 h, 3-minute samples, IDV on from 8 h (row {ONSET_SAMPLE}); fault seeds "
            f"{run['fault seeds']} ({len(fault_keys)} fault runs), training seeds {run['train seeds']} "
            f"(every monitor calibrated on nominal rows only: all {train_rows} rows, or the first {SHORT_ROWS}), FAR "
            f"seeds {run['far seeds']}. Alarm = any plant, any flag (Z_c or Z_a); detected = FDR >= "
            f"{DETECTED}; root = majority among the verdicts naming a root from the onset on; candidates = the plants "
            "shown next to it in at least half of those verdicts; RCA delay = rows to the first verdict naming a true "
            "root. The monitors and peers are described in the module docstring of `bench/bench_faults.py`.",
            "",
            "## Summary",
            "",
            "RCA over the detected runs with a unit truth (the candidate sets: next section).",
            "",
            _md(summary),
            "",
            "## Candidate sets and calibrated probabilities",
            "",
            CALIBRATION_TEXT.format(
                maps=section.maps_text, thresholds=section.thresholds_text, file_thresholds=section.file_thresholds_text
            )
            + f" Figures from {section.counts}.",
            "",
            _md(section.table),
            "",
            section.folds_text,
            "",
            "### Reliability diagrams",
            "",
            "Share of verdicts whose named root is right against the probability they gave it (blue: calibrated, "
            "cross-validated; red: the engine's own posterior; marker area: weight). The bins of the calibrated "
            "probabilities follow the picture.",
            "",
            f"![reliability diagrams]({Path(args.out).stem}_reliability.png)",
            "",
        ]
        for setting, table in section.reliability.items():
            parts += [f"#### {setting}", "", _md(table), ""]
        if has_recorded:
            parts += [
                "### The recorded files with the library's map",
                "",
                "The maps fitted on the whole library (what config/tep.calibration.json ships) on the recorded "
                "Braatz files, which they never saw (fitted on d00.dat, 2,880-row settings' configuration; `map`: "
                "the one of d00.dat's training rows and the flag epsilon, as the RCA side picks it).",
                "",
                _md(rec_sets),
                "",
            ]
        parts += [
            "## Issue-22 bars on this library",
            "",
            *[f"* {b}" for b in bars],
            "",
            "## Issue-35 bars on this library",
            "",
            *[f"* {b}" for b in section.bars],
            "",
        ]
        for (n, eps), table in tables.items():
            parts += [f"## Per IDV: {n} training rows, flag epsilon {eps:g}", "", _md(table), ""]
        if has_recorded:
            parts += ["## Recorded Braatz files (fitted on d00.dat)", "", _md(rec_table), ""]
        parts += ["## Diagnosis: what the learned cross-plant part does", "", DIAGNOSIS_TEXT, ""]
        for title, table in diagnosis:
            parts += [f"### {title}", "", _md(table), ""]
        parts += ["## FAR per nominal seed", "", _md(far_table), ""]
        Path(args.out).write_text("\n".join(parts))
        import rca_calibration as rc

        rc.reliability_figure(Path(args.out).with_name(f"{Path(args.out).stem}_reliability.png"), section.panels)
        print(f"\nwrote {args.out}")
    print(f"bench_faults: done ({elapsed:.0f} s)")
    return 0


def _set_rule() -> str:
    import rca_calibration as rc

    return str(rc.SET_RULE)


def _shipped() -> tuple[str, str]:
    """What one map and one set threshold of config/tep.calibration.json are fitted for."""
    import rca_calibration as rc

    return str(rc.SHIPPED_MAPS), str(rc.SHIPPED_THRESHOLDS)


def _shippable(maps_by: str, thresholds_by: str) -> bool:
    import rca_calibration as rc

    return bool(rc.shippable(maps_by, thresholds_by))


def _version() -> str:
    try:
        from fedrca.connectors.simulator import simulator_version

        return simulator_version()
    except Exception:  # the table still says what it measured
        return "?"


if __name__ == "__main__":
    # run as the module bench_faults (not __main__), so that --save-outputs pickles name its classes by a module
    # --load-outputs and other scripts can import
    import bench_faults

    sys.exit(bench_faults.main(sys.argv[1:]))
