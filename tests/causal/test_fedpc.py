"""FedPC: oracle correctness, the skeleton with lots of data, the layer vote, the messages, anonymisation."""

from __future__ import annotations

import dataclasses
import importlib
import itertools
import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fedrca.causal.citests import DSeparation, FisherZ
from fedrca.causal.fedpc import (
    FedPCServer,
    FedPCSite,
    ResultMessage,
    SepsetReply,
    SepsetRequest,
    SkeletonReply,
    SkeletonRequest,
    aggregate_to_groups,
    anonymise,
    best_separating_sets,
    decode_message,
    encode_message,
    fedpc,
    layer_queries,
    layer_size,
    merge_skeletons,
    needs_layer,
    site_layer,
)
from fedrca.causal.pdag import cpdag_of_dag
from fedrca.datasets.causal import discrete_network, linear_gaussian, random_dag, split_sites
from fedrca.exceptions import DataError, MessageError

#: the module itself (``fedrca.causal.fedpc`` the attribute is the function of that name)
fedpc_module = importlib.import_module("fedrca.causal.fedpc")


@settings(max_examples=30, deadline=None)
@given(st.integers(3, 9), st.floats(1.0, 3.0), st.integers(0, 10**6), st.integers(1, 3))
def test_with_oracle_sites_fedpc_returns_the_true_cpdag(p, degree, seed, n_sites):
    """With perfect CI tests at every site, FedPC recovers the CPDAG of the true DAG exactly."""
    dag = random_dag(p, degree, seed=seed)
    result = fedpc([DSeparation(dag)] * n_sites, alpha=0.5)
    np.testing.assert_array_equal(result.skeleton, dag | dag.T)
    np.testing.assert_array_equal(result.cpdag, cpdag_of_dag(dag))
    assert result.extension_exact
    np.testing.assert_array_equal(cpdag_of_dag(result.dag), result.cpdag)
    # layers stop once no variable has more than l neighbours
    last = result.layers[-1].layer if result.layers else -1
    assert not needs_layer(result.skeleton, last + 1)


def test_the_vote_outvotes_a_minority_of_wrong_sites():
    """Two oracle sites and one that finds every pair independent: more than 30 % keep the true edges."""

    class Blind:
        n_variables, n_samples = 8, 100

        def pvalues(self, x, y, S):
            return np.ones(len(np.asarray(x)))

    dag = random_dag(8, 2.5, seed=4)
    result = fedpc([DSeparation(dag), Blind(), DSeparation(dag)], alpha=0.05)
    np.testing.assert_array_equal(result.cpdag, cpdag_of_dag(dag))
    # with 0.7 the two oracle sites are not enough (2/3 is not more than 0.7): every edge goes
    assert not fedpc([DSeparation(dag), Blind(), DSeparation(dag)], alpha=0.05, keep_fraction=0.7).skeleton.any()


def test_merge_keeps_an_edge_kept_by_more_than_the_fraction():
    p = 3
    full = ~np.eye(p, dtype=bool)
    empty = np.zeros((p, p), dtype=bool)
    for K, needed in ((1, 1), (3, 1), (5, 2), (10, 4), (20, 7)):
        for kept in range(K + 1):
            merged, votes = merge_skeletons([full] * kept + [empty] * (K - kept), 0.3)
            assert votes[0, 1] == kept
            assert merged[0, 1] == (kept >= needed), (K, kept)


def test_layer_queries_cover_every_subset_once():
    A = np.zeros((5, 5), dtype=bool)
    for i, j in [(0, 1), (0, 2), (0, 3), (1, 2), (3, 4)]:
        A[i, j] = A[j, i] = True
    q1 = {tuple(r) for r in layer_queries(A, 1).tolist()}
    assert len(q1) == len(layer_queries(A, 1))  # no duplicate
    expected = set()
    for x, y in zip(*np.nonzero(A)):
        for s in np.flatnonzero(A[x]):
            if s != y:
                expected.add((min(x, y), max(x, y), int(s)))
    assert q1 == expected
    assert {tuple(r) for r in layer_queries(A, 0).tolist()} == {(i, j) for i, j in zip(*np.nonzero(np.triu(A)))}
    assert layer_queries(A, 3).shape == (0, 5)


def test_skeleton_of_a_known_dag_is_recovered_with_lots_of_data():
    dag = random_dag(10, 2.0, seed=11)
    X = linear_gaussian(dag, 40_000, seed=11, weight_range=(0.5, 1.0))
    tests = [FisherZ(X[idx]) for idx in split_sites(len(X), 4, seed=11)]
    result = fedpc(tests, alpha=0.01)
    np.testing.assert_array_equal(result.skeleton, dag | dag.T)


