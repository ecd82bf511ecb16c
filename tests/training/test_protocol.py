"""Client and server cores: gradients against finite differences, estimators, convergence checks, privacy contract."""

from __future__ import annotations

import math

import numpy as np
import pytest

from fedrca.detectors.ekf import ExtendedKalmanFilter
from fedrca.detectors.plant import PlantDetector
from fedrca.exceptions import ConvergenceError, MessageError
from fedrca.training.client import Client, measurement_states
from fedrca.training.federated import FederatedTraining
from fedrca.training.linear import instrumental_variables, lagged_design, ordinary_least_squares
from fedrca.training.messages import GradientMessage, decode_message, encode_message
from fedrca.training.server import Server
from tests.training.conftest import linear_setup, nonlinear_setup


def _round(job: FederatedTraining) -> dict[str, GradientMessage]:
    """One round by hand, returning the gradient messages (not yet applied)."""
    for client in job.clients.values():
        job.server.receive(client.states_message(job.round))
    return job.server.respond()


def _fd_gradient(f, theta, h=1e-6):
    grad = np.zeros_like(theta)
    for idx in np.ndindex(*theta.shape):
        for sign in (1.0, -1.0):
            t = theta.copy()
            t[idx] += sign * h
            grad[idx] += sign * f(t) / (2 * h)
    return grad


@pytest.mark.parametrize("setup", [linear_setup, nonlinear_setup])
def test_client_gradient_matches_finite_differences_of_its_objective(setup):
    config, _, frames, settings = setup(n_samples=400, server_weight=0.7, ridge=0.05)
    job = FederatedTraining(config, frames, settings=settings)
    grads = _round(job)
    rng = np.random.default_rng(1)
    for plant, client in job.clients.items():
        rows = client.window(0)
        x_s = job.server._predict(rows)[:, job.server._slice(job.server.plants.index(plant))]
        client.theta = 0.05 * rng.normal(size=client.theta.shape)
        # the gradient the server sent was computed at Theta = 0; recompute it at the new Theta
        _, x_a = client.augmented(rows)
        message = GradientMessage(round=0, plant=plant, version=0, start=rows.start, grad=-2.0 * (x_s - x_a))
        client._pending = (*client._pending[:3], client.augmented(rows)[0], np.zeros_like(x_a))
        _, analytic = client.gradient(message)
        numeric = _fd_gradient(lambda t, c=client, r=rows, xs=x_s: c.objective(r, xs, t), client.theta)
        assert np.allclose(analytic, numeric, rtol=1e-5, atol=1e-8), plant
        assert grads[plant].grad.shape == x_s.shape


def test_server_gradient_is_the_derivative_of_its_loss():
    config, _, frames, settings = linear_setup(n_samples=300)
    job = FederatedTraining(config, frames, settings=settings)
    grads = _round(job)
    server, rows = job.server, slice(job.clients["plant1"].window(0).start, job.clients["plant1"].window(0).stop)
    for m, plant in enumerate(server.plants):
        cols = server._slice(m)
        x_s = server._predict(rows)[:, cols]
        x_a = server._x_a[rows, cols].copy()
        t, k = 17, 1
        h = 1e-6
        losses = []
        for sign in (1, -1):
            x = x_a.copy()
            x[t, k] += sign * h
            losses.append(np.sum((x_s[t] - x[t]) ** 2))
        assert grads[plant].grad[t, k] == pytest.approx((losses[0] - losses[1]) / (2 * h), rel=1e-6)
        assert grads[plant].server_loss == pytest.approx(np.mean(np.sum((x_s - x_a) ** 2, axis=1)))


def test_published_protocol_server_step_is_the_gradient_of_the_server_loss():
    config, _, frames, settings = linear_setup(n_samples=300, estimator="gd")
    job = FederatedTraining(config, frames, settings=settings)
    _round(job)
    server = job.server
    rows = slice(job.clients["plant1"].window(0).start, job.clients["plant1"].window(0).stop)
    rng = np.random.default_rng(0)
    server.set_cross(0.1 * rng.normal(size=(4, 4)))
    analytic = server.server_loss_gradient(rows)
    base = server.A * 0 + server._A_cross

    def loss(cross):
        server.set_cross(cross)
        return server.server_loss_at(rows)

    numeric = _fd_gradient(loss, base.copy())
    mask = 1.0 - server._own_mask()
    assert np.allclose(analytic, numeric * mask, rtol=1e-5, atol=1e-9)


