"""A fleet learning CollabDict peer to peer in one process (issue 18, acceptance 1, 2 and 4)."""

from __future__ import annotations

import dataclasses
import math
import warnings
from collections import defaultdict

import numpy as np
import pytest

from fedrca.datasets.fleet import fleet_patterns
from fedrca.exceptions import ConfigError, DataError, ModelError, PrivacyWarning
from fedrca.fleet.collabdict import FleetSettings, fit_centralised, initialise_centralised, unpack_statistics
from fedrca.fleet.consensus import Exchange, MessageKey, PeerGraph
from fedrca.fleet.model import FleetParticipant, InProcessNetwork, simulate_fleet
from tests.fleet.test_collabdict import tight_fleet_data

SETTINGS = FleetSettings(n_components=3, folds=0, chunks=3, seed=0)


@pytest.fixture(scope="module")
def synthetic():
    # 11 participants, 3 shared patterns, Dirichlet(1) weights per participant
    return fleet_patterns(n_participants=11, n_samples=150, n_dims=3, seed=4)


@pytest.fixture(scope="module")
def recorded(synthetic):
    network = InProcessNetwork(record=True)
    run = simulate_fleet(synthetic.datasets, SETTINGS, seed=1, network=network)
    return run, network


def test_every_participant_holds_identical_global_parameters(recorded, synthetic):
    run, _ = recorded
    assert run.graph == PeerGraph.cycle_inverse_chord(11)
    assert run.max_parameter_difference() < 1e-8
    assert run.identical  # the agreement phase makes them bit-identical
    # the mixture weights stay private and differ between participants
    weights = np.array([r.weights for r in run.results.values()])
    assert np.ptp(weights, axis=0).max() > 0.2


def test_the_fleet_equals_a_centralised_fit_with_the_same_initialisation(recorded, synthetic):
    run, _ = recorded
    names = list(synthetic.datasets)
    central = fit_centralised([synthetic.datasets[n] for n in names], SETTINGS, init=run.results[names[0]].init)
    model = run.model
    assert central.iterations == run.results[names[0]].iterations
    assert model.n_components == central.model.n_components == 3
    assert np.abs(model.means - central.model.means).max() < 1e-6
    assert np.abs(model.precisions - central.model.precisions).max() < 1e-6
    assert np.abs(np.array([run.results[n].weights for n in names]) - np.array(central.weights)).max() < 1e-6
    assert model.threshold == pytest.approx(central.model.threshold, rel=1e-6)
    # and the model found the three true patterns
    true_means = (synthetic.means - model.center) / model.scale
    assert np.linalg.norm(true_means[:, None] - model.means[None], axis=2).min(axis=1).max() < 0.2


def test_no_participant_ever_sees_another_participants_unchunked_statistic(recorded):
    run, network = recorded
    released = {p.name: p.released for p in run.participants}
    C = SETTINGS.chunks
    first_round: dict[tuple[str, str, str], set[str]] = defaultdict(set)  # (sender, statistic, receiver) -> chunks
    chunk_values: dict[tuple[str, str], dict[str, np.ndarray]] = defaultdict(dict)
    for m in network.log:
        statistic, chunk = m.session.rsplit("/", 1)
        if m.phase == "average" and m.round == 0:
            first_round[(m.sender, statistic, m.receiver)].add(chunk)
            chunk_values[(m.sender, statistic)][chunk] = m.value
    assert network.messages == len(network.log) > 0
    # nobody receives all C first-round chunks of anybody's statistic
    assert first_round and all(len(chunks) < C for chunks in first_round.values())
    for name, stats in released.items():
        for key, vec in stats:
            # the first-round chunks really are the statistic, split
            chunks = chunk_values[(name, key)]
            assert len(chunks) == C
            assert np.allclose(sum(chunks.values()), vec, rtol=1e-12, atol=1e-9 * (np.abs(vec).max() + 1))
    # no message anybody sent carries one of its own released statistics (within 1e-6 relative)
    sent: dict[tuple[str, int], list[np.ndarray]] = defaultdict(list)
    for m in network.log:
        sent[(m.sender, m.value.size)].append(m.value)
    for (sender, size), values in sent.items():
        mine = [vec for _, vec in released[sender] if vec.size == size]
        if not mine:
            continue
        V, R = np.stack(values), np.stack(mine)
        close = np.all(np.abs(V[:, None, :] - R[None, :, :]) <= 1e-6 * np.abs(R[None, :, :]), axis=2)
        assert not close.any()


