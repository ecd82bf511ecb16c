"""Learning with control inputs (P3): gradients by finite differences, B and the ATE, disentanglement, instruments."""

from __future__ import annotations

import numpy as np
import pytest

from fedrca.contracts import SERVER
from fedrca.training.client import Disentanglement
from fedrca.training.federated import FederatedTraining
from fedrca.training.linear import instrumental_variables, lagged_design_with_inputs
from fedrca.training.messages import GradientMessage, decode_message, encode_message
from fedrca.whatif import average_treatment_effect
from tests.training.conftest import inputs_setup, linear_setup, nonlinear_setup


def _round(job: FederatedTraining) -> dict[str, GradientMessage]:
    for client in job.clients.values():
        job.server.receive(client.states_message(job.round))
    return job.server.respond()


def _fd(f, x, h=1e-6):
    grad = np.zeros_like(x)
    for idx in np.ndindex(*x.shape):
        for sign in (1.0, -1.0):
            y = x.copy()
            y[idx] += sign * h
            grad[idx] += sign * f(y) / (2 * h)
    return grad


# -- gradients ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("setup", [inputs_setup, nonlinear_setup])
def test_client_gradients_with_offset_bias_and_penalty_match_finite_differences(setup):
    xi = 2.0
    config, _, frames, settings = setup(
        n_samples=400, server_weight=0.7, ridge=0.05, disentanglement=xi, client_bias=True
    )
    job = FederatedTraining(config, frames, settings=settings)
    _round(job)
    server = job.server
    rng = np.random.default_rng(1)
    for m, (plant, client) in enumerate(job.clients.items()):
        rows, cols = client.window(0), server._slice(m)
        x_s = server._predict(rows)[:, cols]
        own = server.A[cols, cols]
        z = (server._xhat_prev[rows] @ server._cross_transition().T)[:, cols]
        P = client.state_dim
        client.theta = 0.05 * rng.normal(size=client.theta.shape)
        client.offset, client.bias = 0.1 * rng.normal(size=P), 0.1 * rng.normal(size=P)
        xhat_a_prev, x_a = client.augmented(rows)
        gap = (xhat_a_prev - client.data.xhat_prev[rows]) @ own.T - z
        message = GradientMessage(
            round=0, plant=plant, version=0, start=rows.start, grad=-2.0 * (x_s - x_a), grad_prev=2 * xi * gap @ own
        )
        client._pending = (*client._pending[:3], xhat_a_prev, np.zeros_like(x_a))
        _, g_theta, g_offset, g_bias = client.gradients(message)
        penalty = Disentanglement(own, z, xi)
        theta, offset, bias = client.theta, client.offset, client.bias

        def J(t=theta, o=offset, b=bias, c=client, r=rows, xs=x_s, pen=penalty):
            return c.objective(r, xs, t, b, o, pen)

        assert np.allclose(g_theta, _fd(lambda t: J(t=t), theta), rtol=1e-5, atol=1e-8), plant
        assert np.allclose(g_offset, _fd(lambda o: J(o=o), offset), rtol=1e-5, atol=1e-8), plant
        assert np.allclose(g_bias, _fd(lambda b: J(b=b), bias), rtol=1e-5, atol=1e-8), plant


def test_server_penalty_gradient_is_the_derivative_of_its_loss():
    xi = 1.5
    config, _, frames, settings = inputs_setup(n_samples=300, disentanglement=xi)
    job = FederatedTraining(config, frames, settings=settings)
    grads = _round(job)
    server = job.server
    rows = job.clients["plant2"].window(0)
    t, k, h = 23, 1, 1e-6
    for m, plant in enumerate(server.plants):
        cols = server._slice(m)

        def loss_at(value, m=m, cols=cols):
            saved = server._xhat_a_prev[rows.start + t, cols.start + k]
            server._xhat_a_prev[rows.start + t, cols.start + k] = value
            x_s = server._predict(rows)[t, cols]
            residual = np.sum((x_s - server._x_a[rows][t, cols]) ** 2)
            gap = server._penalty_gap(rows)[t, cols]
            server._xhat_a_prev[rows.start + t, cols.start + k] = saved
            return residual + xi * np.sum(gap**2)

        x0 = server._xhat_a_prev[rows.start + t, cols.start + k]
        numeric = (loss_at(x0 + h) - loss_at(x0 - h)) / (2 * h)
        assert grads[plant].grad_prev[t, k] == pytest.approx(numeric, rel=1e-6, abs=1e-9)
        assert server.penalties[plant] > 0.0