def test_instrumental_variables_undo_the_attenuation_of_noisy_regressors():
    rng = np.random.default_rng(3)
    T = 20000
    A = np.array([[0.6, 0.0], [0.4, 0.5]])
    X = np.zeros((T, 2))
    for t in range(1, T):
        X[t] = A @ X[t - 1] + 0.1 * rng.normal(size=2)
    Z = X + 0.05 * rng.normal(size=X.shape)  # measurement states: white noise on the true state
    y, x, w = lagged_design(Z, 2)
    ols = ordinary_least_squares(y, x).coef
    iv = instrumental_variables(y, x, w)
    assert np.linalg.norm(ols - A) > 0.1  # attenuated
    assert np.linalg.norm(iv.coef - A) < 0.05
    assert np.all(np.abs(iv.coef - A) < 4 * iv.stderr)


def test_iv_standard_errors_are_calibrated():
    rng = np.random.default_rng(11)
    A = np.array([[0.5, 0.2], [0.0, 0.7]])
    scores = []
    for _ in range(40):
        T = 1500
        noise = 0.1 * rng.normal(size=(T, 2))
        X = np.zeros((T, 2))
        for t in range(1, T):
            X[t] = A @ X[t - 1] + noise[t]
        Z = X + 0.03 * rng.normal(size=X.shape)
        fit = instrumental_variables(*lagged_design(Z, 2))
        scores.append(((fit.coef - A) / fit.stderr).ravel())
    z = np.concatenate(scores)
    assert 0.75 < np.std(z) < 1.3
    assert abs(np.mean(z)) < 0.3


def test_measurement_states_for_a_nonlinear_measurement_invert_it_locally():
    ekf = ExtendedKalmanFilter(
        lambda x, u=None: 0.9 * x,
        lambda x: (
            np.column_stack([x[..., 0], x[..., 0] ** 2 + x[..., 1]])
            if np.ndim(x) == 2
            else np.array([x[0], x[0] ** 2 + x[1]])
        ),
        Q=np.eye(2),
        R=np.eye(2),
    )
    truth = np.array([[0.3, -0.2], [1.0, 0.5]])
    y = ekf.measure(truth)
    got = measurement_states(ekf, truth + 0.01, y)
    assert np.allclose(got, truth, atol=2e-3)


def test_client_convergence_check_matches_the_exact_spectrum(linear_small):
    config, _, frames, settings = linear_small
    job = FederatedTraining(config, frames, settings=settings)
    client = job.clients["plant2"]
    # linear proprietary model: the preconditioner is the exact Hessian, so lr P^-1 H = lr I
    lo, hi = client.iteration_spectrum(lr=0.5)
    assert lo == pytest.approx(0.5, rel=1e-6) and hi == pytest.approx(0.5, rel=1e-6)
    assert client.check_convergence() == pytest.approx(0.5, rel=1e-6)


def test_divergent_learning_rates_are_refused_with_the_fix(linear_small):
    config, _, frames, _ = linear_small
    settings = linear_setup(n_samples=300, client_lr=2.5)[3]
    job = FederatedTraining(config, frames, settings=settings)
    with pytest.raises(ConvergenceError, match=r"client_lr below 2"):
        job.run(rounds=2)


def test_nonlinear_client_spectrum_and_contraction(nonlinear_small):
    config, _, frames, settings = nonlinear_small
    job = FederatedTraining(config, frames, settings=settings)
    client = job.clients["plant2"]
    lo, hi = client.iteration_spectrum(lr=1.0)
    assert 0.0 < lo <= hi < 2.0
    # the measured radius is the one the iteration shows: the step halves the distance to the fixed point
    # for lr = 0.5 when P = H (identified linear model, exact)
    radius = client.check_convergence()
    assert radius == pytest.approx(0.5, abs=1e-6)


