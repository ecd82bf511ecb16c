"""RCA on the synthetic benchmarks (small versions of bench/bench_rca.py, Theta = 0, true graph)."""

from __future__ import annotations

import math

from fedrca.application.synthetic import run_synthetic
from fedrca.datasets import chain_graph, nonlinear_network, nonlinear_two_plant


def test_nonlinear_two_plant_rca_f1_without_flag_privacy():
    result = run_synthetic(nonlinear_two_plant, n_train=2000, n_test=3000, n_events=40)
    rca = result.evaluation.rca
    assert rca.n_events == 40
    assert rca.f1 >= 0.8 and rca.precision >= 0.8 and rca.recall >= 0.8
    # both plants were roots, and both were named
    named = {e["majority"] for e in rca.per_event}
    assert named == {"plant1", "plant2"}


def test_flag_privacy_costs_recall_but_not_determinism():
    strict = run_synthetic(nonlinear_two_plant, n_train=2000, n_test=3000, n_events=40, epsilon=1.0)
    again = run_synthetic(nonlinear_two_plant, n_train=2000, n_test=3000, n_events=40, epsilon=1.0)
    assert [v.to_dict() for v in strict.run.verdicts] == [v.to_dict() for v in again.run.verdicts]
    open_ = run_synthetic(nonlinear_two_plant, n_train=2000, n_test=3000, n_events=40, epsilon=math.inf)
    assert strict.evaluation.rca.recall < open_.evaluation.rca.recall
    assert strict.evaluation.rca.precision >= 0.7


def test_four_plant_chain_accuracy():
    def chain(**kw):
        return nonlinear_network(chain_graph(4), **kw)

    result = run_synthetic(chain, n_train=3000, n_test=4000, n_events=40)
    rca = result.evaluation.rca
    assert rca.accuracy >= 0.9
    assert {e["root"] for e in rca.per_event} == {"plant1", "plant2", "plant3", "plant4"}
    # a root upstream names its downstream effects as propagated
    upstream = [v for v in result.run.verdicts if v.root_cause == "plant1" and v.propagated]
    assert upstream and all(set(v.propagated) <= {"plant2", "plant3", "plant4"} for v in upstream)