def test_published_protocol_steps_on_A_and_B_are_the_gradient_of_the_server_loss():
    config, _, frames, settings = inputs_setup(n_samples=300, estimator="gd", disentanglement=0.8)
    job = FederatedTraining(config, frames, settings=settings)
    _round(job)
    server = job.server
    rows = job.clients["plant1"].window(0)
    rng = np.random.default_rng(0)
    A0, B0 = 0.1 * rng.normal(size=(4, 4)), 0.1 * rng.normal(size=(4, 4))
    server.set_cross(A0, B0)
    grad_A, grad_B = server.server_loss_gradients(rows)

    def loss(A=A0, B=B0):
        server.set_cross(A, B)
        return server.server_loss_at(rows)

    mask_A, mask_B = 1.0 - server._own_mask(), 1.0 - server._own_input_mask()
    assert np.allclose(grad_A, _fd(lambda a: loss(A=a), A0.copy()) * mask_A, rtol=1e-5, atol=1e-9)
    assert np.allclose(grad_B, _fd(lambda b: loss(B=b), B0.copy()) * mask_B, rtol=1e-5, atol=1e-9)
    assert np.abs(grad_B).sum() > 0  # the input blocks really are learned


def test_joint_client_iteration_spectrum_is_the_explicit_one():
    # linear proprietary model: the joint (Theta, theta_0, phi) preconditioner is the exact Hessian,
    # so every eigenvalue of lr P^-1 H is lr; checked against the explicit Hessian of the objective
    config, _, frames, settings = inputs_setup(n_samples=300, server_weight=0.5, client_lr=0.7, disentanglement=0.0)
    job = FederatedTraining(config, frames, settings=settings)
    _round(job)
    client, server = job.clients["plant2"], job.server
    assert client.learns_bias  # resolved on: the site declares inputs
    lo, hi = client.iteration_spectrum()
    assert lo == pytest.approx(0.7, rel=1e-6) and hi == pytest.approx(0.7, rel=1e-6)
    rows, cols = client.window(0), server._slice(1)
    x_s = server._predict(rows)[:, cols]
    theta0, F = client._extended(), client.theta.shape[1]

    def gradient(v):
        client._set_extended(v[: theta0.size].reshape(theta0.shape))
        client.bias = v[theta0.size :]
        xhat_a_prev, x_a = client.augmented(rows)
        client._pending = (0, rows.start, rows.stop, xhat_a_prev, np.zeros_like(x_a))
        msg = GradientMessage(round=0, plant="plant2", version=0, start=rows.start, grad=-2.0 * (x_s - x_a))
        _, g_t, g_o, g_b = client.gradients(msg)
        return np.concatenate([np.hstack([g_t, g_o[:, None]]).ravel(), g_b])

    base = np.zeros(theta0.size + client.state_dim)
    g0 = gradient(base)
    H = np.column_stack([gradient(e) - g0 for e in np.eye(len(base))])  # quadratic: exact
    pre = []
    for col in H.T:
        step, step_bias = client._solve(col[: theta0.size].reshape(theta0.shape), col[theta0.size :])
        pre.append(np.concatenate([step.ravel(), step_bias]))
    eig = np.linalg.eigvals(0.7 * np.column_stack(pre))
    assert np.allclose(eig, 0.7, atol=1e-6)
    assert theta0.shape[1] == F + 1


# -- the learner on the synthetic system (P3's setting) --------------------------------------------------
def test_server_recovers_the_average_treatment_effect_within_ten_percent():
    config, data, frames, settings = inputs_setup(n_samples=10000, disentanglement=1.0)
    job = FederatedTraining(config, frames, settings=settings)
    job.run(rounds=5)
    server = job.server
    C2, B21 = data.C[1], data.input_block(1, 0)
    for du in np.eye(2):
        true = average_treatment_effect(C2, B21, du)
        learned = average_treatment_effect(C2, server.input_block(1, 0), du)
        assert np.linalg.norm(learned - true) < 0.10 * np.linalg.norm(true)
    # no input path from plant 2 to plant 1: within three standard errors of zero
    se = server.B_stderr[server._slice(0), server._uslice(1)]
    assert np.all(np.abs(server.input_block(0, 1)) < 3.0 * se + 1e-3)
    # the own blocks are learned too (what a query of a plant's own inputs uses)
    assert np.linalg.norm(server.input_block(1, 1) - data.input_block(1, 1)) < 0.1 * np.linalg.norm(
        data.input_block(1, 1)
    )
    assert np.all(np.abs(np.linalg.eigvals(server.A)) < 1.0)