def _joint_radius(job: FederatedTraining) -> float:
    """Spectral radius of the noise-free joint round map (Theta of every client + the server's cross blocks)."""
    server = job.server
    clients = list(job.clients.values())
    sizes = [c.theta.size for c in clients]
    mask = 1.0 - server._own_mask()
    idx = np.flatnonzero(mask.ravel())
    state0 = (server.get_state(), [c.get_state() for c in clients], job.round)

    def step(vec):
        server.set_state(*state0[0])
        for c, st in zip(clients, state0[1]):
            c.set_state(*st)
        job.round = state0[2]
        offset = 0
        for c, n in zip(clients, sizes):
            c.theta = vec[offset : offset + n].reshape(c.theta.shape)
            offset += n
        cross = np.zeros(mask.size)
        cross[idx] = vec[offset:]
        server.set_cross(cross.reshape(mask.shape))
        job.run_round()
        return np.concatenate([c.theta.ravel() for c in clients] + [server._A_cross.ravel()[idx]])

    base = np.zeros(sum(sizes) + len(idx))
    f0 = step(base)
    J = np.column_stack([step(base + 1e-4 * e) - f0 for e in np.eye(len(base))]) / 1e-4
    return float(np.max(np.abs(np.linalg.eigvals(J))))


def test_joint_iteration_of_the_published_protocol_checked_against_its_true_spectral_radius():
    config, _, frames, settings = linear_setup(n_samples=200, estimator="gd", client_lr=0.5)
    job = FederatedTraining(config, frames, settings=settings)
    job.run_round()  # round 0 sends the fixed states and fits the server
    lam = job.server.curvature()
    assert _joint_radius(job) < 1.0  # the default steps pass the check and do converge
    too_big = linear_setup(n_samples=200, estimator="gd", client_lr=0.5, server_lr=3.0 / lam)[3]
    job = FederatedTraining(config, frames, settings=too_big)
    with pytest.raises(ConvergenceError, match="server_lr below"):
        job.run_round()
    # ... and that step really diverges: the joint map's spectral radius exceeds 1
    job = FederatedTraining(config, frames, settings=settings)
    job.run_round()
    job.server._server_lr = 3.0 / lam
    assert _joint_radius(job) > 1.0


def test_clients_send_only_states_never_raw_data(linear_small):
    config, _, frames, settings = linear_small
    job = FederatedTraining(config, frames, settings=settings)
    for plant, client in job.clients.items():
        message = decode_message(encode_message(client.states_message(0)))
        Y = frames[plant].Y
        for name in message.ARRAYS:
            value = getattr(message, name)
            if value is None:
                continue
            assert value.shape[1] == client.state_dim < Y.shape[1]  # P-dimensional states, not D sensors
            for col in range(Y.shape[1]):
                for k in range(value.shape[1]):
                    assert not np.allclose(value[:, k], Y[message.start : message.stop, col])


def test_states_are_clipped_noised_and_charged_when_state_privacy_is_on():
    config, _, frames, settings = linear_setup(
        n_samples=600, privacy={"state_epsilon": 2.0, "state_clip": 0.5, "delta": 1e-5}
    )
    job = FederatedTraining(config, frames, settings=settings)
    mu = _mu(2.0)
    for client in job.clients.values():
        rows = client.window(0)
        _, x_a = client.augmented(rows)
        first = client.states_message(0)
        # 4 state vectors per record in the first release (x_a, x̂_c, x_c, x̃): sensitivity 2 c sqrt(4)
        sigma = 2 * 0.5 * 2 / mu
        assert first.noise_sigma == pytest.approx(sigma) and first.clip == 0.5 and first.has_fixed_states
        assert np.std(first.x_a - x_a) == pytest.approx(sigma, rel=0.1)
        assert np.std(first.x_meas - client.data.x_meas[rows]) == pytest.approx(sigma, rel=0.1)
        assert client.accountant.mu() == pytest.approx(mu)
        job.server.receive(first)
    for plant, message in job.server.respond().items():
        job.clients[plant].apply_gradient(message)
    job.round = 1
    for client in job.clients.values():
        second = client.states_message(1)
        # later rounds send x_a only: one vector per record, and the ledger composes exactly
        assert not second.has_fixed_states and second.noise_sigma == pytest.approx(2 * 0.5 / mu)
        assert client.accountant.mu() == pytest.approx(math.sqrt(2) * mu)


def _mu(epsilon: float) -> float:
    from fedrca.privacy.accounting import gaussian_mu

    return gaussian_mu(epsilon, 1e-5)


