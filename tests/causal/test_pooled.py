"""FedPC with pooled statistics: the secure sums equal the pooled statistics, the result is pooled PC, only masked
vectors leave a site, and the noised variant is charged to each site's ledger."""

from __future__ import annotations

import dataclasses
import json
import math

import numpy as np
import pytest
import scipy.stats

from fedrca.causal.citests import FisherZ, GSquare
from fedrca.causal.fedpc import FedPCServer, FedPCSite, fedpc
from fedrca.causal.pdag import pdag_to_dag, score_structure
from fedrca.causal.pooled import PooledStatsServer
from fedrca.causal.secagg import KeyReply, MaskedVector, encode_counts, encode_fixed
from fedrca.causal.sufficient import (
    LevelsReply,
    StatsRequest,
    merge_codebooks,
    moment_vector,
    private_correlation,
    scatter_vector,
)
from fedrca.causal.wire import decode_message, encode_message
from fedrca.datasets.causal import discrete_network, linear_gaussian, random_dag, split_sites
from fedrca.exceptions import DataError, MessageError, PrivacyBudgetExceeded
from fedrca.privacy.accounting import gaussian_mu
from fedrca.privacy.ledger import PrivacyLedger
from fedrca.privacy.mechanisms import scatter_sensitivity


def names_of(p: int) -> list[str]:
    """Variable names no masked vector can spell: '_' is in neither base64's nor hex's alphabet."""
    return [f"var_{j:02d}" for j in range(p)]


def linear_sites(p: int = 8, n_sites: int = 6, n: int = 3000, seed: int = 0, offset: float = 0.0):
    dag = random_dag(p, 2.0, seed=seed)
    X = linear_gaussian(dag, n, seed=seed) + offset
    parts = [X[idx] for idx in split_sites(len(X), n_sites, seed=seed)]
    return dag, np.vstack(parts), [FedPCSite(part, names_of(p)) for part in parts]


def same_result(a, b, rtol: float = 1e-9) -> bool:
    """Same graphs and separating sets; the sepsets' p-values equal to ``rtol`` (sums in another order)."""
    if not (np.array_equal(a.skeleton, b.skeleton) and np.array_equal(a.cpdag, b.cpdag)):
        return False
    if not np.array_equal(a.dag, b.dag) or a.sepsets.keys() != b.sepsets.keys():
        return False
    return all(
        a.sepsets[k][0] == b.sepsets[k][0]
        and math.isclose(a.sepsets[k][1], b.sepsets[k][1], rel_tol=rtol, abs_tol=1e-12)
        for k in a.sepsets
    )


def test_the_secure_sums_equal_the_pooled_statistics_to_1e_9():
    """Counts, means, cross-products and correlations from masked vectors equal the pooled data's, offsets or not."""
    for offset in (0.0, 1e4):
        _, X, sites = linear_sites(seed=1, offset=offset)
        server = PooledStatsServer(X.shape[1])
        stats = server.pooled_statistics([s.handle for s in sites])
        assert stats.n_samples == len(X)
        np.testing.assert_allclose(stats.mean, X.mean(axis=0), rtol=1e-12)
        centred = X - X.mean(axis=0)
        np.testing.assert_allclose(stats.scatter, centred.T @ centred, rtol=1e-9)
        np.testing.assert_allclose(stats.correlation, np.corrcoef(X, rowvar=False), atol=1e-9)
        assert stats.noise_var == 0.0
        assert server._round == 2  # counts and sums, then cross-products about the pooled mean


def test_the_pure_sufficient_statistics_add_over_sites():
    rng = np.random.default_rng(3)
    parts = [rng.normal(size=(n, 4)) * [1, 10, 0.1, 5] for n in (40, 90, 130)]
    X = np.vstack(parts)
    moments = sum(moment_vector(part) for part in parts)
    np.testing.assert_allclose(moments, np.concatenate([[len(X)], X.sum(axis=0)]), rtol=1e-13)
    m = X.mean(axis=0)
    S = sum(scatter_vector(part, m) for part in parts)
    np.testing.assert_allclose(S, ((X - m).T @ (X - m))[np.triu_indices(4)], rtol=1e-12)


