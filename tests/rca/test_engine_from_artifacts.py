"""An RCA worker builds its engine from the training artifacts alone, without any plant's data."""

from __future__ import annotations

import numpy as np
import pandas as pd

from fedrca.application.site import prepare_site, run_pipeline
from fedrca.application.training import train_site
from fedrca.config import load_config
from fedrca.contracts import load_artifacts
from fedrca.datasets import nonlinear_two_plant
from fedrca.rca import build_engine
from tests.training.conftest import REPO


def test_engine_from_artifacts_equals_the_engine_from_nominal_flags(tmp_path):
    config = load_config(REPO / "config" / "synthetic.yaml")
    data = nonlinear_two_plant(n_samples=1200, seed=3)
    nominal = pd.DataFrame(data.Y, columns=data.columns())
    train_site(config, nominal, tmp_path, progress=None)
    site = prepare_site(config, nominal, params_dir=tmp_path)  # has every plant's nominal data
    remote = build_engine(config, artifacts=load_artifacts(tmp_path))  # has only the artifacts
    assert np.array_equal(site.engine.model.nominal, remote.model.nominal)
    untrained = build_engine(config)
    assert not np.array_equal(untrained.model.nominal, remote.model.nominal)
    test = nonlinear_two_plant(n_samples=600, seed=4, n_events=6)
    run = run_pipeline(site, pd.DataFrame(test.Y, columns=test.columns()))
    seqs = np.arange(run.n_samples)
    remote_verdicts = remote.run(seqs, run.published(), ts=seqs * config.dataset.sample_seconds)
    assert [v.to_dict() for v in remote_verdicts] == [v.to_dict() for v in run.verdicts]
    assert any(v.root_cause is not None for v in remote_verdicts)