def test_chunked_consensus_gives_the_unchunked_result(synthetic):
    five = {n: synthetic.datasets[n] for n in list(synthetic.datasets)[:5]}
    plain = simulate_fleet(five, FleetSettings(n_components=3, folds=0, chunks=1, seed=0), seed=2)
    chunked = simulate_fleet(five, FleetSettings(n_components=3, folds=0, chunks=3, seed=0), seed=2)
    assert plain.results["p00"].iterations == chunked.results["p00"].iterations
    assert np.abs(plain.model.means - chunked.model.means).max() < 1e-6
    assert np.abs(plain.model.precisions - chunked.model.precisions).max() < 1e-6
    assert chunked.messages > 2.5 * plain.messages  # three sessions instead of one


def test_cross_fitted_threshold_equals_the_centralised_one():
    fleet = fleet_patterns(n_participants=5, n_samples=80, n_dims=2, n_patterns=2, seed=1)
    s = FleetSettings(n_components=2, folds=3, seed=0)
    run = simulate_fleet(fleet.datasets, s, seed=0)
    central = fit_centralised(list(fleet.datasets.values()), s, init=run.results["p00"].init)
    assert run.model.threshold == pytest.approx(central.model.threshold, rel=1e-6)


def test_every_participants_own_calibration_equals_the_centralised_one():
    # two participants with enough held-out scores for their own 95th percentile (>= 19),
    # three without: those three pool theirs by consensus
    fleet = fleet_patterns(n_participants=5, n_samples=[60, 50, 12, 14, 16], n_dims=2, n_patterns=2, seed=2)
    s = FleetSettings(n_components=2, folds=3, percentile=95.0, ewma=0.2, seed=0)
    run = simulate_fleet(fleet.datasets, s, seed=0)
    central = fit_centralised(list(fleet.datasets.values()), s, init=run.results["p00"].init)
    rules = [run.results[n].calibration for n in fleet.datasets]
    assert [c.rule for c in rules] == ["own", "own", "shared", "shared", "shared"]
    assert [c.ewma for c in rules] == [0.2, 0.2, None, None, None]
    assert [c.scores for c in rules] == [60, 50, 42, 42, 42]
    for mine, twin in zip(rules, central.calibrations, strict=True):
        assert (mine.rule, mine.ewma, mine.scores) == (twin.rule, twin.ewma, twin.scores)
        assert mine.threshold == pytest.approx(twin.threshold, rel=1e-6)
    # the three small ones hold one pooled threshold; the big ones differ from each other and from it
    assert rules[2].threshold == rules[3].threshold == rules[4].threshold
    assert len({rules[0].threshold, rules[1].threshold, rules[2].threshold}) == 3
    # scope "fleet": everybody takes the model's one pooled threshold
    pooled = simulate_fleet(fleet.datasets, dataclasses.replace(s, threshold_scope="fleet", folds=0, chunks=1), seed=0)
    assert {r.calibration.threshold for r in pooled.results.values()} == {pooled.model.threshold}
    assert {r.calibration.rule for r in pooled.results.values()} == {"fleet"}


def _monitored_fleet(noise: bool):
    rng = np.random.default_rng(3)
    M = 3
    data = {f"n{s}": rng.normal(size=(120, M)) for s in range(4)}
    # one participant whose data are one sample and far symmetric pairs: its released
    # mean (m / N) is exactly that one sample
    x0 = np.array([0.2, -0.1, 0.3])
    data["leaky"] = np.vstack([x0, x0 + 8 * np.eye(M), x0 - 8 * np.eye(M)])
    s = FleetSettings(n_components=1, folds=0, l0=2.0, privacy_noise=noise, noise_samples=10, seed=0)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", PrivacyWarning)
        run = simulate_fleet(data, s, seed=0)
    return run, [w for w in caught if issubclass(w.category, PrivacyWarning)]