def test_with_exact_statistics_the_result_is_pc_on_the_pooled_data():
    """The pure twin: fedpc() with one Fisher-z test on the concatenated rows."""
    _, X, sites = linear_sites(p=10, n_sites=7, seed=4)
    result = PooledStatsServer(10, alpha=0.01).run([s.handle for s in sites])
    assert same_result(result, fedpc([FisherZ(X)], alpha=0.01))
    assert result.n_sites == 7 and result.extra["mode"] == "pooled-stats" and result.extra["samples"] == len(X)
    assert result.extra["rounds"] == 2 and len(result.extra["bytes_per_site"]) == 7


def test_g_square_tables_add_over_sites_and_the_result_is_pc_on_the_pooled_data():
    dag = random_dag(7, 1.5, seed=2, max_parents=2)
    X, _ = discrete_network(dag, 4000, seed=2, concentration=0.5)
    parts = [X[idx] for idx in split_sites(len(X), 5, seed=2)]
    sites = [FedPCSite(part, names_of(7), test="g-square") for part in parts]
    # the sites' tables under the merged code book add up to the pooled tables, exactly
    codebook = merge_codebooks([s.test.labels for s in sites])
    pooled = GSquare(X)
    queries = np.array([[0, 1, 2], [1, 3, 4], [2, 5, 6]])
    local = sum(s._codes(codebook).shape[0] for s in sites)
    assert local == len(X)
    from fedrca.causal.citests import contingency_counts

    levels = np.array([len(c) for c in codebook])
    summed = sum(
        contingency_counts(s._codes(codebook), levels, queries[:, 0], queries[:, 1], queries[:, 2:]) for s in sites
    )
    np.testing.assert_array_equal(summed, pooled.counts(queries[:, 0], queries[:, 1], queries[:, 2:]))
    result = PooledStatsServer(7, test="g-square", alpha=0.01).run([s.handle for s in sites])
    assert same_result(result, fedpc([pooled], alpha=0.01), rtol=1e-12)
    assert result.extra["rounds"] >= 2  # the count, then the tables the server's PC asked for


def test_on_a_fixed_seed_of_the_benchmark_the_pooled_test_matches_pooled_pc_where_the_vote_does_not():
    """bench_fedpc's setting p = 20, 10 sites, graph 2 (and the discrete network 4): SHD within 1.2x pooled PC."""
    from fedrca.causal.baselines import causallearn_pc

    seed = 1000 * 20 + 10 * 10 + 2
    dag = random_dag(20, 2.0, seed=seed)
    X = linear_gaussian(dag, 5000, seed=seed, weight_range=(0.5, 2.0))
    discrete_seed = 7000 + 10 * 10 + 4
    ddag = random_dag(12, 2.0, seed=discrete_seed, max_parents=3)
    D, _ = discrete_network(ddag, 5000, seed=discrete_seed, concentration=0.5)
    for truth, data, test, split_seed in ((dag, X, "fisher-z", seed), (ddag, D, "g-square", seed)):
        p = data.shape[1]
        parts = split_sites(len(data), 10, seed=split_seed if test == "fisher-z" else 1000 * 0 + 100 + 4)
        sites = [FedPCSite(data[idx], names_of(p), test=test) for idx in parts]
        pooled_stats = PooledStatsServer(p, test=test).run([s.handle for s in sites])
        vote = FedPCServer(p).run([s.handle for s in sites])
        reference = score_structure(pdag_to_dag(causallearn_pc(data, 0.01, test))[0], truth).shd
        ours = score_structure(pooled_stats.dag, truth).shd
        theirs = score_structure(vote.dag, truth).shd
        assert ours <= 1.2 * reference, (test, ours, reference)
        assert theirs > 1.2 * reference, (test, theirs, reference)  # the vote misses on this seed


