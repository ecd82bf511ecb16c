"""The training server: learns how plants drive each other from their (noised) states.

Per round the server receives one :class:`StatesMessage` per plant (same window),
predicts every plant's state from all plants' states,

    x_s,m(t) = x_c,m(t) + c_m + sum_n B_mn x̂_c,n(t-1)             (linear server)
    x_s,m(t) = x_c,m(t) + c_m + sum_n W_mn phi_n(x̂_c,n(t-1))     (random-feature server)

and answers each plant with the per-sample gradient ``d l_t / d x_a,m(t) = -2 (x_s,m(t)
- x_a,m(t))`` of its server loss ``l_t = ||x_s,m(t) - x_a,m(t)||^2`` (clipped and
noised when gradient privacy is on). x_c,m(t) is the plant's own proprietary
prediction, so the server needs no plant's proprietary model.

The server keeps two views of the same states. The *predictor* (B or W, fitted in
closed form by ridge regression of what the proprietary prediction misses,
``x̃_m(t) - x_c,m(t)``, on all plants' estimates ``x̂_c(t-1)``) minimises
``sum_m ||x_s,m - x̃_m||^2``: it is the best target for the clients, whose
reconstruction loss is ``||x̃ - x_a||^2`` up to a constant. The *Granger structure*
A (block transition over the states, with standard errors; the server artifact)
must instead be unbiased, which a predictor on filter estimates is not.

How A is learned (``estimator``):

* ``"iv"`` (default): closed form, once every window's fixed states have arrived, by
  instrumental variables on the measurement states (:mod:`fedrca.training.linear`);
  consistent despite filter and DP noise.
* ``"ols"``: closed form, least squares of x̂_c(t) on x̂_c(t-1) (attenuated; for comparison).
* ``"gd"``: the published protocol, ``x_s,m = x_c,m + sum_{n != m} A_mn x̂_c,n(t-1)``
  with gradient steps on the off-diagonal blocks of ``sum_m ||x_s,m - x_a,m||^2``
  jointly with the clients' steps (a fixed point of the joint iteration, biased towards
  what the augmentations can represent).

The server never sees raw data, only what the messages carry.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numpy.typing import NDArray

from fedrca.config import TrainingSettings
from fedrca.contracts.deadletter import DeadLetterReason as R
from fedrca.exceptions import ConvergenceError, MessageError, ModelError
from fedrca.training.linear import (
    instrumental_variables,
    lagged_design,
    ordinary_least_squares,
    ridge_regression,
)
from fedrca.training.messages import GradientMessage, MomentsMessage, ReleaseMessage, StatesMessage
from fedrca.training.moments import (
    attenuation,
    cross_prediction,
    estimate_transition,
    released_noise,
    unpack_moments,
)
from fedrca.training.nonlinear import RandomFeatureCrossModel
from fedrca.training.privacy import GaussianMechanism, clip_rows

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
    settings : training settings (estimator, features, privacy, learning rate)
    features : "linear" or "rff" (the cross-plant model used for the gradients)
    seed : seeds the random features and the gradient noise
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
    ) -> None:
        if len(plants) != len(state_dims) or not plants:
            raise ModelError("the server needs one state dimension per plant")
        if features not in ("linear", "rff"):
            raise ModelError(f"server features must be 'linear' or 'rff', got {features!r}")
        self.plants = list(plants)
        self.state_dims = tuple(int(d) for d in state_dims)
        self.n_samples = int(n_samples)
        self.first_row = int(first_row)
        self.settings = settings
        self.features = features
        self.seed = seed
        self._offsets = np.cumsum((0, *self.state_dims))
        S = int(self._offsets[-1])
        T = self.n_samples
        self._xhat_prev = np.zeros((T, S))
        self._x_c = np.zeros((T, S))
        self._x_meas = np.zeros((T, S))
        self._x_a = np.zeros((T, S))
        self._received = np.zeros((T, len(plants)), dtype=bool)
        self._A = np.zeros((S, S))  # full block transition (diagonal blocks: the server's own-dynamics view)
        self._A_stderr = np.full((S, S), np.nan)
        self._A_cross = np.zeros((S, S))  # off-diagonal blocks (the published protocol's parameters)
        self._intercept = np.zeros(S)
        self._B = np.zeros((S, S))  # linear predictor of the miss x̃ - x_c from x̂_c(t-1)
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
        self.clipped = 0

    # -- properties ---------------------------------------------------------------------------
    @property
    def state_dim(self) -> int:
        """S = sum P_m."""
        return int(self._offsets[-1])

    @property
    def A(self) -> FloatArray:
        """Learned block transition (S, S); off-diagonal block (m, n) = A_mn, the effect of plant n on m."""
        return self._A.copy()

    @property
    def A_stderr(self) -> FloatArray:
        """Standard errors of A's entries (S, S) (from the instrumental-variables fit)."""
        return self._A_stderr.copy()

    @property
    def fitted(self) -> bool:
        """True once the closed-form fit has run (all fixed states received)."""
        return self._fitted

    def block(self, m: int, n: int) -> FloatArray:
        """Â_mn."""
        o = self._offsets
        return self._A[o[m] : o[m + 1], o[n] : o[n + 1]].copy()

    def _slice(self, m: int) -> slice:
        return slice(int(self._offsets[m]), int(self._offsets[m + 1]))

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
        P = self.state_dims[m]
        if message.x_a.shape[1] != P:
            raise MessageError(R.BAD_ARRAY, f"'{message.plant}' sent {message.x_a.shape[1]} states, expected {P}")
        if message.start < self.first_row or message.stop > self.n_samples:
            raise MessageError(R.BAD_WINDOW, f"window {message.start}..{message.stop} outside the training range")
        rows, cols = slice(message.start, message.stop), self._slice(m)
        self._x_a[rows, cols] = message.x_a
        if message.has_fixed_states:
            self._xhat_prev[rows, cols] = message.xhat_c_prev
            self._x_c[rows, cols] = message.x_c
            self._x_meas[rows, cols] = message.x_meas
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
        # the part of x_s that carries other plants' data: the predicted miss d = x_s - x_c
        miss = x_s - self._x_c[rows]
        out: dict[str, GradientMessage] = {}
        for m, plant in enumerate(self.plants):
            cols = self._slice(m)
            r = residual[:, cols]
            loss = float(np.mean(np.sum(r**2, axis=1)))
            self.losses[plant] = loss
            sigma = 0.0
            clip = None
            if self._mechanism.active:
                # Clip the data-dependent part to G/2 so that -2 d moves by at most 2G when another plant's
                # record changes, then g = -2 (d + x_c - x_a) + N(0, sigma^2), sigma = 2G / mu. The rest,
                # x_c - x_a, is the receiving plant's own (already noised) states.
                d, n_clipped = clip_rows(miss[:, cols], self._mechanism.clip / 2.0)
                self.clipped += n_clipped
                sigma, clip = self._mechanism.sigma(1), self._mechanism.clip
                own = self._x_c[rows, cols] - self._x_a[rows, cols]
                grad = -2.0 * (d + own) + sigma * self._rng.standard_normal(d.shape)
            else:
                # l_t = ||x_s - x_a||^2 ;  d l_t / d x_a = -2 (x_s - x_a)
                grad = -2.0 * r
            out[plant] = GradientMessage(
                round=self.round,
                plant=plant,
                version=self.version,
                start=start,
                grad=grad,
                noise_sigma=sigma,
                clip=clip,
                server_loss=loss,
                privacy_mu2=self.gradient_mu2,
            )
        if self.settings.estimator == "gd" and self._fitted:
            self._gd_step(rows, residual)
        self._pending.clear()
        self.round += 1
        return out

    @property
    def loss(self) -> float:
        """Server loss of the last round: sum over plants of the mean ||x_s,m - x_a,m||^2."""
        return float(sum(self.losses.values()))

    # -- estimation ----------------------------------------------------------------------------
    def _fit(self) -> None:
        rows = slice(self.first_row, self.n_samples)
        s = self.settings
        Z = self._x_meas[rows]
        target, regressors, instruments = lagged_design(Z, s.instruments)
        iv = instrumental_variables(target, regressors, instruments, s.hac_lags)
        self._A_stderr = iv.stderr
        X_prev = self._xhat_prev[rows]
        miss = self._x_meas[rows] - self._x_c[rows]
        if self._rff is not None:
            self._rff.fit(X_prev, miss)
        else:
            self._B, self._intercept = ridge_regression(miss, X_prev, s.server_ridge)
        if s.estimator == "ols":
            ols = ordinary_least_squares(X_prev[1:], X_prev[:-1], s.hac_lags)
            self._A, self._A_stderr = ols.coef, ols.stderr
        elif s.estimator == "gd":
            # the published protocol starts from no cross effects; the diagonal blocks are the IV view
            self._A = iv.coef * self._own_mask()
            self._server_lr = self._check_server_step()
        else:
            self._A = iv.coef
        self._A_cross = self._A * (1.0 - self._own_mask())
        self._fitted = True
        self.version += 1

    def _own_mask(self) -> FloatArray:
        mask = np.zeros((self.state_dim, self.state_dim))
        for m in range(len(self.plants)):
            mask[self._slice(m), self._slice(m)] = 1.0
        return mask

    def _predict(self, rows: slice) -> FloatArray:
        """x_s(t) for the rows, all plants side by side (T, S)."""
        X_prev = self._xhat_prev[rows]
        x_s = self._x_c[rows].copy()
        if not self._fitted:
            return x_s
        if self.settings.estimator == "gd":
            # published protocol: x_s = x_c + A_cross x̂_c(t-1)
            return x_s + X_prev @ self._A_cross.T
        if self._rff is not None:
            # x_s = x_c + c + sum_n W_mn phi_n(x̂_n(t-1))
            for m in range(len(self.plants)):
                x_s[:, self._slice(m)] += self._rff.predict(X_prev, m)
            return x_s
        # x_s = x_c + c + B x̂_c(t-1)
        return np.asarray(x_s + X_prev @ self._B.T + self._intercept)

    def curvature(self) -> float:
        """Largest eigenvalue of the Hessian of the server loss in the off-diagonal blocks of A.

        ``d^2 L_s / d A_mn^2 = (2/T) sum_t x̂_-m(t-1) x̂_-m(t-1)'`` per row block m (other plants' states).
        """
        if self._curvature is None:
            X = self._xhat_prev[self.first_row :]
            largest = 0.0
            for m in range(len(self.plants)):
                others = np.delete(X, np.arange(self._offsets[m], self._offsets[m + 1]), axis=1)
                if others.shape[1]:
                    gram = 2.0 * others.T @ others / len(others)
                    largest = max(largest, float(np.linalg.eigvalsh(gram)[-1]))
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

    def _gd_step(self, rows: slice, residual: FloatArray) -> None:
        """One gradient step of the off-diagonal blocks: dL_s/dA_mn = (2/W) sum_t (x_s,m - x_a,m) x̂_n(t-1)'."""
        lr = self._server_lr if self._server_lr is not None else self._check_server_step()
        X_prev = self._xhat_prev[rows]
        grad = 2.0 * residual.T @ X_prev / len(X_prev)
        self._A_cross -= lr * grad * (1.0 - self._own_mask())
        self._A = self._A * self._own_mask() + self._A_cross
        self.version += 1

    def server_loss_gradient(self, rows: slice) -> FloatArray:
        """dL_s/dA (S, S) of the mean server loss over ``rows`` at the current A (off-diagonal blocks)."""
        residual = self._predict(rows) - self._x_a[rows]
        return 2.0 * residual.T @ self._xhat_prev[rows] / len(residual) * (1.0 - self._own_mask())

    def server_loss_at(self, rows: slice) -> float:
        """Mean over rows of sum_m ||x_s,m - x_a,m||^2 with the current parameters."""
        residual = self._predict(rows) - self._x_a[rows]
        return float(np.mean(np.sum(residual**2, axis=1)))

    def set_cross(self, A_cross: FloatArray) -> None:
        """Set the off-diagonal blocks (tests and the published protocol's initialisation)."""
        self._A_cross = np.asarray(A_cross, dtype=np.float64) * (1.0 - self._own_mask())
        self._A = self._A * self._own_mask() + self._A_cross

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
        """Arrays of the server artifact: A, A_stderr, state_dims (+ the random-feature model)."""
        arrays: dict[str, np.ndarray] = {
            "A": self._A.copy(),
            "A_stderr": self._A_stderr.copy(),
            "state_dims": np.asarray(self.state_dims, dtype=np.int64),
        }
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
            "received": self._received,
            "A": self._A,
            "A_stderr": self._A_stderr,
            "A_cross": self._A_cross,
            "intercept": self._intercept,
            "B": self._B,
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
            "clipped": self.clipped,
        }
        return {k: np.asarray(v).copy() for k, v in arrays.items()}, meta

    def set_state(self, arrays: dict[str, np.ndarray], meta: dict[str, Any]) -> None:
        """Restore :meth:`get_state` output."""
        if self._pending:
            raise ModelError("cannot restore the server in the middle of a round")
        self._xhat_prev = np.asarray(arrays["xhat_prev"], dtype=np.float64).copy()
        self._x_c = np.asarray(arrays["x_c"], dtype=np.float64).copy()
        self._x_meas = np.asarray(arrays["x_meas"], dtype=np.float64).copy()
        self._x_a = np.asarray(arrays["x_a"], dtype=np.float64).copy()
        self._received = np.asarray(arrays["received"], dtype=bool).copy()
        self._A = np.asarray(arrays["A"], dtype=np.float64).copy()
        self._A_stderr = np.asarray(arrays["A_stderr"], dtype=np.float64).copy()
        self._A_cross = np.asarray(arrays["A_cross"], dtype=np.float64).copy()
        self._intercept = np.asarray(arrays["intercept"], dtype=np.float64).copy()
        self._B = np.asarray(arrays["B"], dtype=np.float64).copy()
        if self._rff is not None:
            self._rff.set_state({k: v for k, v in arrays.items() if k.startswith("rff.")})
        self.round = int(meta["round"])
        self.version = int(meta["version"])
        self._fitted = bool(meta["fitted"])
        lr = meta["server_lr"]
        self._server_lr = None if lr is None else float(lr)
        self._rng.bit_generator.state = meta["rng"]
        self.losses = {k: float(v) for k, v in meta["losses"].items()}
        self.clipped = int(meta["clipped"])