def test_self_correction_removes_the_clients_own_noise_exactly(linear_small):
    config, _, frames, _ = linear_small
    noisy = linear_setup(n_samples=300, privacy={"state_epsilon": 1.0, "state_clip": 0.5})[3]
    job = FederatedTraining(config, frames, settings=noisy)
    grads = _round(job)
    server = job.server
    for m, (plant, client) in enumerate(job.clients.items()):
        rows = client.window(0)
        cols = server._slice(m)
        # what the gradient would be if the server had the true x_a and x_c of this plant (its prediction unchanged)
        pred = server._predict(rows)[:, cols] - server._x_c[rows, cols]
        _, x_a = client.augmented(rows)
        expected = -2.0 * (client.data.x_c[rows] + pred - x_a)
        corrected = grads[plant].grad + 2.0 * (client._x_c_error[rows] - client._pending[4])
        assert np.allclose(corrected, expected, atol=1e-9)
        assert not np.allclose(grads[plant].grad, expected, atol=1e-3)


def test_gradient_privacy_clips_the_other_plants_part_and_charges_the_others():
    config, _, frames, settings = linear_setup(
        n_samples=300, privacy={"gradient_epsilon": 1.0, "gradient_clip": 0.05, "delta": 1e-5}
    )
    job = FederatedTraining(config, frames, settings=settings)
    grads = _round(job)
    mu = _mu(1.0)
    for plant, message in grads.items():
        assert message.noise_sigma == pytest.approx(2 * 0.05 / mu) and message.clip == 0.05
        assert message.privacy_mu2 == pytest.approx(mu**2)  # one other plant receives a gradient from its records
        job.clients[plant].apply_gradient(message)
        assert job.clients[plant].accountant.mu("gradients") == pytest.approx(mu)
    assert job.server.clipped > 0


def test_out_of_order_messages_are_refused(linear_small):
    config, _, frames, settings = linear_small
    job = FederatedTraining(config, frames, settings=settings)
    client = job.clients["plant1"]
    with pytest.raises(MessageError, match="without a pending"):
        client.apply_gradient(GradientMessage(round=0, plant="plant1", version=0, start=10, grad=np.zeros((5, 2))))
    msg = client.states_message(0)
    with pytest.raises(MessageError, match="still awaits"):
        client.states_message(1)
    job.server.receive(msg)
    with pytest.raises(MessageError, match="duplicate"):
        job.server.receive(msg)
    with pytest.raises(MessageError, match="no states yet from plant2"):
        job.server.respond()
    wrong = GradientMessage(round=3, plant="plant1", version=0, start=msg.start, grad=np.zeros((msg.n_samples, 2)))
    with pytest.raises(MessageError, match="awaits round 0"):
        client.apply_gradient(wrong)


def test_server_refuses_states_outside_its_contract():
    server = Server(["a", "b"], [2, 3], n_samples=50, first_row=5, settings=linear_setup(n_samples=200)[3])
    from fedrca.training.messages import StatesMessage

    with pytest.raises(MessageError, match="unknown plant"):
        server.receive(StatesMessage(round=0, plant="c", version=0, start=5, x_a=np.zeros((4, 2))))
    with pytest.raises(MessageError, match="expected 3"):
        server.receive(StatesMessage(round=0, plant="b", version=0, start=5, x_a=np.zeros((4, 2))))
    with pytest.raises(MessageError, match="outside"):
        server.receive(StatesMessage(round=0, plant="a", version=0, start=48, x_a=np.zeros((4, 2))))
    with pytest.raises(MessageError, match="never sent the fixed states"):
        server.receive(StatesMessage(round=0, plant="a", version=0, start=5, x_a=np.zeros((4, 2))))
    assert math.isnan(server.A_stderr[0, 0]) and not server.fitted


def test_plain_detector_is_a_valid_client():
    rng = np.random.default_rng(0)
    Y = rng.normal(size=(300, 4)).cumsum(axis=0) * 0.05 + rng.normal(size=(300, 4))
    det = PlantDetector(name="p", n_states=2, seed=0).fit(Y)
    client = Client(det, Y, settings=linear_setup(n_samples=200)[3])
    assert client.state_dim == 2 and client.reconstruction_loss() == pytest.approx(client.initial_loss)