def test_discrete_skeleton_with_g_square():
    # a fixed network whose random CPTs are far from unfaithful (some seeds draw nearly vanishing effects)
    dag = random_dag(8, 1.5, seed=1, max_parents=2)
    X, levels = discrete_network(dag, 30_000, seed=1, concentration=0.3)
    assert set(levels.tolist()) == {2, 3}
    sites = [FedPCSite(X[idx], [f"v{j}" for j in range(8)], test="g-square") for idx in split_sites(len(X), 3, seed=1)]
    result = FedPCServer(8, alpha=0.01).run([s.handle for s in sites])
    np.testing.assert_array_equal(result.skeleton, dag | dag.T)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_single_site_skeleton_equals_causal_learn_pc_stable(seed):
    from fedrca.causal.baselines import causallearn_pc

    dag = random_dag(15, 2.0, seed=seed)
    X = linear_gaussian(dag, 1500, seed=seed)
    ours = fedpc([FisherZ(X)], alpha=0.01)
    reference = causallearn_pc(X, 0.01)
    np.testing.assert_array_equal(ours.skeleton, reference | reference.T)


def test_site_layer_removes_only_edges_with_an_independence():
    rng = np.random.default_rng(0)
    n = 3000
    a = rng.normal(size=n)
    b = a + rng.normal(size=n)
    c = b + rng.normal(size=n)
    test = FisherZ(np.column_stack([a, b, c]))
    full = ~np.eye(3, dtype=bool)
    np.testing.assert_array_equal(site_layer(test, full, 0, 0.01), full)
    after = site_layer(test, full, 1, 0.01)
    assert not after[0, 2] and not after[2, 0] and after[0, 1] and after[1, 2]
    sets, pv = best_separating_sets(test, after, [[0, 2]])
    assert sets == [(1,)] and pv[0] > 0.01


def sample_sites(seed: int = 0, n_sites: int = 3, p: int = 7):
    dag = random_dag(p, 2.0, seed=seed)
    X = linear_gaussian(dag, 3000, seed=seed)
    names = [f"sensor_{chr(ord('a') + j)}" for j in range(p)]
    return dag, X, names, [X[idx] for idx in split_sites(len(X), n_sites, seed=seed)]


def test_server_protocol_agrees_with_the_pure_function():
    _, _, names, parts = sample_sites(seed=3, n_sites=4)
    sites = [FedPCSite(part, names) for part in parts]
    via_messages = FedPCServer(len(names), alpha=0.01).run([s.handle for s in sites])
    direct = fedpc([s.test for s in sites], alpha=0.01)
    assert via_messages.same_graphs(direct)
    assert [(r.layer, r.votes.tolist()) for r in via_messages.layers] == [
        (r.layer, r.votes.tolist()) for r in direct.layers
    ]


def test_only_adjacency_matrices_id_sets_and_pvalues_leave_a_site():
    """Acceptance 3: record everything the sites send; nothing but skeletons, id sets and p-values."""
    _, X, names, parts = sample_sites(seed=5, n_sites=3)
    sent: list[object] = []

    def recorded(site):
        def endpoint(request):
            reply = site.handle(request)
            sent.append(reply)
            return reply

        return endpoint

    sites = [FedPCSite(part, names) for part in parts]
    result = FedPCServer(len(names), alpha=0.01).run([recorded(s) for s in sites])
    assert sent and {type(m) for m in sent} == {SkeletonReply, SepsetReply}
    p = len(names)
    raw_values = {round(float(v), 6) for v in X.ravel()}
    for message in sent:
        fields = {f.name for f in dataclasses.fields(message)}  # type: ignore[arg-type]
        if isinstance(message, SkeletonReply):
            assert fields == {"layer", "adjacency"}
            assert message.adjacency.dtype == np.bool_ and message.adjacency.shape == (p, p)
            np.testing.assert_array_equal(message.adjacency, message.adjacency.T)
        else:
            assert isinstance(message, SepsetReply)
            assert fields == {"pairs", "sepsets", "pvalues"}
            assert all(isinstance(v, int) and 0 <= v < p for s in message.sepsets for v in s)
            assert message.pvalues.dtype == np.float64 and np.all((message.pvalues >= 0) & (message.pvalues <= 1))
        # on the wire: no variable name, no sample value, only the declared keys
        wire = encode_message(message).decode("utf-8")
        assert not any(name in wire for name in names)
        decoded = json.loads(wire)
        allowed = {"type", "layer", "n_variables", "edges"} if isinstance(message, SkeletonReply) else {
            "type", "pairs", "sepsets", "pvalues",
        }  # fmt: skip
        assert set(decoded) == allowed
        numbers = [v for v in decoded.get("pvalues", [])]
        assert not raw_values.intersection(round(v, 6) for v in numbers if v not in (0.0, 1.0))
        assert decode_message(wire.encode()) == message
    # and a transport that only carries the JSON bytes gives the same result
    over_json = FedPCServer(p, alpha=0.01).run(
        [lambda req, s=s: decode_message(encode_message(s.handle(decode_message(encode_message(req))))) for s in sites]
    )
    assert over_json.same_graphs(result)


