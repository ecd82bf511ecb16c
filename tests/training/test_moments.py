"""Estimator ``moments`` (issue 15): states and moments released once, charged once, consistent without noise."""

from __future__ import annotations

import math

import numpy as np
import pytest

from fedrca.contracts.artifacts import SERVER
from fedrca.exceptions import PrivacyBudgetExceeded
from fedrca.privacy.accounting import composed_epsilon, gaussian_mu
from fedrca.privacy.mechanisms import laplace_scale
from fedrca.rca.graph import InterdependencyGraph
from fedrca.training.federated import FederatedTraining
from fedrca.training.messages import ReleaseMessage, decode_message, encode_message, quantisation_variance, quantise

from .conftest import linear_setup

PRIVATE = {"state_epsilon": 1.0, "moment_epsilon": 1.0, "delta": 1e-5, "state_clip": 0.3}


def _moments(n_samples: int, rounds: int = 5, seed: int = 0, **privacy: float):
    config, data, frames, _ = linear_setup(n_samples=n_samples)
    _, _, _, settings = linear_setup(
        n_samples=4,
        estimator="moments",
        rounds=rounds,
        seed=seed,
        privacy={**config.training.privacy.model_dump(), **privacy},
    )
    return config, data, frames, settings


def test_noise_free_moments_recover_the_cross_blocks():
    """epsilon = inf: the Yule-Walker estimate of the released moments is consistent (0.007 / 0.016 measured)."""
    config, data, frames, settings = _moments(20_000)
    result = FederatedTraining(config, frames, settings=settings).run()
    assert np.linalg.norm(result.server.block(1, 0) - data.block(1, 0)) <= 0.03
    assert np.linalg.norm(result.server.block(0, 1)) <= 0.03
    assert all(c.epsilon_spent() == 0.0 for c in result.clients.values())


def test_a_run_is_charged_once_whatever_the_rounds():
    """Two releases per plant, composed exactly; every round after them is post-processing."""
    expected = composed_epsilon(1e-5, mu=gaussian_mu(1.0, 1e-5), pure={1.0: 1})
    spent = []
    for rounds in (1, 20):
        config, _, frames, settings = _moments(2_000, rounds=rounds, **PRIVATE)
        result = FederatedTraining(config, frames, settings=settings).run()
        spent.append([c.epsilon_spent() for c in result.clients.values()])
        manifest = result.artifacts["plant1"].manifest
        assert manifest["privacy"]["pure"] and manifest["privacy"]["mu2"] == pytest.approx(gaussian_mu(1.0, 1e-5) ** 2)
    assert spent[0] == spent[1]
    assert spent[0] == pytest.approx([expected, expected], rel=1e-6)
    assert 1.9 < expected < 2.0  # less than the sum 1 + 1 of the two epsilons


def test_a_budget_below_the_two_releases_is_refused_before_anything_leaves():
    config, _, frames, settings = _moments(2_000, **PRIVATE, budget=1.9)
    job = FederatedTraining(config, frames, settings=settings)
    with pytest.raises(PrivacyBudgetExceeded, match="plant1"):
        job.run()
    assert all(c.epsilon_spent() == 0.0 for c in job.clients.values())


def test_two_plants_at_total_epsilon_2_learn_the_true_graph():
    """The issue-15 setting (T = 20k, epsilon 2 per plant for the run), one fixed seed: docs/privacy.md has more."""
    config, _, frames, settings = _moments(20_000, **PRIVATE, budget=2.0)
    result = FederatedTraining(config, frames, settings=settings).run()
    graph = InterdependencyGraph.from_server_artifact(result.artifacts[SERVER])
    assert graph.edges() == [("plant1", "plant2")]
    assert max(c.epsilon_spent() for c in result.clients.values()) <= 2.0


@pytest.mark.parametrize("encoding", ["float32", "int8"])
def test_quantisation_error_is_bounded_by_the_declared_variance(encoding):
    rng = np.random.default_rng(3)
    x = rng.normal(size=(500, 4))
    err = quantise(x, encoding) - x
    var = quantisation_variance(x, encoding)
    assert np.max(np.abs(err)) <= math.sqrt(12 * var) / 2 + 1e-15  # at most half a step
    if encoding == "int8":
        assert np.var(err) == pytest.approx(var, rel=0.2)  # uniform on one step


def test_int8_release_is_a_quarter_of_float64_and_decodes_to_the_quantised_states():
    states = np.random.default_rng(4).normal(size=(400, 2))
    msg = ReleaseMessage(
        round=0, plant="plant1", version=0, start=0, x_meas=states, noise_scale=laplace_scale(0.3, 2, 1.0), clip=0.3
    )
    small, full = encode_message(msg, "int8"), encode_message(msg, "float64")
    assert len(small) < 0.3 * len(full)
    back = decode_message(small)
    assert isinstance(back, ReleaseMessage)
    np.testing.assert_array_equal(back.x_meas, quantise(states, "int8"))