def test_only_public_keys_masked_vectors_and_level_labels_leave_a_site():
    _, _, sites = linear_sites(p=6, n_sites=4, seed=5)
    dsites = [
        FedPCSite(part, names_of(5), test="g-square")
        for part in np.array_split(discrete_network(random_dag(5, 1.5, seed=5), 2000, seed=5)[0], 4)
    ]
    for group, test, allowed in ((sites, "fisher-z", {KeyReply, MaskedVector}),
                                 (dsites, "g-square", {KeyReply, MaskedVector, LevelsReply})):  # fmt: skip
        sent: list[object] = []
        asked: list[object] = []

        def recorded(site, sent=sent, asked=asked):
            def endpoint(req):
                asked.append(req)
                reply = site.handle(req)
                sent.append(reply)
                return reply

            return endpoint

        p = group[0].n_variables
        result = PooledStatsServer(p, test=test).run([recorded(s) for s in group])
        assert {type(m) for m in sent} == allowed
        for message in sent:
            wire = encode_message(message).decode("utf-8")
            assert not any(name in wire for name in names_of(p))
            assert decode_message(wire.encode()) == message
            fields = {f.name for f in dataclasses.fields(message)}  # type: ignore[arg-type]
            assert fields <= {"session", "index", "public_key", "round", "data", "levels"}
        # no masked vector is its site's plain statistic
        for request, reply in zip(asked, sent):
            if isinstance(reply, MaskedVector) and isinstance(request, StatsRequest) and test == "fisher-z":
                site = group[reply.index]
                plain = moment_vector(site._rows) if request.statistic == "moments" else scatter_vector(
                    site._rows, request.center
                )  # fmt: skip
                assert not np.any(np.all(reply.data == encode_fixed(plain), axis=1))
            elif isinstance(reply, MaskedVector) and request.statistic == "count":
                assert not np.array_equal(reply.data, encode_counts(np.array([group[reply.index].n_samples])))
        # a transport that carries only JSON bytes gives the same result
        fresh = [FedPCSite(s._rows, names_of(p)) if test == "fisher-z" else s for s in group]
        if test == "fisher-z":
            over_json = PooledStatsServer(p, test=test).run(
                [lambda req, s=s: decode_message(encode_message(s.handle(decode_message(encode_message(req)))))
                 for s in fresh]
            )  # fmt: skip
            assert same_result(over_json, result, rtol=1e-12)


def test_the_server_refuses_one_site_a_wrong_reply_and_noise_with_g_square():
    _, _, sites = linear_sites(p=5, n_sites=3, seed=6)
    with pytest.raises(DataError, match="at least 2 sites"):
        PooledStatsServer(5).run([sites[0].handle])
    with pytest.raises(DataError, match="fisher-z only"):
        PooledStatsServer(5, test="g-square", mu=1.0)

    def liar(request):
        reply = sites[1].handle(request)
        if isinstance(reply, MaskedVector):
            return MaskedVector(session=reply.session, round=reply.round + 1, index=reply.index, data=reply.data)
        return reply

    with pytest.raises(MessageError, match="another session, round or index"):
        PooledStatsServer(5).run([sites[0].handle, liar, sites[2].handle])
    server = PooledStatsServer(5)
    _, _, again = linear_sites(p=5, n_sites=3, seed=6)
    server.run([s.handle for s in again])
    with pytest.raises(DataError, match="one session"):
        server.run([s.handle for s in again])
    # a site refuses statistics of a session it did not join, and a test it does not run
    roster = (b"a" * 32, b"b" * 32)
    with pytest.raises(MessageError, match="was not joined"):
        sites[0].handle(StatsRequest(session="x", round=0, roster=roster, statistic="moments"))
    with pytest.raises(MessageError, match="needs center"):
        StatsRequest(session="x", round=0, roster=roster, statistic="scatter")
    with pytest.raises(MessageError, match="takes no mu"):
        StatsRequest(session="x", round=0, roster=roster, statistic="moments", mu=1.0)


def test_the_noised_release_is_charged_once_per_site_and_refused_past_the_budget():
    epsilon, delta = 2.0, 1e-5
    mu = gaussian_mu(epsilon, delta)
    _, X, _ = linear_sites(p=6, n_sites=4, seed=7)
    parts = np.array_split(X, 4)
    ledgers = [PrivacyLedger(f"site{k}", delta=delta, budget=2.5, budget_key="causal.budget") for k in range(4)]
    sites = [
        FedPCSite(part, names_of(6), seed=k, ledger=ledger) for k, (part, ledger) in enumerate(zip(parts, ledgers))
    ]
    result = PooledStatsServer(6, mu=mu).run([s.handle for s in sites])
    assert result.extra["rounds"] == 1 and result.extra["mu"] == mu
    for ledger in ledgers:
        assert ledger.mu2 == pytest.approx(mu * mu) and ledger.epsilon() == pytest.approx(epsilon, rel=1e-6)
    # the same seeds give the same noise and the same graph
    again = [FedPCSite(part, names_of(6), seed=k) for k, part in enumerate(parts)]
    assert PooledStatsServer(6, mu=mu).run([s.handle for s in again]).same_graphs(result)
    # a second release (composed: epsilon 2.9) would pass the budget of 2.5: refused before anything is sent
    with pytest.raises(PrivacyBudgetExceeded, match=r"causal\.budget = 2\.5"):
        PooledStatsServer(6, mu=mu).run([s.handle for s in sites])
    assert all(ledger.mu2 == pytest.approx(mu * mu) for ledger in ledgers)


