"""The training server: learns how plants drive each other from their (noised) states and inputs.

Per round the server receives one :class:`StatesMessage` per plant (same window),
predicts every plant's state from all plants' states and inputs,

    x_s,m(t) = x_c,m(t) + c_m + sum_n K_mn x̂_c,n(t-1) + sum_n L_mn u_n(t-1)           (linear server)
    x_s,m(t) = x_c,m(t) + c_m + sum_n W_mn phi_n(x̂_c,n(t-1)) + sum_n L_mn u_n(t-1)   (random-feature server)

and answers each plant with the per-sample gradient ``d l_t / d x_a,m(t) = -2 (x_s,m(t)
- x_a,m(t))`` of its server loss (clipped and noised when gradient privacy is on),

    l_t = ||x_s,m(t) - x_a,m(t)||^2 + xi ||Â_mm (x̂_a,m - x̂_c,m)(t-1) - sum_{n != m} Â_mn x̂_c,n(t-1)||^2,

whose second term (P3's disentanglement penalty, weight ``training.disentanglement``;
off by default) makes the plant's state correction carry the other plants' *state*
push, so that the plant's bias is left with the push of their *inputs*; with it on,
the server also sends ``d l_t / d x̂_a,m(t-1)``. x_c,m(t) is the plant's own
proprietary prediction (with its own inputs), so the server needs no plant's
proprietary model.

The server keeps two views of the same states. The *predictor* (K, L or W, fitted in
closed form by ridge regression of what the proprietary prediction misses,
``x̃_m(t) - x_c,m(t)``, on all plants' estimates ``x̂_c(t-1)`` and inputs ``u(t-1)``)
minimises ``sum_m ||x_s,m - x̃_m||^2``: it is the best target for the clients, whose
reconstruction loss is ``||x̃ - x_a||^2`` up to a constant. The *structure* of the
global model

    x_m(t) = sum_n A_mn x_n(t-1) + sum_n B_mn u_n(t-1) + w_m(t)

(block transition A and block input matrix B, with standard errors; the server
artifact, what the what-if queries of :mod:`fedrca.whatif` use) must instead
be unbiased, which a predictor on filter estimates is not.

How A and B are learned (``estimator``):

* ``"iv"`` (default): closed form, once every window's fixed states have arrived, by
  instrumental variables on the measurement states (:mod:`fedrca.training.linear`);
  consistent despite filter and DP noise. Inputs are their own instruments
  (``input_instruments: exogenous``, open loop) or are instrumented by their lags
  (``lagged``: valid under feedback control).
* ``"ols"``: closed form, least squares of x̂_c(t) on [x̂_c(t-1), u(t-1)] (attenuated; for comparison).
* ``"gd"``: the published protocol (P2, P3), ``x_s,m = x_c,m + sum_{n != m} A_mn x̂_c,n(t-1)
  + sum_{n != m} B_mn u_n(t-1)`` with gradient steps on the off-diagonal blocks of
  ``sum_m l_t`` jointly with the clients' steps (a fixed point of the joint iteration,
  biased towards what the augmentations can represent).

The server never sees raw data, only what the messages carry.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numpy.typing import NDArray

from fedrca.config import TrainingSettings
from fedrca.contracts.deadletter import DeadLetterReason as R
from fedrca.exceptions import ConvergenceError, MessageError, ModelError
from fedrca.privacy.mechanisms import GaussianMechanism, clip_rows
from fedrca.training.linear import (
    instrumental_variables,
    lagged_design,
    lagged_design_with_inputs,
    ordinary_least_squares,
    ridge_regression,
)
from fedrca.training.messages import GradientMessage, MomentsMessage, ReleaseMessage, StatesMessage
from fedrca.training.moments import attenuation, cross_prediction, estimate_transition, released_noise, unpack_moments
from fedrca.training.nonlinear import RandomFeatureCrossModel

__all__ = ["Server"]

FloatArray = NDArray[np.float64]


class Server:
    """Coordinating server of one site's training.

    Parameters
    ----------
    plants : plant names, in block order
    state_dims : P_m per plant
    n_samples : length T of the common time axis of the training data
    first_row : first time index the clients train on (after their warm-up)
    settings : training settings (estimator, features, privacy, learning rate, disentanglement)
    features : "linear" or "rff" (the cross-plant model used for the gradients)
    seed : seeds the random features and the gradient noise
    input_dims : U_m per plant (0 = no inputs; default: no plant has inputs)
    """

    def __init__(
        self,
        plants: list[str],
        state_dims: list[int],
        n_samples: int,
        first_row: int,
        settings: TrainingSettings,
        features: str = "linear",
        seed: int = 0,
        input_dims: list[int] | None = None,
    ) -> None:
        if len(plants) != len(state_dims) or not plants:
            raise ModelError("the server needs one state dimension per plant")
        if input_dims is not None and len(input_dims) != len(plants):
            raise ModelError("the server needs one input dimension per plant")
        if features not in ("linear", "rff"):
            raise ModelError(f"server features must be 'linear' or 'rff', got {features!r}")
        self.plants = list(plants)
        self.state_dims = tuple(int(d) for d in state_dims)
        self.input_dims = tuple(int(d) for d in (input_dims or [0] * len(plants)))
        self.n_samples = int(n_samples)
        self.first_row = int(first_row)
        self.settings = settings
        self.features = features
        self.seed = seed
        self._offsets = np.cumsum((0, *self.state_dims))
        self._u_offsets = np.cumsum((0, *self.input_dims))
        S = int(self._offsets[-1])
        n_in = int(self._u_offsets[-1])
        T = self.n_samples
        self._xhat_prev = np.zeros((T, S))
        self._x_c = np.zeros((T, S))
        self._x_meas = np.zeros((T, S))
        self._x_a = np.zeros((T, S))
        self._xhat_a_prev = np.zeros((T, S))
        self._u = np.zeros((T, n_in))
        self._received = np.zeros((T, len(plants)), dtype=bool)
        self._A = np.zeros((S, S))  # full block transition (diagonal blocks: the server's own-dynamics view)
        self._A_stderr = np.full((S, S), np.nan)
        self._A_cross = np.zeros((S, S))  # off-diagonal blocks (the published protocol's parameters)
        self._B_in = np.zeros((S, n_in))  # full block input matrix of the global model
        self._B_in_stderr = np.full((S, n_in), np.nan)
        self._B_cross = np.zeros((S, n_in))  # its off-diagonal blocks (the published protocol's parameters)
        self._intercept = np.zeros(S)
        self._K = np.zeros((S, S))  # linear predictor of the miss x̃ - x_c from x̂_c(t-1) ...
        self._L = np.zeros((S, n_in))  # ... and from u(t-1)
        self._rff = (
            RandomFeatureCrossModel(
                self.state_dims, settings.server_n_features, settings.server_lengthscale, seed, settings.server_ridge
            )
            if features == "rff"
            else None
        )
        self._fitted = False
        self._server_lr: float | None = settings.server_lr
        self._curvature: float | None = None
        self._rng = np.random.default_rng(seed)
        self._mechanism = GaussianMechanism(
            settings.privacy.gradient_epsilon, settings.privacy.delta, settings.privacy.gradient_clip
        )
        self._pending: dict[str, StatesMessage] = {}
        self.version = 0
        self.round = 0
        self.losses: dict[str, float] = {}
        self.penalties: dict[str, float] = {}
        self.clipped = 0

    # -- properties ---------------------------------------------------------------------------
    @property
    def state_dim(self) -> int:
        """S = sum P_m."""
        return int(self._offsets[-1])

    @property
    def input_dim(self) -> int:
        """sum U_m (0 when no plant has inputs)."""
        return int(self._u_offsets[-1])

    @property
    def xi(self) -> float:
        """Weight of the disentanglement penalty (0 = off)."""
        return float(self.settings.disentanglement)

    @property
    def A(self) -> FloatArray:
        """Learned block transition (S, S); off-diagonal block (m, n) = A_mn, the effect of plant n on m."""
        return self._A.copy()

    @property
    def A_stderr(self) -> FloatArray:
        """Standard errors of A's entries (S, S) (from the instrumental-variables fit)."""
        return self._A_stderr.copy()

    @property
    def B(self) -> FloatArray:
        """Learned block input matrix (S, sum U); block (m, n) = B_mn, the effect of plant n's inputs on m's state.

        For ``estimator: gd`` the diagonal blocks are the closed-form view and the off-diagonal
        ones the published protocol's current parameters.
        """
        return self._B_in.copy()

    @property
    def B_stderr(self) -> FloatArray:
        """Standard errors of B's entries (S, sum U)."""
        return self._B_in_stderr.copy()

    @property
    def fitted(self) -> bool:
        """True once the closed-form fit has run (all fixed states received)."""
        return self._fitted

    def block(self, m: int, n: int) -> FloatArray:
        """Â_mn."""
        o = self._offsets
        return self._A[o[m] : o[m + 1], o[n] : o[n + 1]].copy()

    def input_block(self, m: int, n: int) -> FloatArray:
        """B̂_mn (P_m, U_n)."""
        return self._B_in[self._slice(m), self._uslice(n)].copy()

    def _slice(self, m: int) -> slice:
        return slice(int(self._offsets[m]), int(self._offsets[m + 1]))

    def _uslice(self, m: int) -> slice:
        return slice(int(self._u_offsets[m]), int(self._u_offsets[m + 1]))

    @property
    def gradient_mu2(self) -> float:
        """mu^2 charged to each record of one plant by one round of gradient releases to the others."""
        if not self._mechanism.active:
            return 0.0
        return (len(self.plants) - 1) * self._mechanism.mu**2

    # -- protocol -----------------------------------------------------------------------------
    def receive(self, message: StatesMessage) -> None:
        """Take one plant's states for the current round."""
        if not isinstance(message, StatesMessage):
            raise MessageError(R.BAD_TYPE, f"the server takes states messages, got {type(message).__name__}")
        if message.plant not in self.plants:
            raise MessageError(R.UNKNOWN_PLANT, f"states from unknown plant '{message.plant}'")
        if message.round != self.round:
            raise MessageError(
                R.BAD_ROUND, f"states of round {message.round} from '{message.plant}' in round {self.round}"
            )
        if message.plant in self._pending:
            raise MessageError(R.DUPLICATE, f"second states message from '{message.plant}' in round {self.round}")
        m = self.plants.index(message.plant)
        P, n_u = self.state_dims[m], self.input_dims[m]
        if message.x_a.shape[1] != P:
            raise MessageError(R.BAD_ARRAY, f"'{message.plant}' sent {message.x_a.shape[1]} states, expected {P}")
        if message.start < self.first_row or message.stop > self.n_samples:
            raise MessageError(R.BAD_WINDOW, f"window {message.start}..{message.stop} outside the training range")
        if self.xi > 0.0 and (message.xhat_a_prev is None or message.xhat_a_prev.shape[1] != P):
            raise MessageError(
                R.BAD_ARRAY, f"'{message.plant}' must send x̂_a(t-1) ({P} states): the disentanglement penalty is on"
            )
        rows, cols = slice(message.start, message.stop), self._slice(m)
        self._x_a[rows, cols] = message.x_a
        if message.xhat_a_prev is not None and message.xhat_a_prev.shape[1] == P:
            self._xhat_a_prev[rows, cols] = message.xhat_a_prev
        if message.has_fixed_states:
            given = 0 if message.u is None else message.u.shape[1]
            if given != n_u:
                raise MessageError(R.BAD_ARRAY, f"'{message.plant}' sent {given} inputs, expected {n_u}")
            self._xhat_prev[rows, cols] = message.xhat_c_prev
            self._x_c[rows, cols] = message.x_c
            self._x_meas[rows, cols] = message.x_meas
            if n_u:
                self._u[rows, self._uslice(m)] = message.u
            self._received[rows, m] = True
        elif not self._received[rows, m].all():
            raise MessageError(R.MISSING_STATES, f"'{message.plant}' never sent the fixed states of this window")
        self._pending[message.plant] = message

    def respond(self) -> dict[str, GradientMessage]:
        """Gradients for every plant of the current round (all plants must have sent their states)."""
        missing = [p for p in self.plants if p not in self._pending]
        if missing:
            raise MessageError(R.MISSING_STATES, f"round {self.round}: no states yet from {', '.join(missing)}")
        starts = {msg.start for msg in self._pending.values()}
        stops = {msg.stop for msg in self._pending.values()}
        if len(starts) != 1 or len(stops) != 1:
            raise MessageError(R.BAD_WINDOW, f"round {self.round}: plants sent different windows")
        start, stop = starts.pop(), stops.pop()
        if not self._fitted and self._received[self.first_row :].all():
            self._fit()
        rows = slice(start, stop)
        x_s = self._predict(rows)
        residual = x_s - self._x_a[rows]
        gap = self._penalty_gap(rows)
        # the part of x_s that carries other plants' data: the predicted miss d = x_s - x_c
        miss = x_s - self._x_c[rows]
        out: dict[str, GradientMessage] = {}
        for m, plant in enumerate(self.plants):
            cols = self._slice(m)
            r = residual[:, cols]
            loss = float(np.mean(np.sum(r**2, axis=1)))
            grad_prev = None
            if gap is not None:
                g = gap[:, cols]
                penalty = float(np.mean(np.sum(g**2, axis=1)))
                self.penalties[plant] = penalty
                loss += self.xi * penalty
                # d/dx̂_a(t-1) of xi ||Â_mm (x̂_a - x̂_c) - z||^2 = 2 xi Â_mm' gap_t   (rows: gap @ Â_mm)
                grad_prev = 2.0 * self.xi * g @ self._A[cols, cols]
            self.losses[plant] = loss
            sigma = 0.0
            clip = None
            if self._mechanism.active:
                # Clip the data-dependent part to G/2 so that -2 d moves by at most 2G when another plant's
                # record changes, then g = -2 (d + x_c - x_a) + N(0, sigma^2), sigma = 2G / mu. The rest,
                # x_c - x_a, is the receiving plant's own (already noised) states.
                d, n_clipped = clip_rows(miss[:, cols], self._mechanism.clip / 2.0)
                self.clipped += n_clipped
                clip = self._mechanism.clip
                own = self._x_c[rows, cols] - self._x_a[rows, cols]
                sigma = self._mechanism.sigma(1 if gap is None else 2)
                grad = -2.0 * (d + own) + sigma * self._rng.standard_normal(d.shape)
                if gap is not None:
                    grad_prev = self._private_penalty_gradient(rows, m, gap[:, cols], sigma)
            else:
                # l_t = ||x_s - x_a||^2 ;  d l_t / d x_a = -2 (x_s - x_a)
                grad = -2.0 * r
            out[plant] = GradientMessage(
                round=self.round,
                plant=plant,
                version=self.version,
                start=start,
                grad=grad,
                grad_prev=grad_prev,
                noise_sigma=sigma,
                clip=clip,
                server_loss=loss,
                privacy_mu2=self.gradient_mu2,
            )
        if self.settings.estimator == "gd" and self._fitted:
            self._gd_step(rows, residual, gap)
        self._pending.clear()
        self.round += 1
        return out

    def _private_penalty_gradient(self, rows: slice, m: int, gap: FloatArray, sigma: float) -> FloatArray:
        """The penalty's gradient released together with the state gradient as one Gaussian mechanism.

        Its other-plant part is ``-2 xi Â_mm' z`` (z = the cross-state push); z is clipped to G/2 per
        sample, so it moves by at most ``2 xi ||Â_mm|| G`` when another plant's record changes, as much
        as ``-2 d`` does scaled by ``xi ||Â_mm||``. Scaled to the same sensitivity 2G the pair is one
        release of two vectors (``sigma = sigma(2)``, the accountant's mu unchanged); scaled back, this
        gradient carries noise of standard deviation ``xi ||Â_mm||_2 sigma``.
        """
        cols = self._slice(m)
        own_block = self._A[cols, cols]
        z = (self._xhat_prev[rows] @ self._cross_transition().T)[:, cols]
        z_clipped, n_clipped = clip_rows(z, self._mechanism.clip / 2.0)
        self.clipped += n_clipped
        correction = gap + z  # Â_mm (x̂_a - x̂_c)(t-1): the receiving plant's own (noised) states
        scale = self.xi * float(np.linalg.norm(own_block, 2))
        noise = scale * sigma * self._rng.standard_normal(gap.shape)
        return np.asarray(2.0 * self.xi * (correction - z_clipped) @ own_block + noise)

    @property
    def loss(self) -> float:
        """Server loss of the last round: sum over plants of the mean l_t (with the penalty when it is on)."""
        return float(sum(self.losses.values()))

    @property
    def penalty(self) -> float:
        """Disentanglement penalty D of the last round, summed over plants (before the weight xi; 0 when off)."""
        return float(sum(self.penalties.values()))

    def _cross_transition(self) -> FloatArray:
        """Off-diagonal blocks of A as used by the penalty (the published protocol's, or the closed-form fit's)."""
        if self.settings.estimator == "gd":
            return self._A_cross
        return np.asarray(self._A * (1.0 - self._own_mask()))

    def _penalty_gap(self, rows: slice) -> FloatArray | None:
        """Per plant, ``Â_mm (x̂_a - x̂_c)(t-1) - sum_{n != m} Â_mn x̂_c,n(t-1)`` (W, S); None when the penalty is off."""
        if self.xi <= 0.0 or not self._fitted:
            return None
        X_prev = self._xhat_prev[rows]
        correction = self._xhat_a_prev[rows] - X_prev
        own = self._A * self._own_mask()
        # gap = Â_own (x̂_a - x̂_c) - Â_cross x̂_c
        return np.asarray(correction @ own.T - X_prev @ self._cross_transition().T)

    # -- estimation ----------------------------------------------------------------------------
    def _fit(self) -> None:
        rows = slice(self.first_row, self.n_samples)
        s = self.settings
        S, n_in = self.state_dim, self.input_dim
        Z = self._x_meas[rows]
        U = self._u[rows]
        if n_in:
            target, regressors, instruments = lagged_design_with_inputs(Z, U, s.instruments, s.input_instruments)
        else:
            target, regressors, instruments = lagged_design(Z, s.instruments)
        iv = instrumental_variables(target, regressors, instruments, s.hac_lags)
        A_iv, B_iv = iv.coef[:, :S], iv.coef[:, S:]
        self._A_stderr, self._B_in_stderr = iv.stderr[:, :S], iv.stderr[:, S:]
        X_prev = self._xhat_prev[rows]
        miss = self._x_meas[rows] - self._x_c[rows]
        if self._rff is not None:
            self._rff.fit(X_prev, miss)
            if n_in:
                # inputs enter additively and linearly: ridge of what the state features leave on u(t-1)
                left = miss.copy()
                for m in range(len(self.plants)):
                    left[:, self._slice(m)] -= self._rff.predict(X_prev, m)
                self._L, self._intercept = ridge_regression(left, U, s.server_ridge)
        else:
            coef, self._intercept = ridge_regression(miss, np.hstack([X_prev, U]), s.server_ridge)
            self._K, self._L = coef[:, :S], coef[:, S:]
        if s.estimator == "ols":
            ols = ordinary_least_squares(X_prev[1:], np.hstack([X_prev[:-1], U[:-1]]), s.hac_lags)
            self._A, self._B_in = ols.coef[:, :S], ols.coef[:, S:]
            self._A_stderr, self._B_in_stderr = ols.stderr[:, :S], ols.stderr[:, S:]
        elif s.estimator == "gd":
            # the published protocol starts from no cross effects; the diagonal blocks are the IV view
            self._A = A_iv * self._own_mask()
            self._B_in = B_iv * self._own_input_mask()
            self._server_lr = self._check_server_step()
        else:
            self._A, self._B_in = A_iv, B_iv
        self._A_cross = self._A * (1.0 - self._own_mask())
        self._B_cross = self._B_in * (1.0 - self._own_input_mask())
        self._fitted = True
        self.version += 1

    def _own_mask(self) -> FloatArray:
        mask = np.zeros((self.state_dim, self.state_dim))
        for m in range(len(self.plants)):
            mask[self._slice(m), self._slice(m)] = 1.0
        return mask

    def _own_input_mask(self) -> FloatArray:
        mask = np.zeros((self.state_dim, self.input_dim))
        for m in range(len(self.plants)):
            mask[self._slice(m), self._uslice(m)] = 1.0
        return mask

    def _predict(self, rows: slice) -> FloatArray:
        """x_s(t) for the rows, all plants side by side (T, S)."""
        X_prev = self._xhat_prev[rows]
        U = self._u[rows]
        x_s = self._x_c[rows].copy()
        if not self._fitted:
            return x_s
        if self.settings.estimator == "gd":
            # published protocol: x_s = x_c + A_cross x̂_c(t-1) + B_cross u(t-1)
            return np.asarray(x_s + X_prev @ self._A_cross.T + U @ self._B_cross.T)
        if self._rff is not None:
            # x_s = x_c + c + sum_n W_mn phi_n(x̂_n(t-1)) + L u(t-1)
            for m in range(len(self.plants)):
                x_s[:, self._slice(m)] += self._rff.predict(X_prev, m)
            if self.input_dim:
                x_s += U @ self._L.T + self._intercept
            return x_s
        # x_s = x_c + c + K x̂_c(t-1) + L u(t-1)
        return np.asarray(x_s + X_prev @ self._K.T + U @ self._L.T + self._intercept)

    def _regressor_blocks(self, m: int) -> tuple[FloatArray, FloatArray]:
        """Other plants' states x̂_-m(t-1) and inputs u_-m(t-1) over the training rows (what A_m·, B_m· multiply)."""
        X = self._xhat_prev[self.first_row :]
        U = self._u[self.first_row :]
        others = np.delete(X, np.arange(self._offsets[m], self._offsets[m + 1]), axis=1)
        others_u = np.delete(U, np.arange(self._u_offsets[m], self._u_offsets[m + 1]), axis=1)
        return others, others_u

    def curvature(self) -> float:
        """Largest eigenvalue of the Hessian of the server loss in the off-diagonal blocks of A and B.

        Per row block m, with x = x̂_-m(t-1) and u = u_-m(t-1) (other plants' states and inputs),
        ``d^2 L_s / d[A_m., B_m.]^2 = (2/T) sum_t [[(1 + xi) x x', x u'], [u x', u u']]``.
        """
        if self._curvature is None:
            largest = 0.0
            xi = self.xi
            for m in range(len(self.plants)):
                others, others_u = self._regressor_blocks(m)
                if not others.shape[1] and not others_u.shape[1]:
                    continue
                T = len(others)
                hessian = (2.0 / T) * np.block(
                    [
                        [(1.0 + xi) * others.T @ others, others.T @ others_u],
                        [others_u.T @ others, others_u.T @ others_u],
                    ]
                )
                largest = max(largest, float(np.linalg.eigvalsh(hessian)[-1]))
            self._curvature = largest
        return self._curvature

    def _check_server_step(self) -> float:
        """The server's share of the joint convergence condition (see :mod:`fedrca.training.client`).

        The joint iteration (clients and server) is gradient descent on one quadratic with block
        steps D; it converges iff the spectral radius of I - D H is < 1, which holds when the
        largest eigenvalue of D H is < 2. That eigenvalue is at most the sum of the largest
        eigenvalues of the diagonal blocks, so each side keeps its own below 1.
        """
        lam = self.curvature()
        if lam <= 0.0:
            return self._server_lr or 0.0
        lr = self._server_lr if self._server_lr is not None else 0.5 / lam
        share = lr * lam
        if share >= 1.0:
            raise ConvergenceError(
                f"server: the joint iteration is not guaranteed to converge: server_lr x lambda_max(Hessian of "
                f"the server loss) = {lr:g} x {lam:.4g} = {share:.3g} >= 1 (the server's half of the condition "
                f"spectral radius(I - D H) < 1); set training.server_lr below {1.0 / lam:.4g} or leave it unset"
            )
        return lr

    def _cross_gradients(
        self, rows: slice, residual: FloatArray, gap: FloatArray | None
    ) -> tuple[FloatArray, FloatArray]:
        """(dL_s/dA, dL_s/dB) over the rows (off-diagonal blocks only).

        ``dL_s/dA_mn = (2/W) sum_t [(x_s,m - x_a,m) - xi gap_m] x̂_n(t-1)'``, ``dL_s/dB_mn = (2/W) sum_t
        (x_s,m - x_a,m) u_n(t-1)'``.
        """
        X_prev, U = self._xhat_prev[rows], self._u[rows]
        W = len(X_prev)
        state_part = residual if gap is None else residual - self.xi * gap
        grad_A = 2.0 * state_part.T @ X_prev / W * (1.0 - self._own_mask())
        grad_B = 2.0 * residual.T @ U / W * (1.0 - self._own_input_mask())
        return grad_A, grad_B

    def _gd_step(self, rows: slice, residual: FloatArray, gap: FloatArray | None) -> None:
        """One gradient step of the off-diagonal blocks of A and B (see :meth:`_cross_gradients`)."""
        lr = self._server_lr if self._server_lr is not None else self._check_server_step()
        grad_A, grad_B = self._cross_gradients(rows, residual, gap)
        self._A_cross -= lr * grad_A
        self._B_cross -= lr * grad_B
        self._A = self._A * self._own_mask() + self._A_cross
        self._B_in = self._B_in * self._own_input_mask() + self._B_cross
        self.version += 1

    def server_loss_gradient(self, rows: slice) -> FloatArray:
        """dL_s/dA (S, S) of the mean server loss over ``rows`` at the current A (off-diagonal blocks)."""
        return self.server_loss_gradients(rows)[0]

    def server_loss_gradients(self, rows: slice) -> tuple[FloatArray, FloatArray]:
        """(dL_s/dA, dL_s/dB) of the mean server loss over ``rows`` at the current A, B (off-diagonal blocks)."""
        residual = self._predict(rows) - self._x_a[rows]
        return self._cross_gradients(rows, residual, self._penalty_gap(rows))

    def server_loss_at(self, rows: slice) -> float:
        """Mean over rows of sum_m l_t with the current parameters."""
        residual = self._predict(rows) - self._x_a[rows]
        loss = float(np.mean(np.sum(residual**2, axis=1)))
        gap = self._penalty_gap(rows)
        if gap is not None:
            loss += self.xi * float(np.mean(np.sum(gap**2, axis=1)))
        return loss

    def set_cross(self, A_cross: FloatArray, B_cross: FloatArray | None = None) -> None:
        """Set the off-diagonal blocks (tests and the published protocol's initialisation)."""
        self._A_cross = np.asarray(A_cross, dtype=np.float64) * (1.0 - self._own_mask())
        self._A = self._A * self._own_mask() + self._A_cross
        if B_cross is not None:
            self._B_cross = np.asarray(B_cross, dtype=np.float64) * (1.0 - self._own_input_mask())
            self._B_in = self._B_in * self._own_input_mask() + self._B_cross

    # -- estimator 'moments' (fedrca.training.moments) ----------------------------------------
    def fit_moments(
        self, releases: dict[str, ReleaseMessage], moments: dict[str, MomentsMessage], bound_factor: float = 0.5
    ) -> dict[str, GradientMessage]:
        """Â from every plant's released moments; returns each plant's target ``grad = -2 d_m``.

        ``d_m(t) = sum_{n != m} Â_mn ẑ_n(t-1) / kappa_n`` uses the released states only, so the
        targets are post-processing (``privacy_mu2 = 0``) and may be reused for any number of rounds.
        """
        missing = [p for p in self.plants if p not in releases or p not in moments]
        if missing:
            raise MessageError(R.MISSING_STATES, f"no released states or moments yet from {', '.join(missing)}")
        dims = dict(zip(self.plants, self.state_dims, strict=True))
        scales = {p: releases[p].noise_scale for p in self.plants}
        bounds = {p: (releases[p].clip or 0.0) + bound_factor * np.sqrt(2.0 * dims[p]) * scales[p] for p in self.plants}
        kappa = {p: attenuation(scales[p], bounds[p], dims[p]) for p in self.plants}
        noise_var = {p: released_noise(scales[p], bounds[p], dims[p]) for p in self.plants}
        lags = {m.lags for m in moments.values()}
        if len(lags) != 1:
            raise MessageError(R.MISMATCH, f"plants released moments of different lags {sorted(lags)}")
        L = lags.pop()
        unpacked = {
            p: unpack_moments(p, m.moments, m.others, dims, L, m.n_rows, m.noise_sigma) for p, m in moments.items()
        }
        estimate = estimate_transition(
            self.plants, list(self.state_dims), unpacked, kappa, L, noise_var, seed=self.seed
        )
        self._A, self._A_stderr = estimate.A, estimate.stderr
        self._A_cross = self._A * (1.0 - self._own_mask())
        self._fitted = True
        self.version += 1
        released = {p: r.x_meas for p, r in releases.items()}
        start = next(iter(releases.values())).start
        out = {}
        for plant in self.plants:
            d = cross_prediction(plant, self.plants, list(self.state_dims), self._A, released, kappa, bounds)
            self.losses[plant] = float(np.mean(np.sum(d**2, axis=1)))
            # l_t = ||x_c + d - x_a||^2: the server's part of the gradient is -2 d (the plant adds the rest)
            out[plant] = GradientMessage(
                round=self.round, plant=plant, version=self.version, start=start, grad=-2.0 * d, privacy_mu2=0.0
            )
        self.round += 1
        return out

    # -- artifacts and checkpoints ----------------------------------------------------------
    def artifact_arrays(self) -> dict[str, np.ndarray]:
        """Arrays of the server artifact: A, A_stderr, state_dims (+ B, B_stderr, input_dims; + the random features).

        ``B`` is written whenever at least one plant has inputs (its columns are the plants'
        inputs in block order, ``input_dims`` per plant), except for estimator ``moments``, whose
        rows of A and B the plants learn privately (``whatif.row_*`` of their artifacts).
        """
        arrays: dict[str, np.ndarray] = {
            "A": self._A.copy(),
            "A_stderr": self._A_stderr.copy(),
            "state_dims": np.asarray(self.state_dims, dtype=np.int64),
        }
        if self.input_dim:
            if self.settings.estimator != "moments":
                # estimator 'moments': B is learned row by row in the plants (fedrca.training.varx), not here
                arrays["B"] = self._B_in.copy()
                arrays["B_stderr"] = self._B_in_stderr.copy()
            arrays["input_dims"] = np.asarray(self.input_dims, dtype=np.int64)
        if self._rff is not None and self._rff.fitted:
            arrays.update(self._rff.get_state())
            arrays["rff.block_norms"] = self._rff.block_norms()
        return arrays

    def get_state(self) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
        """(arrays, JSON meta) of everything needed to resume after a completed round."""
        arrays = {
            "xhat_prev": self._xhat_prev,
            "x_c": self._x_c,
            "x_meas": self._x_meas,
            "x_a": self._x_a,
            "xhat_a_prev": self._xhat_a_prev,
            "u": self._u,
            "received": self._received,
            "A": self._A,
            "A_stderr": self._A_stderr,
            "A_cross": self._A_cross,
            "B_in": self._B_in,
            "B_in_stderr": self._B_in_stderr,
            "B_cross": self._B_cross,
            "intercept": self._intercept,
            "K": self._K,
            "L": self._L,
        }
        if self._rff is not None:
            arrays.update(self._rff.get_state())
        meta = {
            "round": self.round,
            "version": self.version,
            "fitted": self._fitted,
            "server_lr": self._server_lr,
            "rng": self._rng.bit_generator.state,
            "losses": self.losses,
            "penalties": self.penalties,
            "clipped": self.clipped,
        }
        return {k: np.asarray(v).copy() for k, v in arrays.items()}, meta

    def set_state(self, arrays: dict[str, np.ndarray], meta: dict[str, Any]) -> None:
        """Restore :meth:`get_state` output."""
        if self._pending:
            raise ModelError("cannot restore the server in the middle of a round")

        def arr(name: str) -> FloatArray:
            return np.asarray(arrays[name], dtype=np.float64).copy()

        self._xhat_prev, self._x_c, self._x_meas, self._x_a = (arr(k) for k in ("xhat_prev", "x_c", "x_meas", "x_a"))
        self._xhat_a_prev, self._u = arr("xhat_a_prev"), arr("u")
        self._received = np.asarray(arrays["received"], dtype=bool).copy()
        self._A, self._A_stderr, self._A_cross = arr("A"), arr("A_stderr"), arr("A_cross")
        self._B_in, self._B_in_stderr, self._B_cross = arr("B_in"), arr("B_in_stderr"), arr("B_cross")
        self._intercept, self._K, self._L = arr("intercept"), arr("K"), arr("L")
        if self._rff is not None:
            self._rff.set_state({k: v for k, v in arrays.items() if k.startswith("rff.")})
        self.round = int(meta["round"])
        self.version = int(meta["version"])
        self._fitted = bool(meta["fitted"])
        lr = meta["server_lr"]
        self._server_lr = None if lr is None else float(lr)
        self._rng.bit_generator.state = meta["rng"]
        self.losses = {k: float(v) for k, v in meta["losses"].items()}
        self.penalties = {k: float(v) for k, v in meta.get("penalties", {}).items()}
        self.clipped = int(meta["clipped"])
