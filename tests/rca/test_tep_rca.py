"""TEP acceptance (issue 4): trained on d00.dat with config/tep.yaml, faults 01, 04, 05, 06.

The majority of the verdicts issued after the onset (sample 160) must name the
unit where the fault originates. Fault 01 accepts the feed or the stripper (docs/rca.md,
"Fault 01: why the flags cannot tell the feed from the stripper"): the A/C ratio step of stream 4 reaches the
stripper (where stream 4 enters) and the reactor's feed analysers before any feed
sensor moves, and the feed flows move later through the reactor's composition and
level loops, so the flags are explained as well by a stripper (or reactor) root
that the feed compensates as by a feed root that its own sensors cannot see.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from fedrca.application.evaluation import evaluate_run
from fedrca.application.site import PipelineRun, prepare_site, run_pipeline
from fedrca.config import RCASettings, load_config
from fedrca.datasets.loader import load_frame
from fedrca.datasets.tep import TEP_FLOWSHEET
from fedrca.rca import InterdependencyGraph, build_engine
from fedrca.rca.metrics import FaultEvent

FAULTS = {"04": "reactor", "05": "separator", "06": "feed"}


@pytest.fixture(scope="module")
def trained_site(repo, tmp_path_factory):
    from fedrca.application.training import train_site

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


def test_trained_run_uses_the_configured_graph_and_trained_parameters(trained_site):
    # config/tep.yaml names the complete graph: the learned one keeps at most one edge at this budget
    assert trained_site.graph.source == "complete"
    assert trained_site.params_version != "proprietary"
    assert trained_site.engine.model.separation != (0.0,)


@pytest.mark.parametrize(("which", "fault"), [("trained_site", "01"), ("untrained_site", "05")])
def test_blocks_equal_rows_on_the_recorded_faults(request, repo, which, fault):
    """The RCA worker's engine on blocks gives the per-row engine's verdicts on the recorded files (issue 32;
    every file at both flag epsilons: tests/rca/test_block.py, make exhaustive)."""
    from tests.rca.test_block import blocks_equal_rows_on

    site = request.getfixturevalue(which)
    assert blocks_equal_rows_on(site, run_pipeline(site, repo / f"data/tep/d{fault}_te.dat"), seed=int(fault)) > 20


@pytest.mark.xfail(
    strict=True, reason="known miss: fault 01 is named the stripper, the feed is only a candidate (docs/rca.md)"
)
def test_fault_01_names_the_feed(trained_site, repo):
    after, _ = after_onset(trained_site, repo, "01", "feed")
    assert after["majority"] == "feed"


def rerun(site, run, **settings) -> PipelineRun:
    """The same published flags (and severity levels) through an engine with the declared TEP flowsheet
    and ``settings``."""
    graph = InterdependencyGraph.from_edges(site.config.plant_names, TEP_FLOWSHEET)
    engine = build_engine(
        site.config,
        trained=site.params_version != "proprietary",
        nominal_flags=site.nominal_flags,
        graph=graph,
        settings=RCASettings(**settings),
    )
    levels = np.column_stack([run.results[p].level_pub for p in site.config.plant_names])
    verdicts = engine.run(range(960), run.published(), levels=levels)
    return PipelineRun(dataclasses.replace(site, engine=engine), run.results, verdicts)


def test_declaring_the_feed_unseen_changes_no_verdict_and_fault_01_stays_mostly_unnamed(trained_site, repo):
    """With the flowsheet declared, fault 01's flags (every unit alarms within a few samples, the
    separator first) name no single root in most verdicts; admitting the feed's unseen entry changes
    none of the verdicts of 01, 04, 05 or 06, and 04, 05 and 06 keep their origin (docs/rca.md)."""
    for fault, root in {**FAULTS, "01": "feed"}.items():
        run = run_pipeline(trained_site, repo / f"data/tep/d{fault}_te.dat")
        plain = rerun(trained_site, run)
        unseen = rerun(trained_site, run, unobserved_entry=["feed"])
        named = [(v.seq, v.root_cause, v.propagated) for v in unseen.verdicts]
        assert named == [(v.seq, v.root_cause, v.propagated) for v in plain.verdicts]
        after = evaluate_run(unseen, [FaultEvent(160, 960, root)]).after_onset
        if fault != "01":
            assert after["majority"] == root and after["correct"] > after["verdicts"] / 2
            continue
        late = [v.root_cause for v in unseen.verdicts if v.seq >= 160]
        assert late and sum(r is None for r in late) > len(late) / 2


@pytest.mark.parametrize("which", ["trained_site", "untrained_site"])
def test_fault_01_is_named_where_stream_4_enters(request, repo, which):
    """config/tep.yaml declares the feed and the stripper (where stream 4 enters) as unseen entries
    (rca.unobserved_entry): the stream-4 A/C step is then named after one of them (issue 13's truth set)."""
    after, _ = after_onset(request.getfixturevalue(which), repo, "01", "stripper")
    assert after["majority"] in {"feed", "stripper"}