def test_messages_are_immutable_and_validated():
    A = np.array([[0, 1, 0], [1, 0, 1], [0, 1, 0]], dtype=bool)
    msg = SkeletonReply(layer=1, adjacency=A)
    with pytest.raises(dataclasses.FrozenInstanceError):
        msg.layer = 2  # type: ignore[misc]
    with pytest.raises(ValueError, match="read-only"):
        msg.adjacency[0, 1] = False
    A[0, 2] = A[2, 0] = True  # the message holds its own copy
    assert not msg.adjacency[0, 2]
    asym = np.zeros((3, 3), dtype=bool)
    asym[0, 1] = True
    for bad, reason in [
        (lambda: SkeletonReply(layer=0, adjacency=asym), "symmetric"),
        (lambda: SkeletonReply(layer=0, adjacency=np.eye(3, dtype=bool)), "self-loops"),
        (lambda: SkeletonReply(layer=-1, adjacency=np.zeros((3, 3), dtype=bool)), "layer"),
        (lambda: SkeletonReply(layer=0, adjacency=np.full((3, 3), 0.5)), "0/1"),
        (lambda: SkeletonRequest(layer=0, adjacency=np.zeros((3, 3), dtype=bool), alpha=1.5), "alpha"),
        (lambda: SepsetReply(pairs=[[2, 1]], sepsets=((0,),), pvalues=[0.5]), "x < y"),
        (lambda: SepsetReply(pairs=[[0, 2]], sepsets=((0,),), pvalues=[0.5]), "other than x, y"),
        (lambda: SepsetReply(pairs=[[0, 2]], sepsets=((1,),), pvalues=[1.5]), r"\[0, 1\]"),
        (lambda: SepsetReply(pairs=[[0, 2]], sepsets=((1,),), pvalues=[float("nan")]), r"\[0, 1\]"),
        (lambda: SepsetReply(pairs=[[0, 2]], sepsets=(), pvalues=[0.5]), "as many"),
        (lambda: SepsetRequest(adjacency=np.zeros((3, 3), dtype=bool), pairs=[[0, 5]]), "non-adjacent ids"),
    ]:
        with pytest.raises(MessageError, match=reason):
            bad()
    for raw in [b"not json", b'{"type": "nope"}', b'{"type": "skeleton_reply", "layer": 0}']:
        with pytest.raises(MessageError):
            decode_message(raw)


def test_server_rejects_a_site_that_adds_edges_or_answers_the_wrong_thing():
    def wrong(request):
        return SepsetReply(pairs=np.zeros((0, 2)), sepsets=(), pvalues=[])

    with pytest.raises(MessageError, match="expected SkeletonReply"):
        FedPCServer(4, alpha=0.01).run([wrong])
    chain = np.zeros((4, 4), dtype=bool)
    for i in range(3):
        chain[i, i + 1] = chain[i + 1, i] = True

    def adder(request):
        # layer 0: the chain 0 - 1 - 2 - 3; layer 1: the complete graph again
        A = chain if request.layer == 0 else ~np.eye(4, dtype=bool)
        return SkeletonReply(layer=request.layer, adjacency=A)

    with pytest.raises(MessageError, match="added edges at layer 1"):
        FedPCServer(4, alpha=0.01).run([adder])

    def late(request):
        return SkeletonReply(layer=request.layer + 1, adjacency=request.adjacency)

    with pytest.raises(MessageError, match="expected 0"):
        FedPCServer(4, alpha=0.01).run([late])