def test_l_diversity_monitor_fires_on_a_dominant_sample_only():
    run, caught = _monitored_fleet(noise=False)
    assert all(run.results["leaky"].privacy_fired)
    assert max(max(e) for e in run.results["leaky"].entropies) < np.log(2.0)
    for name in ("n0", "n1", "n2", "n3"):
        assert not any(run.results[name].privacy_fired)
        assert min(max(e) for e in run.results[name].entropies) > np.log(2.0)
    assert len(caught) == len(run.results["leaky"].privacy_fired)


def test_posterior_noise_is_added_where_the_monitor_fires():
    run, _ = _monitored_fleet(noise=True)
    leaky = next(p for p in run.participants if p.name == "leaky")
    fit_releases = [vec for key, vec in leaky.released if key.startswith("fit/")]
    assert fit_releases
    for vec in fit_releases:
        N, _, _, extra = unpack_statistics(vec, 1, 3)
        assert N[0] == pytest.approx(7 + 10)  # 7 real samples + 10 posterior pseudo-samples
        assert extra[1] == 7  # the sample count itself is not inflated
    assert run.identical


def test_a_fleet_of_one_is_the_centralised_fit():
    X = fleet_patterns(n_participants=1, n_samples=300, n_dims=2, n_patterns=2, seed=2).datasets["p00"]
    s = FleetSettings(n_components=2, folds=0, seed=0)
    run = simulate_fleet({"only": X}, s)
    central = fit_centralised([X], s, init=run.results["only"].init)
    assert run.messages == 0
    assert np.abs(run.model.means - central.model.means).max() < 1e-9


def test_bad_fleets_are_refused_with_the_reason():
    X = np.zeros((5, 2))
    g = PeerGraph.ring(2)
    with pytest.raises(DataError, match="NaN"):
        FleetParticipant("a", np.full((3, 2), np.nan), ["a", "b"], g, SETTINGS)
    with pytest.raises(ConfigError, match="unique"):
        FleetParticipant("a", X, ["a", "a"], g, SETTINGS)
    with pytest.raises(ConfigError, match="3 nodes"):
        FleetParticipant("a", X, ["a", "b"], PeerGraph.ring(3), SETTINGS)
    with pytest.raises(ConfigError, match="not among"):
        FleetParticipant("c", X, ["a", "b"], g, SETTINGS)


def test_the_network_names_a_deadlock():
    def waits_forever():
        yield Exchange((), frozenset({MessageKey("s", 0, "average", "ghost")}))

    with pytest.raises(ModelError, match="deadlock"):
        InProcessNetwork().run({"a": waits_forever()})


def test_the_fleet_standardiser_is_exact_for_a_tight_sensor_with_a_large_mean():
    # TEP's reactor temperature has mean 120.4 and std 0.0122: from consensus over raw sums
    # [N, sum x, sum x x^T] its variance was lost to cancellation (docs/fleet.md)
    data = {f"p{s}": x for s, x in enumerate(tight_fleet_data(seed=12))}
    settings = FleetSettings(n_components=1, folds=0, n_init=1, max_iter=3, seed=0)
    run = simulate_fleet(data, settings, seed=3)
    pooled = np.vstack(list(data.values()))
    exact = pooled.std(axis=0, ddof=1)
    mean = np.array([math.fsum(col) / len(col) for col in pooled.T])
    assert run.identical
    for r in run.results.values():
        assert np.all(np.abs(r.model.scale[:3] - exact[:3]) <= 1e-6 * exact[:3]), (r.model.scale, exact)
        assert r.model.scale[3] == 1.0  # the constant sensor stays constant
        # the agreed mean is within 1e-9 standard deviations of the pooled one (correctly
        # rounded: numpy's pairwise mean of values near 1e4 is itself off by ~1e-9 of 1e-2)
        assert np.all(np.abs(r.model.center[:3] - mean[:3]) <= 1e-9 * exact[:3])
        sessions = {k.rsplit("/", 1)[0] for k in r.session_rounds if k.startswith("scale/")}
        assert sessions == {"scale/mean", "scale/spread", "scale/moments"}
    # and it is the centralised twin's standardiser
    central = initialise_centralised(list(data.values()), settings)
    assert np.allclose(run.model.scale, central.scaler.std, rtol=1e-6, atol=0.0)
    assert run.results["p0"].init.n_total == central.n_total == len(pooled)
