"""The training client: one plant's side of the protocol.

A client holds its plant's fitted :class:`~fedrca.detectors.plant.PlantDetector`
(fixed proprietary filter, feature map) and its nominal data; both stay inside the
plant. It runs the proprietary filter once, then per round

1. computes the augmented prediction ``x_a(t) = f(x̂_c(t-1) + Theta psi(y(t-1)))`` for
   the round's window and sends it in a :class:`StatesMessage` (clipped and noised
   with the Gaussian mechanism when state privacy is on), together with the window's
   fixed states ``x̂_c(t-1)``, ``x_c(t)`` and ``x̃(t)`` the first time the window is sent;
2. receives the server's per-sample gradient ``g_t = d l_t / d x_a(t)`` and takes one
   preconditioned step on its objective

       J(Theta) = (1/W) sum_t ||y(t) - h(x_a(t))||^2 + lambda (1/W) sum_t l_t + (r/2) ||Theta||^2

   whose server part reaches Theta through the chain rule,
   ``dL_s/dTheta = sum_t J_f(t)' (g_t / W) psi(y(t-1))'``.

The preconditioner is the Kronecker-factored Gauss-Newton matrix ``S ⊗ M`` with
``S = mean psi psi'`` and ``M = 2 mean J_f' (H'H + lambda I) J_f``, computed once
from the plant's own data. For a linear proprietary model it is the exact Hessian,
so a step of ``client_lr`` contracts the distance to the optimum by ``|1 - client_lr|``
per round; :meth:`Client.iteration_spectrum` measures the spectral radius of the
client's iteration numerically (exact Hessian-vector products, power iteration) and
:meth:`Client.check_convergence` refuses learning rates whose iteration would diverge.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from fedrca.config import MIN_NOMINAL_SAMPLES, TrainingSettings
from fedrca.contracts.deadletter import DeadLetterReason as R
from fedrca.detectors.augment import Augmentation, batched_jacobian, transition_jacobians
from fedrca.detectors.plant import PlantDetector
from fedrca.detectors.plugin import LinearModel, ProprietaryFilter, filter_batch
from fedrca.exceptions import ConvergenceError, DataError, MessageError
from fedrca.training.messages import GradientMessage, StatesMessage
from fedrca.training.privacy import GaussianMechanism, PrivacyAccountant

__all__ = ["Client", "ClientData", "measurement_states", "prepare_client_data"]

FloatArray = NDArray[np.float64]


@dataclass(frozen=True)
class ClientData:
    """A plant's training arrays on its time axis t = 0..T-1 (rows before ``first_row`` are not trained on).

    Attributes
    ----------
    xhat_prev : (T, P) proprietary estimates x̂_c(t-1)
    x_c : (T, P) proprietary predictions x_c(t)
    x_meas : (T, P) measurement states x̃(t)
    yz_prev : (T, D) standardised measurements y(t-1) (the augmentation's input)
    y_model : (T, D) y(t) in the units ``model.measure`` returns
    u_prev : (T, U) inputs driving the transition into t, or None
    first_row : first trained time index
    """

    xhat_prev: FloatArray
    x_c: FloatArray
    x_meas: FloatArray
    yz_prev: FloatArray
    y_model: FloatArray
    u_prev: FloatArray | None
    first_row: int

    @property
    def n_samples(self) -> int:
        """T."""
        return len(self.x_c)

    def u(self, rows: slice) -> FloatArray | None:
        """Inputs of the rows, or None."""
        return None if self.u_prev is None else self.u_prev[rows]


def measurement_states(model: ProprietaryFilter, x_c: FloatArray, Y_model: FloatArray) -> FloatArray:
    """x̃(t) = x_c + (H'H)^-1 H'(y - h(x_c)): the state explaining y(t) alone (one Gauss-Newton step).

    For a linear model it is the least-squares state ``C^+ y(t)``, independent of the filter:
    its error is the measurement noise, white in time. The fit is unweighted, like the
    client's reconstruction loss ``||y - h(x_a)||^2``, so the server's targets and the
    client's objective agree on what "explaining y" means.

    Examples
    --------
    >>> from fedrca.detectors.kalman import LinearKalmanFilter
    >>> kf = LinearKalmanFilter(A=[[0.5]], C=[[1.0], [1.0]], Q=[[0.1]], R=np.eye(2))
    >>> measurement_states(kf, np.zeros((1, 1)), np.array([[1.0, 3.0]])).round(6).tolist()
    [[2.0]]
    """
    residual = Y_model - model.measure(x_c)
    if isinstance(model, LinearModel):
        C = np.asarray(model.C)
        info = C.T @ C
        info += 1e-9 * np.trace(info) / len(info) * np.eye(len(info))
        # x̃ = x_c + (C'C)^-1 C' r
        return np.asarray(x_c + np.linalg.solve(info, C.T @ residual.T).T)
    H = batched_jacobian(model.measure, x_c)  # (T, D, P)
    info = np.einsum("tdp,tdq->tpq", H, H)
    info += 1e-9 * np.eye(info.shape[1])[None] * np.trace(info, axis1=1, axis2=2)[:, None, None] / info.shape[1]
    # x̃ = x_c + (H'H)^-1 H' r, per sample
    return np.asarray(x_c + np.linalg.solve(info, np.einsum("tdp,td->tp", H, residual)[..., None])[..., 0])


def prepare_client_data(
    detector: PlantDetector, Y: FloatArray, U: FloatArray | None = None, warm_up: int = 10
) -> ClientData:
    """Run the fixed proprietary filter over the plant's data once (same conventions as the detector).

    The detector is left reset.
    """
    Y = np.asarray(Y, dtype=np.float64)
    if Y.ndim != 2 or not np.all(np.isfinite(Y)):
        raise DataError(f"plant '{detector.name}': training data must be finite (T, D), got shape {Y.shape}")
    need = max(MIN_NOMINAL_SAMPLES, warm_up + 8)
    if len(Y) < need:
        raise DataError(f"plant '{detector.name}': {len(Y)} samples are too few to train on (need {need})")
    detector.reset()
    model = detector.proprietary
    Yz = detector.scaler.transform(Y)
    identified = detector.identified_model
    Ym = Yz if identified is not None else Y
    U_prev = None
    if U is not None:
        U_arr = np.asarray(U, dtype=np.float64).reshape(len(Y), -1)
        u_scaler = None if identified is None else identified.u_scaler
        Uz = U_arr if u_scaler is None else u_scaler.transform(U_arr)
        U_prev = np.vstack([np.zeros((1, Uz.shape[1])), Uz[:-1]])
    x0 = np.asarray(model.get_state()["x"], dtype=np.float64).reshape(model.state_dim)
    out = filter_batch(model, Ym, U_prev)
    detector.reset()
    xhat_prev = np.vstack([x0[None, :], out.x_est[:-1]])
    yz_prev = np.vstack([np.zeros((1, Y.shape[1])), Yz[:-1]])
    x_meas = measurement_states(model, out.x_pred, Ym)
    return ClientData(
        xhat_prev=xhat_prev,
        x_c=np.asarray(out.x_pred),
        x_meas=x_meas,
        yz_prev=yz_prev,
        y_model=Ym,
        u_prev=U_prev,
        first_row=max(1, warm_up),
    )


class _Preconditioner:
    """Kronecker-factored Gauss-Newton matrix ``S ⊗ M + r I``, applied as a Sylvester-type solve."""

    def __init__(self, M: FloatArray, S: FloatArray, ridge: float) -> None:
        self.M = 0.5 * (M + M.T)
        self.S = 0.5 * (S + S.T)
        P, F = len(M), len(S)
        # r = ridge x the mean curvature of S ⊗ M, so ridge is scale free
        self.r = ridge * max(np.trace(self.M) / P, 1e-12) * max(np.trace(self.S) / F, 1e-12)
        self.r = max(self.r, 1e-12)
        self._a, self._U = np.linalg.eigh(self.M)
        self._s, self._V = np.linalg.eigh(self.S)
        self._denom = np.maximum(self._a, 0.0)[:, None] * np.maximum(self._s, 0.0)[None, :] + self.r

    def solve(self, G: FloatArray) -> FloatArray:
        """Delta with M Delta S + r Delta = G."""
        return np.asarray(self._U @ ((self._U.T @ G @ self._V) / self._denom) @ self._V.T)


class Client:
    """One plant's training client.

    Parameters
    ----------
    detector : the plant's fitted detector (its filter and feature map are used, never changed)
    Y : (T, D) the plant's nominal data (raw units), on the site's common time axis
    U : (T, U) inputs, optional
    settings : training settings
    n_plants : plants taking part (for the privacy cost of the server's gradients)
    seed : seeds the state noise
    """

    def __init__(
        self,
        detector: PlantDetector,
        Y: FloatArray,
        U: FloatArray | None = None,
        *,
        settings: TrainingSettings,
        n_plants: int = 1,
        seed: int = 0,
    ) -> None:
        self.plant = detector.name
        self.settings = settings
        self.n_plants = n_plants
        self._model = detector.proprietary
        base = detector.augmentation
        self._aug = Augmentation(base.feature_map, base.state_dim)
        self.data = prepare_client_data(detector, Y, U, settings.warm_up)
        T = self.data.n_samples
        self._window = settings.window or (T - self.data.first_row)
        self._n_windows = math.ceil((T - self.data.first_row) / self._window)
        self._rng = np.random.default_rng(seed)
        p = settings.privacy
        self._mechanism = GaussianMechanism(p.state_epsilon, p.delta, p.state_clip)
        self._gradient_mu = GaussianMechanism(p.gradient_epsilon, p.delta, p.gradient_clip).mu
        self.accountant = PrivacyAccountant(T, p.delta, p.budget, plant=self.plant)
        self._sent_fixed = np.zeros(T, dtype=bool)
        self._x_c_error = np.zeros((T, base.state_dim))  # what the server's copy of x_c(t) has on top of the truth
        self._pending: tuple[int, int, int, FloatArray, FloatArray] | None = None
        self.version = 0
        self.clipped = 0
        self.history: list[dict[str, float]] = []
        self._jacobians: tuple[FloatArray, FloatArray] | None = None
        self._Psi_train = np.empty((0, 0))
        self._precond = self._build_preconditioner()
        rows = self.train_rows
        self.initial_loss = self.reconstruction_loss(rows)
        self.initial_server_distance: float | None = None

    # -- accessors ------------------------------------------------------------------------------
    @property
    def theta(self) -> FloatArray:
        """Current Theta (P, F)."""
        return self._aug.theta.copy()

    @theta.setter
    def theta(self, value: FloatArray) -> None:
        self._aug.theta = value

    @property
    def state_dim(self) -> int:
        """P."""
        return int(self._aug.state_dim)

    @property
    def train_rows(self) -> slice:
        """The trained time indices."""
        return slice(self.data.first_row, self.data.n_samples)

    def window(self, round_: int) -> slice:
        """The time indices of round ``round_``'s window (windows cycle over the data)."""
        k = round_ % self._n_windows
        start = self.data.first_row + k * self._window
        return slice(start, min(start + self._window, self.data.n_samples))

    @property
    def gradient_mu2(self) -> float:
        """mu^2 the server's gradients of one round charge to this plant's records."""
        return 0.0 if math.isinf(self._gradient_mu) else (self.n_plants - 1) * self._gradient_mu**2

    def round_mu2(self, round_: int) -> float:
        """Total mu^2 one record of round ``round_``'s window is charged (states + gradients)."""
        if not self._mechanism.active:
            return self.gradient_mu2
        return self._mechanism.mu**2 + self.gradient_mu2

    # -- losses -----------------------------------------------------------------------------------
    def augmented(self, rows: slice, theta: FloatArray | None = None) -> tuple[FloatArray, FloatArray]:
        """(x̂_a(t-1), x_a(t)) for the rows with the current (or given) Theta."""
        d = self.data
        if theta is not None:
            aug = Augmentation(self._aug.feature_map, self._aug.state_dim, theta)
            return aug.augment(self._model, d.xhat_prev[rows], d.yz_prev[rows], d.u(rows))
        return self._aug.augment(self._model, d.xhat_prev[rows], d.yz_prev[rows], d.u(rows))

    def reconstruction_loss(self, rows: slice | None = None, theta: FloatArray | None = None) -> float:
        """Mean ||y(t) - h(x_a(t))||^2 over the rows (model units); Theta = 0 gives the proprietary loss."""
        rows = self.train_rows if rows is None else rows
        _, x_a = self.augmented(rows, theta)
        residual = self.data.y_model[rows] - self._model.measure(x_a)
        return float(np.mean(np.sum(residual**2, axis=1)))

    def objective(self, rows: slice, x_s: FloatArray, theta: FloatArray | None = None) -> float:
        """J(Theta) = reconstruction + lambda mean ||x_s - x_a||^2 + (r/2) ||Theta||^2 (for tests and diagnostics)."""
        theta = self.theta if theta is None else theta
        _, x_a = self.augmented(rows, theta)
        residual = self.data.y_model[rows] - self._model.measure(x_a)
        recon = float(np.mean(np.sum(residual**2, axis=1)))
        server = float(np.mean(np.sum((x_s - x_a) ** 2, axis=1)))
        return recon + self.settings.server_weight * server + 0.5 * self._precond.r * float(np.sum(theta**2))

    # -- protocol ---------------------------------------------------------------------------------
    def states_message(self, round_: int) -> StatesMessage:
        """This round's states (clipped and noised when state privacy is on); charges the accountant.

        Raises
        ------
        PrivacyBudgetExceeded
            When this round would take the plant past its privacy budget.
        """
        if self._pending is not None:
            raise MessageError(R.OUT_OF_ORDER, f"plant '{self.plant}': round {self._pending[0]} still awaits gradients")
        rows = self.window(round_)
        xhat_a_prev, x_a = self.augmented(rows)
        send_fixed = not self._sent_fixed[rows].all()
        arrays = [x_a]
        if send_fixed:
            d = self.data
            arrays += [d.xhat_prev[rows], d.x_c[rows], d.x_meas[rows]]
        mu2 = self._mechanism.mu**2 if self._mechanism.active else 0.0
        # refuse before anything leaves the plant: this round's states and the gradients that follow
        self.accountant.check(mu2 + self.gradient_mu2, rows)
        noised, clipped = self._mechanism.release(arrays, self._rng)
        self.clipped += clipped
        self.accountant.charge(mu2, rows, "states")
        if send_fixed:
            self._x_c_error[rows] = noised[2] - arrays[2]
        self._sent_fixed[rows] = True
        # what the server will see minus the truth (clipping + noise), to take out of its gradient
        self._pending = (round_, rows.start, rows.stop, xhat_a_prev, noised[0] - x_a)
        return StatesMessage(
            round=round_,
            plant=self.plant,
            version=self.version,
            start=rows.start,
            x_a=noised[0],
            xhat_c_prev=noised[1] if send_fixed else None,
            x_c=noised[2] if send_fixed else None,
            x_meas=noised[3] if send_fixed else None,
            noise_sigma=self._mechanism.sigma(len(arrays)),
            clip=self._mechanism.clip if self._mechanism.active else None,
        )

    def gradient(self, message: GradientMessage) -> tuple[float, FloatArray]:
        """(reconstruction loss, dJ/dTheta) at the current Theta for the server's gradient message."""
        loss, total, _ = self._gradient(message)
        return loss, total

    def _gradient(self, message: GradientMessage) -> tuple[float, FloatArray, slice]:
        if self._pending is None:
            raise MessageError(R.OUT_OF_ORDER, f"plant '{self.plant}': gradients without a pending states message")
        round_, start, stop, xhat_a_prev, perturbation = self._pending
        if message.plant != self.plant or message.round != round_ or message.start != start or message.stop != stop:
            raise MessageError(
                R.MISMATCH,
                f"plant '{self.plant}' awaits round {round_} window {start}..{stop}, got "
                f"'{message.plant}' round {message.round} window {message.start}..{message.stop}",
            )
        if message.grad.shape[1] != self.state_dim:
            raise MessageError(R.BAD_ARRAY, f"gradient has {message.grad.shape[1]} columns, expected {self.state_dim}")
        rows = slice(start, stop)
        d = self.data
        loss, grad_c, _ = self._aug.local_loss_gradient(
            self._model, d.xhat_prev[rows], d.yz_prev[rows], d.y_model[rows], d.u(rows)
        )
        # The server saw x_a + e_a and x_c + e_c (e: the clipping and noise this client added) and
        # sent g = -2 (x_c + e_c + pred - x_a - e_a); the client knows both e, so it takes them out:
        # g + 2 (e_c - e_a) = -2 (x_s - x_a). Post-processing of the client's own information:
        # no privacy cost; only the noise of the server's prediction from the states remains.
        grad = np.asarray(message.grad, dtype=np.float64) + 2.0 * (self._x_c_error[rows] - perturbation)
        # dL_s/dTheta = sum_t J_f' (g_t / W) psi_t'   (the window's server loss is the mean of l_t)
        upstream = grad / (stop - start)
        grad_s = self._aug.gradient(self._model, xhat_a_prev, d.yz_prev[rows], upstream, d.u(rows))
        total = grad_c + self.settings.server_weight * grad_s + self._precond.r * self._aug.theta
        return loss, total, rows

    def apply_gradient(self, message: GradientMessage) -> float:
        """Take one preconditioned step with the server's gradients; returns the reconstruction loss before it."""
        loss, total, rows = self._gradient(message)
        # Theta <- Theta - lr (S ⊗ M + r I)^-1 dJ/dTheta
        self._aug.theta = self._aug.theta - self.settings.client_lr * self._precond.solve(total)
        self.accountant.charge(message.privacy_mu2, rows, "gradients")
        self.version += 1
        self.history.append({"round": float(message.round), "loss": loss, "server_loss": message.server_loss})
        self._pending = None
        return loss

    # -- convergence -------------------------------------------------------------------------------
    def _build_preconditioner(self) -> _Preconditioner:
        d = self.data
        rows = self.train_rows
        Psi = self._aug.feature_map.transform(d.yz_prev[rows])
        S = Psi.T @ Psi / len(Psi)
        lam = self.settings.server_weight
        P = self.state_dim
        if isinstance(self._model, LinearModel):
            A, C = np.asarray(self._model.transition_matrix), np.asarray(self._model.C)
            # M = 2 A' (C'C + lambda I) A
            M = 2.0 * A.T @ (C.T @ C + lam * np.eye(P)) @ A
        else:
            J = transition_jacobians(self._model, d.xhat_prev[rows], d.u(rows))
            H = batched_jacobian(self._model.measure, d.x_c[rows])
            # per-sample J'(H'H + lambda I) J, averaged
            inner = np.einsum("tdp,tdq->tpq", H, H) + lam * np.eye(P)[None]
            per_sample = np.einsum("tkp,tkl,tlq->tpq", J, inner, J)
            self._jacobians = (np.asarray(J), per_sample)
            M = 2.0 * per_sample.mean(axis=0)
        self._Psi_train = Psi
        return _Preconditioner(M, S, self.settings.ridge)

    def _hessian_product(self, Delta: FloatArray) -> FloatArray:
        """Exact Gauss-Newton Hessian of J (full training window) applied to Delta (P, F)."""
        Psi = self._Psi_train
        if self._jacobians is None:
            pre = self._precond
            return np.asarray(pre.M @ Delta @ pre.S + pre.r * Delta)
        _, per_sample = self._jacobians
        V = Psi @ Delta.T  # (T, P): Delta psi_t
        # (2/T) sum_t [J'(H'H + lambda I)J]_t Delta psi_t psi_t'
        out = 2.0 * np.einsum("tpq,tq,tf->pf", per_sample, V, Psi) / len(Psi)
        return np.asarray(out + self._precond.r * Delta)

    def iteration_spectrum(self, lr: float | None = None, iterations: int = 60) -> tuple[float, float]:
        """(smallest, largest) eigenvalue of lr P^-1 H, by power iteration with exact Hessian products.

        ``P^-1 H`` is similar to a symmetric positive definite matrix, so its eigenvalues are real
        and positive; the client iteration ``Theta <- Theta - lr P^-1 grad`` contracts iff all of
        them lie in (0, 2), i.e. its spectral radius ``max |1 - lambda|`` is below 1.
        """
        lr = self.settings.client_lr if lr is None else lr
        rng = np.random.default_rng(12345)
        shape = self._aug.theta.shape

        def op(v: FloatArray) -> FloatArray:
            return lr * self._precond.solve(self._hessian_product(v))

        def power(shift: float) -> float:
            v = rng.standard_normal(shape)
            v /= np.linalg.norm(v)
            value = 0.0
            for _ in range(iterations):
                w = op(v) - shift * v
                value = float(np.sum(v * w))
                norm = np.linalg.norm(w)
                if norm == 0.0:
                    return shift
                v = w / norm
            return value + shift

        largest = power(0.0)
        smallest = power(largest)  # largest of (op - largest I) is the most negative one
        return min(smallest, largest), largest

    def check_convergence(self, shared: bool = False) -> float:
        """Spectral radius of the client's iteration; ConvergenceError when it would not contract.

        ``shared=True`` (server estimator 'gd') also requires the largest eigenvalue to stay below 1,
        the client's half of the joint condition lambda_max(D H) < 2.
        """
        lo, hi = self.iteration_spectrum()
        radius = max(abs(1.0 - lo), abs(1.0 - hi))
        lr = self.settings.client_lr
        if radius >= 1.0 or (shared and hi >= 1.0):
            limit = (1.0 if shared else 2.0) * lr / hi
            what = "lambda_max(lr P^-1 H)" if shared and radius < 1.0 else "spectral radius of I - lr P^-1 H"
            value = hi if shared and radius < 1.0 else radius
            raise ConvergenceError(
                f"plant '{self.plant}': the client iteration would not converge: {what} = {value:.3g} "
                f"with training.client_lr = {lr:g}; set training.client_lr below {limit:.3g}"
            )
        return radius

    # -- checkpoints --------------------------------------------------------------------------------
    def get_state(self) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
        """(arrays, JSON meta) to resume after a completed round."""
        if self._pending is not None:
            raise MessageError(R.OUT_OF_ORDER, "cannot checkpoint a client in the middle of a round")
        arrays = {
            "theta": self._aug.theta.copy(),
            "sent_fixed": self._sent_fixed.copy(),
            "x_c_error": self._x_c_error.copy(),
        }
        meta = {
            "version": self.version,
            "clipped": self.clipped,
            "rng": self._rng.bit_generator.state,
            "accountant": self.accountant.get_state(),
            "history": self.history,
        }
        return arrays, meta

    def set_state(self, arrays: dict[str, np.ndarray], meta: dict[str, Any]) -> None:
        """Restore :meth:`get_state` output."""
        self._aug.theta = np.asarray(arrays["theta"], dtype=np.float64)
        self._sent_fixed = np.asarray(arrays["sent_fixed"], dtype=bool).copy()
        self._x_c_error = np.asarray(arrays["x_c_error"], dtype=np.float64).copy()
        self.version = int(meta["version"])
        self.clipped = int(meta["clipped"])
        self._rng.bit_generator.state = meta["rng"]
        self.accountant.set_state(meta["accountant"])
        self.history = [dict(h) for h in meta["history"]]
        self._pending = None
