"""Peer graphs, consensus sessions, their vectorised twin, chunking and re-labelling."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fedrca.exceptions import ConfigError, ConvergenceError, MessageError
from fedrca.fleet.consensus import (
    ConsensusMessage,
    ConsensusSession,
    PeerGraph,
    average_consensus,
    make_chunks,
    session_labellings,
    step_size,
)


@st.composite
def connected_graphs(draw, max_nodes: int = 9):
    """A random spanning tree plus random extra links: connected by construction."""
    n = draw(st.integers(1, max_nodes))
    rows: list[set[int]] = [set() for _ in range(n)]
    for i in range(1, n):
        j = draw(st.integers(0, i - 1))
        rows[i].add(j)
        rows[j].add(i)
    for _ in range(draw(st.integers(0, n))):
        a, b = draw(st.integers(0, n - 1)), draw(st.integers(0, n - 1))
        if a != b:
            rows[a].add(b)
            rows[b].add(a)
    return PeerGraph(rows)


def run_sessions(graph: PeerGraph, X: np.ndarray, labels: np.ndarray, tol: float, step="degree", max_rounds=100_000):
    """Participants p0..p{S-1}; participant s plays node labels[s]; messages passed by hand."""
    S = graph.n_nodes
    names = [f"p{s}" for s in range(S)]
    at_node = [names[int(s)] for s in np.argsort(labels)]
    eps = step_size(graph, step)
    sessions = [
        ConsensusSession("t/c0", names[s], int(labels[s]), at_node, graph, X[s], eps, tol, max_rounds) for s in range(S)
    ]
    log = []
    while not all(s.done for s in sessions):
        inbox: dict[str, list] = {n: [] for n in names}
        for s in sessions:
            for m in s.outgoing():
                inbox[m.receiver].append(m)
                log.append(m)
        for s in sessions:
            s.receive(inbox[s.me])
    return sessions, log


@settings(max_examples=25, deadline=None)
@given(graph=connected_graphs(max_nodes=7), seed=st.integers(0, 2**32 - 1))
def test_sessions_agree_bit_identically_and_match_the_vectorised_twin(graph, seed):
    X = np.random.default_rng(seed).normal(size=(graph.n_nodes, 3)) * 10.0
    sessions, _ = run_sessions(graph, X, np.arange(graph.n_nodes), tol=1e-12)
    twin = average_consensus(X, graph, tol=1e-12)
    results = np.stack([s.result for s in sessions])
    # the agreement phase leaves every participant with the same bits: node 0's value
    assert np.array_equal(results, np.tile(results[0], (graph.n_nodes, 1)))
    assert np.array_equal(results[0], twin.values)
    assert all(s.rounds == twin.rounds for s in sessions)
    assert np.allclose(twin.values, X.mean(axis=0), rtol=0, atol=1e-8 * np.abs(X).max())


@settings(max_examples=15, deadline=None)
@given(graph=connected_graphs(max_nodes=7), seed=st.integers(0, 2**32 - 1))
def test_relabelled_sessions_still_average(graph, seed):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(graph.n_nodes, 2))
    sessions, log = run_sessions(graph, X, rng.permutation(graph.n_nodes), tol=1e-12)
    assert np.allclose(sessions[0].result, X.mean(axis=0), atol=1e-9)
    # everybody stops averaging at the same round
    assert len({s.rounds for s in sessions}) == 1
    # messages only ever go to neighbours under the session's labelling
    label = {s.me: s.label for s in sessions}
    for m in log:
        assert label[m.receiver] in graph.neighbours[label[m.sender]]


def test_cycle_with_inverse_chords_is_the_expander_of_the_paper():
    for p in (5, 11, 23, 31, 47):
        g = PeerGraph.cycle_inverse_chord(p)
        assert g.max_degree <= 3
        for x in range(1, p):
            assert pow(x, -1, p) in g.neighbours[x] or pow(x, -1, p) == x
            assert (x + 1) % p in g.neighbours[x]
    with pytest.raises(ConfigError, match="prime"):
        PeerGraph.cycle_inverse_chord(12)
    # non-prime fleets get a connected default
    for n in (1, 4, 12, 20):
        assert PeerGraph.default(n).n_nodes == n


def test_bad_adjacency_lists_are_refused_with_the_fix():
    with pytest.raises(ConfigError, match="listed both ways"):
        PeerGraph([[1], []])
    with pytest.raises(ConfigError, match=r"nodes are 0\.\.1"):
        PeerGraph([[2], [0]])
    with pytest.raises(ConfigError, match="connected"):
        PeerGraph([[1], [0], [3], [2]])


def test_step_rules():
    g = PeerGraph.cycle_inverse_chord(11)
    assert step_size(g, "paper") == 1 / 11
    assert step_size(g, "degree") == 1 / 4
    with pytest.raises(ConfigError, match="lambda_max"):
        step_size(g, 1.0)


def test_session_stops_with_a_clear_error_when_rounds_run_out():
    g = PeerGraph.cycle_inverse_chord(11)
    X = np.random.default_rng(0).normal(size=(11, 2))
    with pytest.raises(ConvergenceError, match="max_rounds"):
        run_sessions(g, X, np.arange(11), tol=1e-12, max_rounds=20)


@settings(max_examples=50, deadline=None)
@given(
    xi=st.lists(st.floats(-1e6, 1e6, allow_nan=False), min_size=1, max_size=20),
    chunks=st.integers(1, 6),
    seed=st.integers(0, 2**32 - 1),
)
def test_chunks_sum_to_the_statistic(xi, chunks, seed):
    x = np.array(xi)
    parts = make_chunks(x, chunks, np.random.default_rng(seed))
    assert parts.shape == (chunks, len(x))
    assert np.allclose(parts.sum(axis=0), x, rtol=1e-12, atol=1e-9 * (np.abs(x).max() + 1))


def test_a_chunk_is_not_the_statistic():
    x = np.linspace(1.0, 5.0, 50)
    parts = make_chunks(x, 3, np.random.default_rng(1))
    for part in parts:
        assert not np.allclose(part, x, rtol=1e-3)
        assert not np.allclose(part, x / 3, rtol=1e-3)


@pytest.mark.parametrize(("n", "chunks"), [(5, 3), (7, 3), (11, 2), (11, 3), (23, 3), (47, 4)])
def test_labellings_never_keep_a_peer_next_to_anyone_in_every_chunk_session(n, chunks):
    g = PeerGraph.default(n)
    for key in ("scale", "fit/it0", "fit/it1"):
        labels = session_labellings(g, chunks, seed=3, key=key)
        assert np.array_equal(labels, session_labellings(g, chunks, seed=3, key=key))  # shared, no talking
        inverse = np.argsort(labels, axis=1)
        for s in range(n):
            peer_sets = [{int(inverse[c, j]) for j in g.neighbours[int(labels[c, s])]} for c in range(chunks)]
            assert not set.intersection(*peer_sets)


def test_labellings_refuse_a_graph_where_chunking_cannot_hide():
    complete = PeerGraph([[j for j in range(4) if j != i] for i in range(4)])
    # more chunks never help on a complete graph: the fix named is the one that can work
    with pytest.raises(ConfigError, match=r"is complete.*add participants or set chunks to 1") as refused:
        session_labellings(complete, 3, seed=0, key="x", max_tries=50)
    assert "more chunks" not in str(refused.value)
    with pytest.raises(ConfigError, match="use more chunks"):
        session_labellings(PeerGraph.default(4), 2, seed=0, key="x", max_tries=50)


def _msg(**kw):
    base = dict(session="s", round=0, phase="average", sender="a", receiver="b", value=[1.0, 2.0], flood=[np.inf])
    base.update(kw)
    return ConsensusMessage(**base)


def test_messages_are_validated_and_immutable():
    m = _msg()
    assert m.key == ("s", 0, "average", "a")
    with pytest.raises(ValueError, match="read-only"):
        m.value[0] = 5.0
    with pytest.raises(dataclasses.FrozenInstanceError):
        m.round = 3  # type: ignore[misc]
    for bad, reason in [
        (dict(value=[np.nan]), "NaN"),
        (dict(value=[[1.0]]), "1-D"),
        (dict(flood=[-1.0]), "non-negative"),
        (dict(flood=[np.nan]), "non-negative"),
        (dict(round=-1), "round"),
        (dict(round=True), "round"),
        (dict(phase="gossip"), "phase"),
        (dict(receiver="a"), "both"),
        (dict(sender=""), "sender"),
    ]:
        with pytest.raises(MessageError, match=reason):
            _msg(**bad)
    assert _msg() == _msg() and _msg() != _msg(value=[1.0, 2.5])


def test_a_session_refuses_foreign_or_missing_messages():
    g = PeerGraph.ring(3)
    names = ["a", "b", "c"]
    ses = ConsensusSession("s", "a", 0, names, g, [1.0], 0.3, 1e-12)
    with pytest.raises(MessageError, match="nothing from"):
        ses.receive([_msg(sender="b", receiver="a", flood=[np.inf] * (g.diameter + 1))])
    with pytest.raises(MessageError, match="got"):
        ses.receive([_msg(session="other", sender="b", receiver="a")])