def test_disentanglement_moves_the_average_input_push_into_the_bias():
    gaps = {}
    for xi in (0.0, 1.0):
        config, _, frames, settings = inputs_setup(n_samples=4000, disentanglement=xi)
        job = FederatedTraining(config, frames, settings=settings)
        job.run(rounds=8)
        client, server = job.clients["plant2"], job.server
        u_prev = job.clients["plant1"].data.u_prev  # plant 1's u(t-1), plant 2 never sees it
        push = (u_prev @ server.input_block(1, 0).T)[client.train_rows].mean(axis=0)
        gaps[xi] = np.linalg.norm(client.bias - push) / np.linalg.norm(push)
    # without the penalty the bias also carries the mean push of plant 1's *state*; with it, only the inputs'
    assert gaps[0.0] > 0.3
    assert gaps[1.0] < 0.15


def test_instruments_for_inputs_under_feedback_control():
    # x(t) = a x(t-1) + b u(t-1) + w; a controller sets u(t) from the noisy measurement x̃(t) = x(t) + n(t):
    # u(t-1) is then correlated with n(t-1), which is in the regression error; lagged inputs are valid instruments
    rng = np.random.default_rng(5)
    T, a, b, k = 60000, 0.8, 0.5, 0.6
    x, e = 0.0, 0.0
    xs, us = np.zeros(T), np.zeros(T)
    n = 1.0 * rng.normal(size=T)
    for t in range(T):
        xs[t] = x
        e = 0.8 * e + rng.normal()
        us[t] = -k * (x + n[t]) + e
        x = a * x + b * us[t] + 0.3 * rng.normal()
    Z = (xs + n)[:, None]
    U_prev = np.concatenate([[0.0], us[:-1]])[:, None]
    estimates = {}
    for mode in ("exogenous", "lagged"):
        y, X, W = lagged_design_with_inputs(Z, U_prev, 2, mode)
        estimates[mode] = instrumental_variables(y, X, W).coef[0]
    assert abs(estimates["lagged"][1] - b) < 0.05 and abs(estimates["lagged"][0] - a) < 0.05
    assert abs(estimates["exogenous"][1] - b) > 0.1  # treating a feedback input as exogenous is biased


def test_messages_carry_the_penalty_gradient_and_the_inputs():
    msg = GradientMessage(round=1, plant="p", version=2, start=3, grad=np.ones((4, 2)), grad_prev=np.full((4, 2), 0.5))
    assert decode_message(encode_message(msg)) == msg
    config, _, frames, settings = inputs_setup(n_samples=200, disentanglement=1.0)
    job = FederatedTraining(config, frames, settings=settings)
    states = job.clients["plant1"].states_message(0)
    assert states.u.shape == (states.n_samples, 2) and states.xhat_a_prev is not None


def test_inputs_and_the_penalty_gradient_are_private_when_privacy_is_on():
    config, _, frames, settings = inputs_setup(
        n_samples=400,
        disentanglement=2.0,
        privacy={"state_epsilon": 5.0, "gradient_epsilon": 5.0, "state_clip": 3.0, "gradient_clip": 2.0},
    )
    job = FederatedTraining(config, frames, settings=settings)
    client = job.clients["plant1"]
    states = client.states_message(0)
    raw = client.data.u_prev[client.window(0)]
    assert states.noise_sigma > 0 and np.std(states.u - raw) == pytest.approx(states.noise_sigma, rel=0.1)
    job.server.receive(states)
    job.server.receive(job.clients["plant2"].states_message(0))
    grads = job.server.respond()
    server = job.server
    rows = client.window(0)
    for m, plant in enumerate(server.plants):
        cols = server._slice(m)
        own = server.A[cols, cols]
        gap = server._penalty_gap(rows)[:, cols]
        z = (server._xhat_prev[rows] @ server._cross_transition().T)[:, cols]
        z_norm = np.linalg.norm(z, axis=1, keepdims=True)
        clipped = z * np.minimum(1.0, 1.0 / np.maximum(z_norm, 1e-300))  # clip to G/2 = 1
        exact = 2.0 * 2.0 * (gap + z - clipped) @ own
        noise = grads[plant].grad_prev - exact
        expected = 2.0 * np.linalg.norm(own, 2) * grads[plant].noise_sigma
        assert np.std(noise) == pytest.approx(expected, rel=0.1), plant
        assert grads[plant].noise_sigma == pytest.approx(server._mechanism.sigma(2))


def test_a_site_without_inputs_trains_as_before(linear_small):
    config, _, frames, settings = linear_small
    job = FederatedTraining(config, frames, settings=settings)
    assert not job.settings.client_bias and job.server.input_dim == 0
    result = job.run(rounds=2)
    assert "B" not in result.artifacts[SERVER].arrays
    assert not np.any(job.clients["plant2"].bias)
    assert linear_setup  # the P2 set-up is unchanged