def test_anonymisation_sorts_names_and_column_order_does_not_matter():
    assert anonymise(["Theft", "Theatre", "Apple", "b"]) == ("Apple", "Theatre", "Theft", "b")
    with pytest.raises(DataError, match="repeated: x"):
        anonymise(["x", "y", "x"])
    _, _, names, parts = sample_sites(seed=8, n_sites=3)
    rng = np.random.default_rng(0)
    # every site stores its columns in its own order
    shuffled = []
    for part in parts:
        perm = rng.permutation(len(names))
        shuffled.append(FedPCSite(part[:, perm], [names[j] for j in perm]))
    ordered = [FedPCSite(part, names) for part in parts]
    r1 = FedPCServer(len(names)).run([s.handle for s in shuffled])
    r2 = FedPCServer(len(names)).run([s.handle for s in ordered])
    assert r1.same_graphs(r2)
    for site in shuffled:
        assert site.names == tuple(sorted(names))
        n1, g1 = site.translate(r1)
        n2, g2 = ordered[0].translate(r2)
        assert n1 == n2 and np.array_equal(g1, g2)
    # a site with another number of variables refuses the server's skeleton
    other = FedPCSite(parts[0][:, :5], names[:5])
    with pytest.raises(MessageError, match="has 7 variables, this site has 5"):
        other.handle(SkeletonRequest(layer=0, adjacency=~np.eye(7, dtype=bool), alpha=0.01))


def test_result_message_round_trip_and_plant_aggregation():
    G = np.zeros((5, 5), dtype=bool)
    G[0, 2] = True  # a (plant x) -> c (plant y)
    G[3, 4] = G[4, 3] = True  # d - e, undirected, plants y and z
    G[1, 0] = True  # inside plant x: ignored
    msg = ResultMessage(cpdag=G, dag=G & ~G.T)
    assert decode_message(encode_message(msg)) == msg
    adj, weight = aggregate_to_groups(G, ["x", "x", "y", "y", "z"], ["x", "y", "z"])
    np.testing.assert_array_equal(adj, [[0, 1, 0], [0, 0, 1], [0, 1, 0]])
    assert weight[0, 1] == 1 and weight[1, 2] == 1 and weight[2, 1] == 1
    with pytest.raises(DataError, match="unknown group"):
        aggregate_to_groups(G, ["x", "x", "y", "y", "w"], ["x", "y", "z"])


def test_an_unbounded_separating_set_search_on_a_dense_skeleton_is_refused():
    A = ~np.eye(30, dtype=bool)
    A[0, 1] = A[1, 0] = False  # 0 and 1 share 28 neighbours: 2 * 2^28 subsets
    oracle = DSeparation(np.zeros((30, 30), dtype=bool))
    with pytest.raises(DataError, match="max_cond"):
        best_separating_sets(oracle, A, [[0, 1]])
    sets, pv = best_separating_sets(oracle, A, [[0, 1]], max_size=1)
    assert sets == [()] and pv[0] == 1.0


# ----------------------------------------------------------------------------- queries by block (issue 25)
def _reference_separating_sets(test, A, pairs, max_size=None):
    """The search as written in its docstring, one pair at a time with every subset at once."""
    sets, pvalues = [], []
    for x, y in np.asarray(pairs).tolist():
        cand = [v for v in np.flatnonzero(A[x]).tolist() if v != y]
        cand_y = [v for v in np.flatnonzero(A[y]).tolist() if v != x]
        top = max(len(cand), len(cand_y)) if max_size is None else min(max(len(cand), len(cand_y)), max_size)
        best, best_set = -1.0, ()
        for l in range(top + 1):
            subsets = sorted(set(itertools.combinations(cand, l)) | set(itertools.combinations(cand_y, l)))
            if not subsets:
                continue
            S = np.array(subsets, dtype=np.int64).reshape(len(subsets), l)
            pv = test.pvalues(np.full(len(subsets), x), np.full(len(subsets), y), S)
            pv = np.where(np.isnan(pv), -1.0, pv)
            i = int(np.argmax(pv))  # the first of the highest: the lexicographically first set
            if pv[i] > best:
                best, best_set = float(pv[i]), subsets[i]
        sets.append(best_set)
        pvalues.append(max(best, 0.0))
    return sets, np.array(pvalues)


def _unshielded(A):
    p = len(A)
    return np.array([(x, y) for x in range(p) for y in range(x + 1, p) if not A[x, y] and (A[x] & A[y]).any()])


def test_combination_chunks_are_the_lexicographic_subsets(monkeypatch):
    monkeypatch.setattr(fedpc_module, "_BATCH", 7)
    for n, k, rows in [(6, 3, 4), (9, 4, 10), (5, 0, 2), (7, 7, 1), (12, 5, 100)]:
        chunks = list(fedpc_module._combination_chunks(n, k, rows))
        assert all(1 <= len(c) <= rows for c in chunks)
        assert [tuple(r) for c in chunks for r in c.tolist()] == list(itertools.combinations(range(n), k))