def test_attenuation_and_released_noise_are_their_monte_carlo_formulas_from_one_cached_draw():
    """Both read one cached draw; each equals its own formula on that draw, whichever is asked first."""
    from fedrca.training.moments import attenuation, released_noise

    scale, bound, dim, draws = 0.7, 1.5, 3, 20_000
    e = np.random.default_rng(5).laplace(0.0, scale, (draws, dim))
    norm = np.linalg.norm(e, axis=1)
    # kappa = (1/P) E[tr J]: P inside the ball, (b/|e|)(P - 1) outside
    kappa = np.where(norm > bound, bound / norm * (dim - 1), dim).mean() / dim
    # Var = E[|clip_b(e)|^2] / P
    variance = np.mean(np.minimum(norm, bound) ** 2) / dim
    assert released_noise(scale, bound, dim, seed=5, draws=draws) == pytest.approx(variance, rel=1e-12)
    assert attenuation(scale, bound, dim, seed=5, draws=draws) == pytest.approx(kappa, rel=1e-12)
    assert 0.0 < kappa < 1.0 and variance < scale**2 * 2  # clipping shrinks both
    assert attenuation(scale, bound, dim, seed=6, draws=draws) != attenuation(scale, bound, dim, seed=5, draws=draws)


def _transition_draw_by_draw(plants, dims, releases, kappa, lags, cross_noise_var, draws, seed):
    """The reference: the simulation of estimate_transition's errors one draw at a time (its first form)."""
    from fedrca.training.moments import _assemble, _yule_walker

    G = _assemble(plants, dims, releases, kappa, lags)
    offsets = np.cumsum((0, *dims))
    block = {p: slice(int(offsets[i]), int(offsets[i + 1])) for i, p in enumerate(plants)}
    rng = np.random.default_rng(seed)
    sims = []
    for _ in range(draws):
        Gs = G.copy()
        for m in plants:
            rel = releases[m]
            n = rel.n_rows
            power = np.clip(np.diag(rel.own[lags]), 0.0, None)
            for j in range(lags + 1):
                Gs[j][block[m], block[m]] += rel.noise_sigma * rng.standard_normal(rel.own[lags].shape) / n
            for other in rel.cross:
                k = kappa[other]
                for j in range(lags + 1):
                    for target, shape in (
                        ((block[m], block[other]), (dims[plants.index(m)], dims[plants.index(other)])),
                        ((block[other], block[m]), (dims[plants.index(other)], dims[plants.index(m)])),
                    ):
                        own_rows = power if target[0] == block[m] else None
                        var_state = cross_noise_var[other] * (
                            own_rows[:, None] if own_rows is not None else power[None, :]
                        )
                        sd = np.sqrt(rel.noise_sigma**2 + np.broadcast_to(var_state, shape))
                        Gs[j][target] += 0.5 * sd * rng.standard_normal(shape) / (n * k)
        sims.append(_yule_walker(Gs))
    return G, np.var(np.stack(sims), axis=0)


@pytest.mark.parametrize("seed", [0, 3])
def test_the_vectorised_draws_equal_the_draw_by_draw_simulation(seed):
    from fedrca.training.moments import estimate_transition, plant_moments

    rng = np.random.default_rng(seed)
    plants, dims, lags = ("a", "b", "c"), (2, 3, 1), 2
    T = 400
    states = {p: rng.standard_normal((T, d)) * 0.3 for p, d in zip(plants, dims, strict=True)}
    released = {p: x + 0.1 * rng.standard_normal(x.shape) for p, x in states.items()}
    releases = {
        p: plant_moments(
            p,
            states[p],
            {o: released[o] for o in plants if o != p},
            clip=1.0,
            others_bounds={o: 2.0 for o in plants if o != p},
            lags=lags,
            mu=1.0,
            rng=rng,
        )
        for p in plants
    }
    kappa = {"a": 0.9, "b": 0.8, "c": 0.95}
    noise_var = {"a": 0.01, "b": 0.02, "c": 0.005}
    estimate = estimate_transition(plants, dims, releases, kappa, lags, noise_var, draws=50, seed=seed)
    G, simulated = _transition_draw_by_draw(plants, dims, releases, kappa, lags, noise_var, 50, seed)
    np.testing.assert_array_equal(estimate.gammas, G)
    # stderr^2 = the simulated variance + the sampling error of a VAR(1)
    n_obs = min(r.n_rows for r in releases.values())
    sigma_u = G[0] - estimate.A @ G[1].T
    sampling = np.outer(np.clip(np.diag(sigma_u), 0, None), np.clip(np.diag(np.linalg.pinv(G[0])), 0, None)) / n_obs
    np.testing.assert_allclose(estimate.stderr**2, simulated + sampling, rtol=1e-12, atol=0)
    assert simulated.min() > 0.0
