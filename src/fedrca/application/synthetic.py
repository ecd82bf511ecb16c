"""Synthetic RCA experiments: site configurations for generated plants and one-call runs.

Used by ``bench/bench_rca.py`` and the tests. A synthetic data set from
:mod:`fedrca.datasets` becomes a site configuration (one plant per generated
plant, identified proprietary models, optional graph edges from the true graph),
the detectors are fitted on a nominal run, and a run with injected root-cause
events is scored with :func:`fedrca.application.evaluation.evaluate_run`.

Examples
--------
>>> from fedrca.datasets import nonlinear_two_plant
>>> cfg = synthetic_config(nonlinear_two_plant(n_samples=200))
>>> cfg.plant_names, cfg.graph.edges
(['plant1', 'plant2'], [('plant1', 'plant2')])
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from fedrca.application.evaluation import Evaluation, evaluate_run
from fedrca.application.site import PipelineRun, prepare_site, run_pipeline
from fedrca.application.training import train_site
from fedrca.config import RCASettings, SiteConfig, parse_config
from fedrca.datasets.synthetic import SyntheticData
from fedrca.exceptions import ConfigError
from fedrca.rca.metrics import FaultEvent

__all__ = [
    "SyntheticResult",
    "frame_of",
    "run_synthetic",
    "synthetic_config",
    "train_parameters",
]

#: Training settings of the synthetic benchmarks (those of config/synthetic.yaml: RFF clients,
#: random-feature server, instrumental-variables Granger estimate for the graph).
SYNTHETIC_TRAINING: dict[str, Any] = {
    "rounds": 20,
    "estimator": "iv",
    "server_n_features": 64,
    "server_lengthscale": 1.0,
}


def synthetic_config(
    data: SyntheticData,
    *,
    graph: bool = True,
    epsilon: float = math.inf,
    features: str = "rff",
    rca: dict[str, Any] | None = None,
    training: dict[str, Any] | None = None,
    seed: int = 0,
) -> SiteConfig:
    """Site configuration of a synthetic data set (columns ``plantN.yK``).

    ``graph``: give the true interdependency graph as ``graph.edges`` (else the
    engine uses the learned graph with ``--params``, or the complete graph).
    """
    P = data.state_slices[0].stop - data.state_slices[0].start
    raw: dict[str, Any] = {
        "site": "synthetic",
        "dataset": {"format": "synthetic", "columns": data.columns()},
        "defaults": {
            "model": {"kind": "identified", "n_states": P},
            "augmentation": {"features": features, "n_features": 64, "lengthscale": 2.0},
            "scoring": {"threshold": "percentile", "percentile": 99, "calibration": "cv"},
        },
        "plants": [{"name": name, "sensors": data.sensor_names(m)} for m, name in enumerate(data.plants)],
        "privacy": {"flag_epsilon": epsilon, "seed": seed},
        "rca": dict(rca or {}),
        "training": dict(training or {}),
    }
    if graph:
        raw["graph"] = {"edges": [[data.plants[n], data.plants[m]] for n, m in zip(*np.nonzero(data.graph))]}
    return parse_config(raw, source="synthetic")


def frame_of(data: SyntheticData) -> pd.DataFrame:
    """Sensors of a synthetic data set as a frame with the configured column names."""
    return pd.DataFrame(data.Y, columns=data.columns())


@dataclass
class SyntheticResult:
    """One benchmark run: the pipeline run, its events and scores."""

    run: PipelineRun
    events: list[FaultEvent]
    evaluation: Evaluation


def train_parameters(config: SiteConfig, nominal: pd.DataFrame, out: str | Path) -> Path:
    """Run federated training (``fedrca.training``) on nominal data; the artifacts go to ``out``."""
    train_site(config, nominal, out, resume=False, progress=None, source="synthetic nominal data")
    return Path(out)


def run_synthetic(
    generate: Callable[..., SyntheticData],
    *,
    n_train: int,
    n_test: int,
    n_events: int,
    epsilon: float = math.inf,
    graph: bool = True,
    params_dir: str | Path | None = None,
    train: bool = False,
    settings: RCASettings | None = None,
    train_seed: int = 1,
    test_seed: int = 2,
) -> SyntheticResult:
    """Fit on a nominal run of ``generate`` and score RCA on a run with ``n_events`` injected events.

    ``generate(n_samples=..., n_events=..., seed=...)`` must return the same system
    for every seed (only noise and events change), as the generators of
    :mod:`fedrca.datasets` do. With ``train`` the plants first train federatedly on
    the nominal run and the artifacts written to ``params_dir`` are used (Theta,
    re-calibrated augmented scorers and, without ``graph``, the learned graph).
    """
    nominal = generate(n_samples=n_train, n_events=0, seed=train_seed)
    test = generate(n_samples=n_test, n_events=n_events, seed=test_seed)
    config = synthetic_config(test, graph=graph, epsilon=epsilon, training=SYNTHETIC_TRAINING)
    if train:
        if params_dir is None:
            raise ConfigError("train=True needs params_dir (where the artifacts are written)")
        train_parameters(config, frame_of(nominal), params_dir)
    site = prepare_site(config, frame_of(nominal), params_dir=params_dir, settings=settings)
    run = run_pipeline(site, frame_of(test))
    events = [FaultEvent(e.start, e.end, test.plants[e.root]) for e in test.events]
    return SyntheticResult(run, events, evaluate_run(run, events))