def test_noise_is_calibrated_to_the_sensitivity_and_the_noise_aware_test_keeps_its_level():
    """Replacing one row moves the released vector by at most the sensitivity (the site's standardiser fixed);
    under independence the noise-aware Fisher-z rejects at about alpha, the plain test, blind to the noise, far more."""
    from fedrca.privacy.mechanisms import private_scatter_vector

    rng = np.random.default_rng(0)
    clip, p = 1.5, 5
    for trial in range(50):
        X = rng.normal(size=(60, p)) * rng.uniform(0.1, 10.0, size=p) + rng.normal(size=p)
        center, scale = X.mean(axis=0), X.std(axis=0)  # the site's standardiser, fixed before the release
        Y = X.copy()
        Y[trial % 60] = rng.normal(size=p) * 10.0 ** rng.uniform(-1, 3)  # any replacement row
        a = private_scatter_vector(X, center, scale, clip, math.inf, rng)
        b = private_scatter_vector(Y, center, scale, clip, math.inf, rng)
        assert np.linalg.norm(a - b) <= scatter_sensitivity(clip, p) + 1e-9
    # calibration: independent variables, a noised correlation matrix with the stated noise variance
    p, n, tau = 6, 20_000, 0.02
    rejections = {"aware": 0, "blind": 0}
    trials = 0
    for seed in range(40):
        g = np.random.default_rng(seed)
        Z = g.normal(size=(n, p))
        S = Z.T @ Z
        noise = g.normal(size=(p, p)) * tau * n
        v = np.concatenate([[n], (S + np.triu(noise) + np.triu(noise, 1).T)[np.triu_indices(p)]])
        C, tau2 = private_correlation(v, p, tau * n)
        x, y, cond = [0, 1, 2], [3, 4, 5], [[1, 2], [0, 2], [0, 1]]
        aware = FisherZ.from_correlation(C, n, noise_var=tau2).pvalues(x, y, cond)
        blind = FisherZ.from_correlation(C, n).pvalues(x, y, cond)
        rejections["aware"] += int((aware < 0.05).sum())
        rejections["blind"] += int((blind < 0.05).sum())
        trials += 3
    assert rejections["aware"] / trials < 0.08, rejections  # 5 of 120 at alpha 0.05
    assert rejections["blind"] / trials > 0.3, rejections  # 57 of 120
    # without noise the aware test is the plain one
    C0 = np.corrcoef(np.random.default_rng(1).normal(size=(500, 4)), rowvar=False)
    np.testing.assert_array_equal(
        FisherZ.from_correlation(C0, 500, noise_var=0.0).pvalues([0], [1], [[2, 3]]),
        FisherZ.from_correlation(C0, 500).pvalues([0], [1], [[2, 3]]),
    )
    assert scipy.stats.norm.sf(0) == 0.5


def test_a_site_releases_its_noised_statistics_once_per_session():
    _, _, sites = linear_sites(p=4, n_sites=2, seed=8)
    server = PooledStatsServer(4, mu=1.0, session="fixed")
    server.run([s.handle for s in sites])
    request = StatsRequest(session="fixed", round=5, roster=server._roster, statistic="private-scatter", clip=1.5,
                           mu=1.0)  # fmt: skip
    with pytest.raises(MessageError, match="were released"):
        sites[0].handle(request)
    # a site with its own bound refuses a request for less noise than it allows
    _, _, bounded = linear_sites(p=4, n_sites=2, seed=8)
    careful = [FedPCSite(s._rows, names_of(4), max_mu=0.5) for s in bounded]
    with pytest.raises(MessageError, match=r"asks for mu 1, above this site's 0\.5"):
        PooledStatsServer(4, mu=1.0).run([s.handle for s in careful])
    assert PooledStatsServer(4, mu=0.5).run([s.handle for s in careful]).extra["mu"] == 0.5
    assert json.loads(encode_message(request))["statistic"] == "private-scatter"
