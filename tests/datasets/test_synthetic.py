"""Synthetic generators: seeded, labelled, with the stated structure."""

from __future__ import annotations

import numpy as np
import pytest

from fedrca.datasets import chain_graph, linear_multiplant, nonlinear_network, nonlinear_two_plant
from fedrca.exceptions import DataError


def test_linear_blocks_follow_the_graph_and_are_seeded():
    data = linear_multiplant(n_samples=500, n_plants=3, n_events=4, seed=5)
    assert data.Y.shape == (500, 24) and data.X.shape == (500, 6)
    assert np.linalg.norm(data.block(1, 0)) > 0 and np.linalg.norm(data.block(2, 1)) > 0
    assert np.linalg.norm(data.block(0, 1)) == 0 and np.linalg.norm(data.block(2, 0)) == 0
    assert np.max(np.abs(np.linalg.eigvals(data.A))) < 1
    again = linear_multiplant(n_samples=500, n_plants=3, n_events=4, seed=5)
    assert np.array_equal(data.Y, again.Y)
    other = linear_multiplant(n_samples=500, n_plants=3, n_events=4, seed=6)
    assert np.array_equal(data.A, other.A) and not np.array_equal(data.Y, other.Y)


def test_nonlinear_two_plant_benchmark_shape_and_labels():
    data = nonlinear_two_plant(n_samples=2000, n_events=20, seed=1)
    assert data.Y.shape == (2000, 8) and data.X.shape == (2000, 4)
    assert data.graph.tolist() == [[False, True], [False, False]]
    assert all(e.end - e.start == 10 for e in data.events)
    labelled = data.root_cause >= 0
    assert labelled.sum() == 200
    assert {e.root for e in data.events} == {0, 1}
    assert np.all(data.root_cause[[e.start for e in data.events]] == [e.root for e in data.events])


def test_anomaly_propagates_downstream_only():
    clean = nonlinear_network(chain_graph(3), n_samples=600, seed=3)
    faulty_events = nonlinear_network(chain_graph(3), n_samples=600, n_events=6, seed=3)
    diff = np.abs(faulty_events.X - clean.X).reshape(600, 3, 2).sum(-1)  # per plant
    for ev in faulty_events.events:
        window = slice(ev.start, ev.end + 5)
        # earlier events have decayed to far below the size of this one's effect
        moved = diff[window].max(axis=0) > 1e-3 * diff[window, ev.root].max()
        assert moved[ev.root]
        assert not moved[: ev.root].any()  # upstream plants never see it
        if ev.root < 2:
            assert moved[ev.root + 1]  # the direct child does


def test_too_many_events_is_a_clear_error():
    with pytest.raises(DataError, match="need at least"):
        nonlinear_two_plant(n_samples=200, n_events=50)