@pytest.mark.parametrize("seed", range(12))
def test_separating_sets_searched_in_small_blocks_match_the_search_over_every_subset(seed, monkeypatch):
    """Blocks of a few queries (several per pair and level) give the sets and p-values of the whole search:
    the best per pair is kept across blocks with the same ties (smaller set, then lexicographically first)."""
    rng = np.random.default_rng(seed)
    p = int(rng.integers(6, 10))
    dag = random_dag(p, float(rng.uniform(1.5, 3.0)), seed=seed)
    A = dag | dag.T
    A |= np.triu(rng.random((p, p)) < 0.2, 1)  # extra edges: larger neighbourhoods
    A = A | A.T
    pairs = _unshielded(A)
    if len(pairs) == 0:
        pairs = np.array([[0, 1]])
    max_size = None if seed % 3 else 2
    # an oracle (p-values 0 or 1: ties everywhere) and Fisher-z on data of the DAG
    tests = [DSeparation(dag), FisherZ(linear_gaussian(dag, 300, seed=seed))]
    expected = [_reference_separating_sets(t, A, pairs, max_size) for t in tests]
    monkeypatch.setattr(fedpc_module, "_BLOCK_ELEMENTS", 9)  # 2-4 queries a block
    seen: list[int] = []
    for test, (sets, pv) in zip(tests, expected):

        class Counting:
            n_variables, n_samples = test.n_variables, test.n_samples

            def pvalues(self, x, y, S, _test=test):
                seen.append(len(np.asarray(x)))
                return _test.pvalues(x, y, S)

        got_sets, got_pv = best_separating_sets(Counting(), A, pairs, max_size)
        assert got_sets == sets
        np.testing.assert_array_equal(got_pv, pv)
    assert max(seen) <= 9 and len(seen) > 2 * len(pairs)


@pytest.mark.parametrize("seed", range(6))
def test_a_skeleton_layer_in_small_blocks_equals_the_layer_in_one_block(seed, monkeypatch):
    dag = random_dag(9, 2.5, seed=seed)
    test = FisherZ(linear_gaussian(dag, 200, seed=seed))
    A = ~np.eye(9, dtype=bool)
    layers = []
    for layer in range(4):
        layers.append(site_layer(test, A, layer, 0.05))
        A = layers[-1]
    monkeypatch.setattr(fedpc_module, "_BATCH", 5)
    monkeypatch.setattr(fedpc_module, "_BLOCK_ELEMENTS", 12)
    A = ~np.eye(9, dtype=bool)
    for layer in range(4):
        np.testing.assert_array_equal(site_layer(test, A, layer, 0.05), layers[layer])
        A = layers[layer]


class _Dependent:
    """Every pair dependent given anything: the skeleton stays complete, each layer larger than the last."""

    n_samples = 1000

    def __init__(self, p: int) -> None:
        self.n_variables = p

    def pvalues(self, x, y, S):
        return np.zeros(len(np.asarray(x)))


def test_a_skeleton_layer_over_the_query_limit_is_refused_by_the_server_and_by_a_site(monkeypatch):
    # complete graph of 12 variables: layer l makes at most 12 * 11 * C(10, l) queries; 15,840 at l = 3
    monkeypatch.setattr(fedpc_module, "MAX_QUERIES", 10_000)
    full = ~np.eye(12, dtype=bool)
    assert layer_size(full, 2) == 5940 and layer_size(full, 3) == 15840
    with pytest.raises(DataError, match=r"layer 3 of the skeleton would run 15,840 CI tests .* max_cond at most 2"):
        fedpc([_Dependent(12)])
    result = fedpc([_Dependent(12)], max_cond=2)
    assert result.skeleton.sum() == 12 * 11 and len(result.layers) == 3
    # sites whose data keep every edge up to layer 2 (one common factor)
    rng = np.random.default_rng(0)
    data = rng.normal(size=(2000, 1)) + 0.3 * rng.normal(size=(2000, 12))
    names = [f"v{j:02d}" for j in range(12)]
    sites = [FedPCSite(half, names=names).handle for half in (data[:1000], data[1000:])]
    with pytest.raises(DataError, match="layer 3 of the skeleton"):
        FedPCServer(12).run(sites)  # refused before the layer's request is sent
    with pytest.raises(DataError, match="layer 3 of the skeleton"):
        site_layer(_Dependent(12), full, 3, 0.01)  # a site does not run a request it cannot finish
