"""PDAG operations: Meek's rules on textbook graphs, CPDAGs, Dor-Tarsi extensions, SHD and arrowhead F1."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fedrca.causal.pdag import (
    cpdag_of_dag,
    edges,
    is_acyclic,
    meek_rules,
    orient_colliders,
    pdag_to_dag,
    score_structure,
    structural_hamming_distance,
    unshielded_triples,
    v_structures,
    vote_graphs,
)
from fedrca.datasets.causal import random_dag
from fedrca.exceptions import DataError


def pdag(p: int, directed=(), undirected=()) -> np.ndarray:
    G = np.zeros((p, p), dtype=bool)
    for i, j in directed:
        G[i, j] = True
    for i, j in undirected:
        G[i, j] = G[j, i] = True
    return G


def test_meek_r1_orients_away_from_an_arrow_into_a_non_adjacent_pair():
    # 0 -> 1 - 2, 0 and 2 non-adjacent  =>  1 -> 2 (else a new v-structure)
    out = meek_rules(pdag(3, directed=[(0, 1)], undirected=[(1, 2)]))
    assert edges(out) == {"directed": [(0, 1), (1, 2)], "undirected": []}


def test_meek_r2_avoids_a_directed_cycle():
    # 0 -> 1 -> 2 and 0 - 2  =>  0 -> 2
    out = meek_rules(pdag(3, directed=[(0, 1), (1, 2)], undirected=[(0, 2)]))
    assert edges(out) == {"directed": [(0, 1), (0, 2), (1, 2)], "undirected": []}


def test_meek_r3_two_non_adjacent_parents_of_b_both_undirected_to_a():
    # a=0, b=1, c=2, d=3: 0 - 2 -> 1, 0 - 3 -> 1, 2 and 3 non-adjacent, 0 - 1  =>  0 -> 1
    out = meek_rules(pdag(4, directed=[(2, 1), (3, 1)], undirected=[(0, 1), (0, 2), (0, 3)]))
    assert edges(out) == {"directed": [(0, 1), (2, 1), (3, 1)], "undirected": [(0, 2), (0, 3)]}


def test_meek_r4_chain_through_an_adjacent_vertex():
    # a=0, b=1, c=2, d=3: 0 - 2 -> 3 -> 1, 2 and 1 non-adjacent, 0 adjacent 3 (0 - 3), 0 - 1  =>  0 -> 1
    G = pdag(4, directed=[(2, 3), (3, 1)], undirected=[(0, 1), (0, 2), (0, 3)])
    out = meek_rules(G)
    assert out[0, 1] and not out[1, 0]
    # without R4 nothing else orients 0 - 1 here (R1-R3 do not apply)
    assert meek_rules(G, rule4=False)[1, 0]


def test_meek_leaves_an_undirected_chain_alone():
    G = pdag(4, undirected=[(0, 1), (1, 2), (2, 3)])
    np.testing.assert_array_equal(meek_rules(G), G)


def test_colliders_prefer_the_stronger_separation_and_skip_conflicts():
    # skeleton 0 - 1 - 2 - 3 (a path), triples (0,1,2) and (1,2,3)
    sk = pdag(4, undirected=[(0, 1), (1, 2), (2, 3)])
    T = unshielded_triples(sk)
    np.testing.assert_array_equal(T, [[0, 1, 2], [1, 2, 3]])
    # both marked colliders: they disagree on 1 - 2; the one with the larger priority wins
    G, applied = orient_colliders(sk, T, [True, True], priority=[0.2, 0.9])
    assert applied == [(1, 2, 3)]
    assert edges(G) == {"directed": [(1, 2), (3, 2)], "undirected": [(0, 1)]}
    G, applied = orient_colliders(sk, T, [True, True], priority=[0.9, 0.2])
    assert applied == [(0, 1, 2)]


@pytest.mark.parametrize("seed", range(12))
def test_cpdag_of_dag_agrees_with_causal_learn(seed):
    from causallearn.graph.Dag import Dag
    from causallearn.graph.GraphNode import GraphNode
    from causallearn.utils.DAG2CPDAG import dag2cpdag

    from fedrca.causal.baselines import pdag_from_causallearn

    p = 4 + seed % 9
    dag = random_dag(p, 2.5, seed=seed)
    nodes = [GraphNode(f"X{i + 1}") for i in range(p)]
    g = Dag(nodes)
    for i, j in zip(*np.nonzero(dag)):
        g.add_directed_edge(nodes[i], nodes[j])
    np.testing.assert_array_equal(cpdag_of_dag(dag), pdag_from_causallearn(dag2cpdag(g).graph))


@settings(max_examples=60, deadline=None)
@given(st.integers(2, 14), st.floats(0.5, 4.0), st.integers(0, 10**6))
def test_dor_tarsi_extends_every_cpdag_to_a_markov_equivalent_dag(p, degree, seed):
    dag = random_dag(p, degree, seed=seed)
    cpdag = cpdag_of_dag(dag)
    ext, exact = pdag_to_dag(cpdag)
    assert exact and is_acyclic(ext) and not (ext & ext.T).any()
    # same skeleton, same v-structures, hence the same CPDAG
    np.testing.assert_array_equal(ext | ext.T, dag | dag.T)
    assert v_structures(ext) == v_structures(dag)
    np.testing.assert_array_equal(cpdag_of_dag(ext), cpdag)
    # the directed edges of the CPDAG are kept
    directed = cpdag & ~cpdag.T
    assert (ext[directed]).all()


def test_dor_tarsi_without_an_extension_still_returns_a_dag():
    # a directed 3-cycle has no DAG extension
    G = pdag(3, directed=[(0, 1), (1, 2), (2, 0)])
    dag, exact = pdag_to_dag(G)
    assert not exact and is_acyclic(dag)
    np.testing.assert_array_equal(dag | dag.T, G | G.T)
    # a 4-cycle of undirected edges: any orientation creates a v-structure the PDAG does not have
    C4 = pdag(4, undirected=[(0, 1), (1, 2), (2, 3), (3, 0)])
    dag, exact = pdag_to_dag(C4)
    assert not exact and is_acyclic(dag)


def test_shd_and_arrowhead_scores_on_a_textbook_example():
    truth = pdag(4, directed=[(0, 1), (1, 2), (2, 3)])
    est = pdag(4, directed=[(0, 1), (2, 1), (0, 3)], undirected=[(2, 3)])
    s = score_structure(est, truth)
    # 1 <- 2 reversed, 2 - 3 undirected, 0 -> 3 extra
    assert (s.shd, s.reversed, s.undirected, s.extra, s.missing) == (3, 1, 1, 1, 0)
    assert s.precision == pytest.approx(1 / 3) and s.recall == pytest.approx(1 / 3)
    assert s.f1 == pytest.approx(1 / 3)
    assert structural_hamming_distance(truth, truth) == 0
    empty = score_structure(np.zeros((4, 4), dtype=bool), truth)
    assert (empty.shd, empty.missing, empty.f1) == (3, 3, 0.0)


@settings(max_examples=40, deadline=None)
@given(st.integers(2, 10), st.integers(0, 10**6))
def test_shd_is_a_metric_on_graphs(p, seed):
    a, b, c = (random_dag(p, 2.0, seed=seed + k) for k in range(3))
    assert structural_hamming_distance(a, b) == structural_hamming_distance(b, a)
    assert structural_hamming_distance(a, a) == 0
    assert structural_hamming_distance(a, c) <= structural_hamming_distance(a, b) + structural_hamming_distance(b, c)


def test_vote_keeps_arcs_of_more_than_the_fraction():
    a = pdag(3, directed=[(0, 1)])
    b = pdag(3, directed=[(1, 0), (1, 2)])
    c = pdag(3, directed=[(0, 1), (1, 2)])
    out = vote_graphs([a, b, c], 0.5)  # more than 1.5 of 3: at least 2
    assert edges(out) == {"directed": [(0, 1), (1, 2)], "undirected": []}
    both = vote_graphs([a, b, c], 0.3)  # at least 1 of 3: both directions of 0 - 1 survive
    assert both[0, 1] and both[1, 0]


def test_bad_graphs_are_rejected():
    with pytest.raises(DataError, match="square"):
        meek_rules(np.zeros((2, 3), dtype=bool))
    with pytest.raises(DataError, match="self-loops"):
        pdag_to_dag(np.eye(3, dtype=bool))
    with pytest.raises(DataError, match="needs a DAG"):
        cpdag_of_dag(pdag(3, directed=[(0, 1), (1, 2), (2, 0)]))
    with pytest.raises(DataError, match="symmetric"):
        orient_colliders(pdag(3, directed=[(0, 1)]), np.zeros((0, 3)), [])
