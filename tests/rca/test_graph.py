"""Interdependency graph: closure, learned blocks with their null distribution, JSON and picture."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fedrca.cli.report import draw_graph
from fedrca.datasets import linear_multiplant
from fedrca.exceptions import ArtifactError, ConfigError, DataError
from fedrca.rca import InterdependencyGraph
from fedrca.rca.graph import transitive_closure


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 7).flatmap(lambda m: st.lists(st.booleans(), min_size=m * m, max_size=m * m)))
def test_closure_equals_reachability_by_search(bits):
    M = round(len(bits) ** 0.5)
    adj = np.array(bits, dtype=bool).reshape(M, M)
    R = transitive_closure(adj)
    for n in range(M):
        seen, frontier = set(), [n]
        while frontier:
            k = frontier.pop()
            for m in np.flatnonzero(adj[k]):
                if m not in seen:
                    seen.add(int(m))
                    frontier.append(int(m))
        assert set(np.flatnonzero(R[n]).tolist()) == seen


def test_edges_and_descendants():
    g = InterdependencyGraph.from_edges(["a", "b", "c", "d"], [("a", "b"), ("b", "c"), ("d", "c")])
    assert g.descendants("a") == {"b", "c"} and g.descendants("c") == set() and g.descendants("d") == {"c"}
    assert g.edges() == [("a", "b"), ("b", "c"), ("d", "c")]
    with pytest.raises(ConfigError, match="unknown plant 'x'"):
        InterdependencyGraph.from_edges(["a"], [("a", "x")])
    with pytest.raises(DataError, match="unknown plant"):
        g.descendants("zz")


def test_learned_graph_recovers_the_true_blocks_from_a_least_squares_transition():
    # the server's estimate: OLS of x(t) on x(t-1) with entry-wise standard errors
    data = linear_multiplant(n_samples=3000, n_plants=4, states_per_plant=2, coupling=0.4, seed=3)
    X = data.X
    Z, Y = X[:-1], X[1:]
    B, *_ = np.linalg.lstsq(Z, Y, rcond=None)
    A = B.T
    resid = Y - Z @ B
    s2 = resid.var(axis=0, ddof=Z.shape[1])
    se = np.sqrt(np.outer(s2, np.diag(np.linalg.inv(Z.T @ Z))))
    g = InterdependencyGraph.from_transition(data.plants, A, [2] * 4, stderr=se, alpha=0.01)
    assert np.array_equal(g.adjacency, data.graph)
    assert g.pvalue is not None and np.all(g.pvalue[data.graph] < 1e-6)
    # without standard errors: robust common scale from the (mostly null) off-diagonal entries
    g2 = InterdependencyGraph.from_transition(data.plants, A, [2] * 4, stderr=None, alpha=0.01)
    assert np.array_equal(g2.adjacency, data.graph)


def test_bad_server_arrays_are_refused():
    with pytest.raises(ArtifactError, match=r"\(4, 4\)"):
        InterdependencyGraph.from_transition(["a", "b"], np.zeros((3, 3)), [2, 2])
    with pytest.raises(ArtifactError, match="state blocks"):
        InterdependencyGraph.from_transition(["a", "b"], np.zeros((4, 4)), [4])
    with pytest.raises(ArtifactError, match="NaN"):
        InterdependencyGraph.from_transition(["a", "b"], np.full((4, 4), np.nan), [2, 2])


def test_json_round_trip_and_picture(tmp_path):
    g = InterdependencyGraph.from_edges(["a", "b", "c"], [("a", "b"), ("b", "a"), ("b", "c")])
    back = InterdependencyGraph.from_json(g.to_json())
    assert back == g and back.source == "config"
    with pytest.raises(DataError, match="not an interdependency graph"):
        InterdependencyGraph.from_json('{"plants": ["a"]}')
    png = draw_graph(g, tmp_path / "graph.png")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 5000
