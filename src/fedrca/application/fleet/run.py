"""Run a configured fleet (in one process, or over Kafka) and evaluate the participants' detectors.

:func:`run_fleet` loads the participants' data, runs the protocol
(:func:`fedrca.fleet.model.simulate_fleet`, or the Kafka driver of
:mod:`fedrca.application.fleet.kafka`), then builds each participant's
:class:`~fedrca.fleet.detector.FleetDetector` from the shared model and
its own data and scores the ``evaluate`` files: false-alarm rate on the nominal
ones, detection rate after ``onset`` on the fault ones.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from fedrca.application.fleet.config import FleetConfig
from fedrca.application.fleet.sources import check_fleet, load_file, load_participants
from fedrca.application.fleet.store import _json_safe, save_fleet_model
from fedrca.application.outputs import write_file
from fedrca.exceptions import ConfigError
from fedrca.fleet.detector import FleetDetector
from fedrca.fleet.model import FleetRun, InProcessNetwork, simulate_fleet

__all__ = ["FleetOutcome", "evaluate_fleet", "run_fleet", "write_outcome"]

FloatArray = NDArray[np.float64]
Runner = Callable[[dict[str, FloatArray]], FleetRun]


@dataclass
class FleetOutcome:
    """A fleet run and its evaluation.

    Attributes
    ----------
    run : the protocol's outcome (results per participant, messages)
    columns : the variables, in order
    seconds : wall time of the protocol
    evaluation : one row per evaluated file: file, kind (nominal/fault), rate per participant
    """

    run: FleetRun
    columns: list[str]
    seconds: float
    evaluation: list[dict[str, Any]] = field(default_factory=list)

    def summary(self) -> dict[str, Any]:
        """JSON-friendly figures of the run and its evaluation."""
        out = self.run.summary()
        out["seconds"] = round(self.seconds, 2)
        out["max_parameter_difference"] = self.run.max_parameter_difference()
        out["evaluation"] = self.evaluation
        out["l_diversity"] = {n: [round(float(np.max(e)), 4) for e in r.entropies] for n, r in self.run.results.items()}
        return out


def run_fleet(config: FleetConfig, runner: Runner | None = None) -> FleetOutcome:
    """Load and check the data (the participants' and the evaluation files), run the protocol (in process
    unless ``runner`` is given), evaluate. Everything that can refuse the run is read before the learning."""
    data, columns = load_participants(config)
    check_fleet(config, data, columns)
    files = evaluation_files(config, columns)
    started = time.perf_counter()
    if runner is None:
        run = simulate_fleet(data, config.settings(), config.peer_graph(), seed=config.seed, network=InProcessNetwork())
    else:
        run = runner(data)
    outcome = FleetOutcome(run, columns, time.perf_counter() - started)
    if config.evaluate is not None:
        outcome.evaluation = evaluate_fleet(config, run, data, files)
    return outcome


#: An evaluation file: kind (nominal/fault), label, path, samples (N, M), first scored row.
EvaluationFile = tuple[str, str, str, FloatArray, int]


def evaluation_files(config: FleetConfig, columns: list[str]) -> list[EvaluationFile]:
    """The ``evaluate`` files, read (the fleet's variables) and checked against ``evaluate.onset``."""
    ev = config.evaluate
    if ev is None:
        return []
    files = [("nominal", Path(p).name, p) for p in ev.nominal] + [("fault", k, p) for k, p in ev.faults.items()]
    out: list[EvaluationFile] = []
    for kind, label, path in files:
        X, _ = load_file(path, config.data, variables=columns)
        start = 0 if kind == "nominal" else ev.onset
        if start >= len(X):
            raise ConfigError(
                f"{start} is past the {len(X)} rows of {path}; give a row of the fault files", source=config.source,
                key="evaluate.onset",
            )  # fmt: skip
        out.append((kind, label, str(path), X, start))
    return out


def evaluate_fleet(
    config: FleetConfig, run: FleetRun, data: dict[str, FloatArray], files: list[EvaluationFile]
) -> list[dict[str, Any]]:
    """Alarm rates on the ``evaluate`` files of the detector of every participant whose plant they come
    from (``evaluate.participants``), each with its own calibration from the run."""
    ev = config.evaluate
    if ev is None:
        return []
    names = ev.participants or list(data)
    detectors = {
        n: FleetDetector(n, model=run.results[n].model, calibration=run.results[n].calibration, seed=config.seed).fit(
            data[n]
        )
        for n in names
    }
    rows = []
    for kind, label, path, X, start in files:
        rates = {n: float(_fresh(det).step_batch(X).zc[start:].mean()) for n, det in detectors.items()}
        values = np.array(list(rates.values()))
        rows.append(
            {
                "file": path,
                "label": label,
                "kind": kind,
                "rows": len(X) - start,
                "mean": float(values.mean()),
                "min": float(values.min()),
                "max": float(values.max()),
                "per_participant": rates,
            }
        )
    return rows


def _fresh(detector: FleetDetector) -> FleetDetector:
    """The detector at the start of a new stream (each evaluated file is one)."""
    detector.reset()
    return detector


def write_outcome(out_dir: str | Path, outcome: FleetOutcome) -> dict[str, Path]:
    """Write ``model.npz``/``model.json`` (shared), ``participants/<name>.json`` (each one's own
    weights and calibration, in deployment kept by that participant) and ``report.json``; returns the paths.

    The caller stages ``out_dir`` (:meth:`fedrca.application.outputs.Outputs.folder`): the files appear together.
    """
    out = Path(out_dir)
    model_path = save_fleet_model(out / "model.npz", outcome.run.model, columns=outcome.columns)
    part_dir = out / "participants"
    for name, res in outcome.run.results.items():
        write_file(
            part_dir / f"{name}.json",
            json.dumps(
                {
                    "participant": name,
                    "weights": res.weights.tolist(),
                    "iterations": res.iterations,
                    "calibration": res.calibration.to_dict(),
                }
            )
            + "\n",
        )
    report = write_file(out / "report.json", json.dumps(_json_safe(outcome.summary()), indent=2) + "\n")
    return {"model": model_path, "report": report, "participants": part_dir}
