"""TEP acceptance (issue 4): trained on d00.dat with config/tep.yaml, faults 01, 04, 05, 06.

The majority of the verdicts issued after the onset (sample 160) must name the
unit where the fault originates. Fault 01 is a known miss (see docs/rca.md): the
A/C ratio step of stream 4 reaches the stripper (where stream 4 enters) and the
reactor's analysers before any feed sensor moves, and the feed flows only react
later through the control loops, so every onset-, persistence- and graph-based
reading of the flags points at the stripper.
"""

from __future__ import annotations

import pytest

from fedrca.config import load_config
from fedrca.rca.evaluation import evaluate_run
from fedrca.rca.metrics import FaultEvent
from fedrca.rca.pipeline import prepare_site, run_pipeline
from fedrca.site import load_frame

FAULTS = {"04": "reactor", "05": "separator", "06": "feed"}


@pytest.fixture(scope="module")
def trained_site(repo, tmp_path_factory):
    from fedrca.training.run import train_site

    config = load_config(repo / "config/tep.yaml")
    params = tmp_path_factory.mktemp("tep_params")
    train_site(config, load_frame(config, repo / "data/tep/d00.dat"), params, resume=False, progress=None)
    return prepare_site(config, repo / "data/tep/d00.dat", params_dir=params)


@pytest.fixture(scope="module")
def untrained_site(repo):
    return prepare_site(load_config(repo / "config/tep.yaml"), repo / "data/tep/d00.dat")


def after_onset(site, repo, fault, root):
    run = run_pipeline(site, repo / f"data/tep/d{fault}_te.dat")
    return evaluate_run(run, [FaultEvent(160, run.n_samples, root)]).after_onset, run


@pytest.mark.parametrize("which", ["trained_site", "untrained_site"])
@pytest.mark.parametrize(("fault", "root"), sorted(FAULTS.items()))
def test_majority_of_verdicts_after_onset_name_the_origin(request, repo, which, fault, root):
    site = request.getfixturevalue(which)
    after, run = after_onset(site, repo, fault, root)
    assert after["majority"] == root
    assert after["correct"] > after["verdicts"] / 2
    assert after["rca_delay"] is not None and after["rca_delay"] <= 10
    # nothing is blamed before the fault starts
    assert not [v for v in run.verdicts if v.seq < 160 and v.root_cause is not None]


def test_trained_run_uses_the_learned_graph_and_trained_parameters(trained_site):
    assert trained_site.graph.source == "learned"
    assert trained_site.params_version != "proprietary"
    assert trained_site.engine.model.separation != (0.0,)


@pytest.mark.xfail(strict=True, reason="known miss: fault 01 reads as a stripper fault from the flags (docs/rca.md)")
def test_fault_01_names_the_feed(trained_site, repo):
    after, _ = after_onset(trained_site, repo, "01", "feed")
    assert after["majority"] == "feed"
