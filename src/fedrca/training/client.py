"""The training client: one plant's side of the protocol.

A client holds its plant's fitted :class:`~fedrca.detectors.plant.PlantDetector`
(fixed proprietary filter, feature map) and its nominal data; both stay inside the
plant. It runs the proprietary filter once, then per round

1. computes the augmented estimate and prediction for the round's window,

       x̂_a(t-1) = x̂_c(t-1) + Theta psi(y(t-1)),    x_a(t) = f(x̂_a(t-1), u(t-1)) + phi,

   and sends them in a :class:`StatesMessage` (clipped and noised with the Gaussian
   mechanism when state privacy is on), together with the window's fixed states
   ``x̂_c(t-1)``, ``x_c(t)``, ``x̃(t)`` (and the inputs ``u(t-1)`` of a plant that has
   inputs) the first time the window is sent; ``x̂_a(t-1)`` goes up every round when
   the disentanglement penalty is on;
2. receives the server's per-sample gradients ``g_t = d l_t / d x_a(t)`` (and, with the
   penalty, ``g'_t = d l_t / d x̂_a(t-1)``) and takes one preconditioned step on its objective

       J(Theta, phi) = (1/W) sum_t ||y(t) - h(x_a(t))||^2 + lambda (1/W) sum_t l_t + (r/2) ||Theta||^2

   whose server part reaches the parameters through the chain rule (P3, eqs. 7-8),
   ``dL_s/dTheta = sum_t (J_f(t)' g_t + g'_t) psi(y(t-1))' / W`` and
   ``dL_s/dphi = sum_t g_t / W``.

``phi`` (the *bias*, on by default: ``training.client_bias``) is a constant P-vector: it
carries what no function of the plant's own past measurements can, the average push of
the other plants' inputs ``sum_n B_mn u_n`` (P3, corollary 6.2); the disentanglement
penalty (weight ``training.disentanglement``, xi) keeps Theta to the other plants'
*states*.

The preconditioner is block diagonal: for Theta the Kronecker-factored Gauss-Newton
matrix ``S ⊗ M`` with ``S = mean psi psi'`` and ``M = 2 mean J_f' (H'H + lambda I) J_f
+ 2 lambda xi Ā'Ā`` (Ā = the plant's mean transition Jacobian, standing in for the
server's estimate of the same block), for phi ``2 mean (H'H + lambda I)``, both computed
once from the plant's own data. For a linear proprietary model without the bias and the
penalty it is the exact Hessian, so a step of ``client_lr`` contracts the distance to the
optimum by ``|1 - client_lr|`` per round; :meth:`Client.iteration_spectrum` measures the
spectrum of the joint (Theta, phi) iteration numerically (exact Hessian-vector products,
power iteration) and :meth:`Client.check_convergence` refuses learning rates whose
iteration would diverge.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import scipy.linalg
from numpy.typing import NDArray

from fedrca.config import MIN_NOMINAL_SAMPLES, TrainingSettings
from fedrca.contracts.deadletter import DeadLetterReason as R
from fedrca.detectors.augment import Augmentation, batched_jacobian, transition_jacobians
from fedrca.detectors.identify import Standardizer
from fedrca.detectors.plant import PlantDetector, hold_last
from fedrca.detectors.plugin import LinearModel, ProprietaryFilter, filter_batch
from fedrca.exceptions import ConvergenceError, DataError, MessageError, ModelError
from fedrca.privacy.accountant import PrivacyAccountant
from fedrca.privacy.accounting import gaussian_mu
from fedrca.privacy.ledger import PrivacyLedger
from fedrca.privacy.mechanisms import GaussianMechanism, laplace_scale, release_states
from fedrca.training.messages import (
    GradientMessage,
    MomentsMessage,
    OwnMomentsMessage,
    ReleaseMessage,
    StatesMessage,
    quantise,
)
from fedrca.training.moments import MomentSettings, pack_moments, plant_moments
from fedrca.training.varx import OwnMoments, RowEstimate, fit_row, own_moments, public_series

__all__ = ["Client", "ClientData", "Disentanglement", "input_standardizer", "measurement_states", "prepare_client_data"]

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


def input_standardizer(detector: PlantDetector, U: FloatArray | None) -> Standardizer | None:
    """The map of the plant's raw inputs to the learner's units, or None (raw units).

    An identified model works on standardised inputs (its own scaler); when its filter
    ignores the inputs (``model.use_inputs: false``) the learner standardises them on the
    same nominal data, so the server's B is in the same units either way. A plug-in model
    keeps the raw units it was written for.
    """
    identified = detector.identified_model
    if identified is None or U is None:
        return None
    if identified.u_scaler is not None:
        return identified.u_scaler
    return Standardizer.fit(np.asarray(U, dtype=np.float64).reshape(len(U), -1))


def prepare_client_data(
    detector: PlantDetector, Y: FloatArray, U: FloatArray | None = None, warm_up: int = 10
) -> ClientData:
    """Run the fixed proprietary filter over the plant's data once (same conventions as the detector).

    Missing values (NaN, docs/missing.md): the filter corrects on the observed sensors, and
    every training array that needs a value where one is missing (the augmentation's input
    y(t-1), the reconstruction target y(t), the measurement states) takes the filter's own
    estimate h(x̂_c(t)) there, as the detector's features do online; a missing input holds
    its last value. The detector is left reset.
    """
    Y = np.asarray(Y, dtype=np.float64)
    if Y.ndim != 2 or np.isinf(Y).any():
        raise DataError(f"plant '{detector.name}': training data must be finite or NaN (T, D), got shape {Y.shape}")
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
        u_scaler = input_standardizer(detector, U_arr)
        Uz = U_arr if u_scaler is None else u_scaler.transform(U_arr)
        if np.isnan(Uz).any():
            Uz = hold_last(Uz, np.zeros(Uz.shape[1]))
        U_prev = np.vstack([np.zeros((1, Uz.shape[1])), Uz[:-1]])
    x0 = np.asarray(model.get_state()["x"], dtype=np.float64).reshape(model.state_dim)
    out = filter_batch(model, Ym, U_prev)
    detector.reset()
    missing = np.isnan(Ym)
    if missing.any():
        # a missing value's stand-in: the filter's estimate h(x̂_c(t)) (from the observed sensors)
        estimate = model.measure(out.x_est)
        Ym = np.where(missing, estimate, Ym)
        Yz = np.where(missing, estimate if identified is not None else detector.scaler.transform(estimate), Yz)
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


@dataclass(frozen=True)
class Disentanglement:
    """The server's side of one plant's disentanglement penalty (for :meth:`Client.objective`).

    The penalty is ``xi (1/W) sum_t ||own_block (x̂_a - x̂_c)(t-1) - cross_states(t)||^2``.

    Attributes
    ----------
    own_block : (P, P) the server's estimate Â_mm of the plant's own transition block
    cross_states : (W, P) z(t) = sum_{n != m} Â_mn x̂_c,n(t-1), the other plants' state push
    xi : penalty weight
    """

    own_block: FloatArray
    cross_states: FloatArray
    xi: float


class _JointPreconditioner:
    """Gauss-Newton matrix of the joint (Theta, phi) step, dense: ``[[S ⊗ M + r I, mu ⊗ N], [mu' ⊗ N', M_phi]]``.

    ``mu = mean psi`` couples the two: with features of non-zero mean (random Fourier features)
    a constant part of ``Theta psi`` and phi push x_a the same way, and a block-diagonal step
    would let both correct the same error (a joint eigenvalue near 0 or 2). For a linear
    proprietary model this is the exact Hessian. Theta is flattened in C order, so
    ``vec(M Delta S) = (M ⊗ S) vec(Delta)``.
    """

    def __init__(self, theta_part: _Preconditioner, N: FloatArray, mu: FloatArray, M_phi: FloatArray) -> None:
        P, F = len(theta_part.M), len(theta_part.S)
        self.shape = (P, F)
        top_left = np.kron(theta_part.M, theta_part.S) + theta_part.r * np.eye(P * F)
        top_right = np.kron(N, np.asarray(mu).reshape(F, 1))
        full = np.block([[top_left, top_right], [top_right.T, M_phi]])
        self._factor = scipy.linalg.cho_factor(0.5 * (full + full.T))

    def solve(self, G_theta: FloatArray, G_phi: FloatArray) -> tuple[FloatArray, FloatArray]:
        """(Delta_Theta, Delta_phi) with P [Delta_Theta; Delta_phi] = [G_theta; G_phi]."""
        out = scipy.linalg.cho_solve(self._factor, np.concatenate([np.ravel(G_theta), G_phi]))
        n = self.shape[0] * self.shape[1]
        return out[:n].reshape(self.shape), out[n:]


#: Largest joint (Theta, phi) parameter count the client preconditions with the dense joint matrix;
#: above it the step is block diagonal (Theta's Kronecker factors, phi's own curvature).
JOINT_PRECONDITIONER_LIMIT = 2000


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
        self._offset = np.zeros(base.state_dim)
        self._bias = np.zeros(base.state_dim)
        self.data = prepare_client_data(detector, Y, U, settings.warm_up)
        # model units -> raw units (identified models work on standardised sensors and inputs)
        identified = detector.identified_model
        n_sensors = self.data.y_model.shape[1]
        self._y_scale = np.ones(n_sensors) if identified is None else np.asarray(detector.scaler.std, dtype=np.float64)
        u_scaler = input_standardizer(detector, U)
        self._u_scale = np.ones(self.input_dim) if u_scaler is None else np.asarray(u_scaler.std, dtype=np.float64)
        T = self.data.n_samples
        self._window = settings.window or (T - self.data.first_row)
        self._n_windows = math.ceil((T - self.data.first_row) / self._window)
        self._rng = np.random.default_rng(seed)
        p = settings.privacy
        self._mechanism = GaussianMechanism(p.state_epsilon, p.delta, p.state_clip)
        self._gradient_mu = GaussianMechanism(p.gradient_epsilon, p.delta, p.gradient_clip).mu
        self.accountant = PrivacyAccountant(T, p.delta, p.budget, plant=self.plant)
        # estimator 'moments': one pure release (states) and one Gaussian release (moments), composed
        self.ledger = PrivacyLedger(self.plant, p.delta, p.budget, budget_key="training.privacy.budget")
        self._released: FloatArray | None = None
        # the input releases draw from their own stream: the state and moment releases stay as without them
        self._input_rng = np.random.default_rng(np.random.SeedSequence([seed, 0x1D]))
        self._own_state_block: tuple[FloatArray, float] | None = None
        self.row: RowEstimate | None = None
        self._row_plants: list[str] = []
        self._sent_fixed = np.zeros(T, dtype=bool)
        self._x_c_error = np.zeros((T, base.state_dim))  # what the server's copy of x_c(t) has on top of the truth
        self._pending: tuple[int, int, int, FloatArray, FloatArray] | None = None
        self.version = 0
        self.clipped = 0
        self.history: list[dict[str, float]] = []
        self._jacobians: tuple[FloatArray, FloatArray, FloatArray] | None = None
        self._Psi_train = np.empty((0, 0))
        self._bias_curvature = np.eye(base.state_dim)
        self._joint: _JointPreconditioner | None = None
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
    def offset(self) -> FloatArray:
        """Current state offset theta_0 (P,): the constant part of the state correction."""
        return self._offset.copy()

    @offset.setter
    def offset(self, value: FloatArray) -> None:
        self._offset = self._vector("offset", value)

    @property
    def bias(self) -> FloatArray:
        """Current bias phi (P,): the plant's estimate of the other plants' average input push."""
        return self._bias.copy()

    @bias.setter
    def bias(self, value: FloatArray) -> None:
        self._bias = self._vector("bias", value)

    def _vector(self, name: str, value: FloatArray) -> FloatArray:
        value = np.asarray(value, dtype=np.float64)
        if value.shape != (self.state_dim,) or not np.all(np.isfinite(value)):
            raise ModelError(f"the {name} must be a finite vector of {self.state_dim} entries, got shape {value.shape}")
        return value.copy()

    @property
    def learns_bias(self) -> bool:
        """True when the client learns the offset theta_0 and the bias phi (``training.client_bias``)."""
        return bool(self.settings.client_bias)  # None (not resolved by the job) counts as off

    @property
    def xi(self) -> float:
        """Weight of the disentanglement penalty (0 = off)."""
        return float(self.settings.disentanglement)

    @property
    def state_dim(self) -> int:
        """P."""
        return int(self._aug.state_dim)

    @property
    def input_dim(self) -> int:
        """U (0 for a plant without inputs)."""
        return 0 if self.data.u_prev is None else int(self.data.u_prev.shape[1])

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

    # -- the state correction's parameters ---------------------------------------------------------
    # With the bias on, the state correction is Theta psi + theta_0 = [Theta, theta_0] [psi; 1]: the
    # extended parameters Theta~ (P, F + 1) act on the extended features psi~ = [psi; 1].
    def _features(self, rows: slice) -> FloatArray:
        """psi(y(t-1)) (T, F), with a constant column appended when the bias is on (T, F + 1)."""
        Psi = self._aug.feature_map.transform(self.data.yz_prev[rows])
        return np.hstack([Psi, np.ones((len(Psi), 1))]) if self.learns_bias else np.asarray(Psi)

    def _extended(self) -> FloatArray:
        """Theta~ = [Theta, theta_0] (bias on) or Theta."""
        if self.learns_bias:
            return np.hstack([self._aug.theta, self._offset[:, None]])
        return self._aug.theta.copy()

    def _set_extended(self, value: FloatArray) -> None:
        if self.learns_bias:
            self._aug.theta = value[:, :-1]
            self._offset = np.asarray(value[:, -1], dtype=np.float64).copy()
        else:
            self._aug.theta = value

    def _chain(self, xhat_a_prev: FloatArray, rows: slice, upstream: FloatArray) -> FloatArray:
        """dL/dTheta~ = sum_t J_f(x̂_a(t-1))' g_t psi~_t' from g_t = dL/dx_a(t) (T, P); shape of Theta~."""
        Psi = self._features(rows)
        if isinstance(self._model, LinearModel):
            # A' (G' Psi~)  (one matmul for all t)
            return np.asarray(np.asarray(self._model.transition_matrix).T @ (upstream.T @ Psi))
        J = transition_jacobians(self._model, xhat_a_prev, self.data.u(rows))
        return np.asarray(np.einsum("tkq,tk,tf->qf", J, upstream, Psi, optimize=True))

    # -- losses -----------------------------------------------------------------------------------
    def augmented(
        self,
        rows: slice,
        theta: FloatArray | None = None,
        bias: FloatArray | None = None,
        offset: FloatArray | None = None,
    ) -> tuple[FloatArray, FloatArray]:
        """(x̂_a(t-1), x_a(t)) for the rows with the current (or given) Theta, offset and bias."""
        d = self.data
        aug = self._aug if theta is None else Augmentation(self._aug.feature_map, self._aug.state_dim, theta)
        offset = self._offset if offset is None else np.asarray(offset, dtype=np.float64)
        bias = self._bias if bias is None else np.asarray(bias, dtype=np.float64)
        # x̂_a(t-1) = x̂_c(t-1) + Theta psi(y(t-1)) + theta_0 ;  x_a(t) = f(x̂_a(t-1), u(t-1)) + phi
        xhat_a_prev = d.xhat_prev[rows] + aug.phi(d.yz_prev[rows]) + offset
        return xhat_a_prev, np.asarray(self._model.predict(xhat_a_prev, d.u(rows))) + bias

    def reconstruction_loss(
        self,
        rows: slice | None = None,
        theta: FloatArray | None = None,
        bias: FloatArray | None = None,
        offset: FloatArray | None = None,
    ) -> float:
        """Mean ||y(t) - h(x_a(t))||^2 over the rows (model units); all parameters 0 gives the proprietary loss."""
        rows = self.train_rows if rows is None else rows
        _, x_a = self.augmented(rows, theta, bias, offset)
        residual = self.data.y_model[rows] - self._model.measure(x_a)
        return float(np.mean(np.sum(residual**2, axis=1)))

    def objective(
        self,
        rows: slice,
        x_s: FloatArray,
        theta: FloatArray | None = None,
        bias: FloatArray | None = None,
        offset: FloatArray | None = None,
        penalty: Disentanglement | None = None,
    ) -> float:
        """J = reconstruction + lambda (mean ||x_s - x_a||^2 + penalty) + (r/2) (||Theta||^2 + ||theta_0||^2).

        For tests and diagnostics (the client itself only ever sees the server's gradients).
        """
        theta = self.theta if theta is None else theta
        offset = self._offset if offset is None else offset
        xhat_a_prev, x_a = self.augmented(rows, theta, bias, offset)
        residual = self.data.y_model[rows] - self._model.measure(x_a)
        recon = float(np.mean(np.sum(residual**2, axis=1)))
        server = float(np.mean(np.sum((x_s - x_a) ** 2, axis=1)))
        if penalty is not None:
            gap = (xhat_a_prev - self.data.xhat_prev[rows]) @ penalty.own_block.T - penalty.cross_states
            server += penalty.xi * float(np.mean(np.sum(gap**2, axis=1)))
        size = float(np.sum(theta**2)) + float(np.sum(np.asarray(offset) ** 2))
        return recon + self.settings.server_weight * server + 0.5 * self._precond.r * size

    def _local_loss_gradient(self, rows: slice) -> tuple[float, FloatArray, FloatArray, FloatArray]:
        """(mean reconstruction loss, its d/dTheta~, its d/dphi, x̂_a(t-1)) at the current parameters."""
        d = self.data
        xhat_a_prev, x_a = self.augmented(rows)
        residual = d.y_model[rows] - self._model.measure(x_a)
        W = len(residual)
        loss = float(np.sum(residual**2) / W)
        if isinstance(self._model, LinearModel):
            # dL/dx_a(t) = -(2/W) C' r(t)
            g = -(2.0 / W) * residual @ np.asarray(self._model.C)
        else:
            H = batched_jacobian(self._model.measure, x_a)
            # dL/dx_a(t) = -(2/W) H_t' r(t)
            g = -(2.0 / W) * np.einsum("tdp,td->tp", H, residual)
        # x_a = f(x̂_a) + phi: Theta~ chains through f; dL/dphi = sum_t dL/dx_a(t)
        return loss, self._chain(xhat_a_prev, rows, g), g.sum(axis=0), xhat_a_prev

    def whatif_arrays(self) -> dict[str, np.ndarray]:
        """The plant's side of the what-if queries (:mod:`fedrca.whatif`), for its artifact.

        ``whatif.C`` (D, P): the measurement map in model units (the Jacobian of h at the mean
        proprietary prediction for a nonlinear model); ``whatif.y_scale`` (D,) and
        ``whatif.u_scale`` (U,): raw units per model unit of each sensor and input (the nominal
        standard deviations for an identified model, ones otherwise); ``whatif.A`` (P, P) and
        ``whatif.B`` (P, U): the plant's own transition and input blocks A_mm, B_mm (Jacobians at
        that operating point for a nonlinear model; B only for a plant with inputs), which the
        queries use in place of the server's estimates of them (P3: the diagonal blocks are the
        plants' own); ``bias`` (P,): phi; ``offset`` (P,): theta_0. The ``whatif.*`` arrays are the
        plant's own model: they stay in its artifact on disk and are never published
        (:func:`fedrca.contracts.artifacts.public_artifact`).
        """
        rows = self.train_rows
        u0 = None if self.data.u_prev is None else self.data.u_prev[rows].mean(axis=0, keepdims=True)
        if isinstance(self._model, LinearModel):
            C = np.asarray(self._model.C, dtype=np.float64)
            A = np.asarray(self._model.transition_matrix, dtype=np.float64)
            B = getattr(self._model, "B", None)
        else:
            x0 = self.data.x_c[rows].mean(axis=0, keepdims=True)
            C = np.asarray(batched_jacobian(self._model.measure, x0)[0])
            A = np.asarray(transition_jacobians(self._model, x0, u0)[0])
            B = None
            if u0 is not None:
                # batched_jacobian calls f on U rows (one per input direction): the state repeated as many times
                xm = x0.repeat(u0.shape[1], axis=0)
                model = self._model

                def f_of_u(u: FloatArray) -> FloatArray:
                    return np.asarray(model.predict(xm[: len(u)], u), dtype=np.float64)

                B = np.asarray(batched_jacobian(f_of_u, u0)[0])
        arrays = {
            "bias": self._bias.copy(),
            "offset": self._offset.copy(),
            "whatif.C": C.copy(),
            "whatif.A": A.copy(),
            "whatif.y_scale": self._y_scale.copy(),
            "whatif.u_scale": self._u_scale.copy(),
        }
        if B is not None and self.input_dim:
            arrays["whatif.B"] = np.asarray(B, dtype=np.float64).reshape(self.state_dim, self.input_dim).copy()
        arrays.update(self.row_arrays())
        return arrays

    def row_arrays(self) -> dict[str, np.ndarray]:
        """The plant's private row of the global model (estimator ``moments``; empty before :meth:`fit_row`).

        ``whatif.row_A`` (P, S), ``whatif.row_B`` (P, sum U) and their standard errors;
        ``whatif.row_parents``, ``whatif.row_inputs`` and ``whatif.row_candidates`` (M,): 1 for the
        plants whose block is in the row, whose inputs are in it, and whose inputs it could
        include (its own and the released ones); plants in the server's block order.
        """
        if self.row is None:
            return {}
        plants = self._row_plants
        candidates = {self.plant} if self.input_dim else set()
        if self.settings.privacy.releases_inputs:
            candidates |= set(plants)
        return {
            "whatif.row_candidates": np.array([p in candidates for p in plants], dtype=np.int64),
            "whatif.row_A": self.row.A.copy(),
            "whatif.row_B": self.row.B.copy(),
            "whatif.row_A_stderr": self.row.A_stderr.copy(),
            "whatif.row_B_stderr": self.row.B_stderr.copy(),
            "whatif.row_parents": np.array([p in self.row.parents for p in plants], dtype=np.int64),
            "whatif.row_inputs": np.array([p in self.row.inputs_of for p in plants], dtype=np.int64),
        }

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
        d = self.data
        names = ["x_a"]
        arrays = [x_a]
        if self.xi > 0.0:
            names.append("xhat_a_prev")
            arrays.append(xhat_a_prev)
        if send_fixed:
            names += ["xhat_c_prev", "x_c", "x_meas"]
            arrays += [d.xhat_prev[rows], d.x_c[rows], d.x_meas[rows]]
            if d.u_prev is not None:
                # the inputs are part of the released record: a controller's moves are a function of
                # the measurements, so they are clipped and noised like the states
                names.append("u")
                arrays.append(d.u_prev[rows])
        mu2 = self._mechanism.mu**2 if self._mechanism.active else 0.0
        # refuse before anything leaves the plant: this round's states and the gradients that follow
        self.accountant.check(mu2 + self.gradient_mu2, rows)
        noised, clipped = self._mechanism.release(arrays, self._rng)
        # what the server decodes (compact encodings round the arrays): the perturbation includes it
        noised = [quantise(a, self.settings.message_encoding) for a in noised]
        self.clipped += clipped
        self.accountant.charge(mu2, rows, "states")
        sent = dict(zip(names, noised, strict=True))
        if send_fixed:
            self._x_c_error[rows] = sent["x_c"] - d.x_c[rows]
        self._sent_fixed[rows] = True
        # what the server will see minus the truth (clipping + noise), to take out of its gradient
        self._pending = (round_, rows.start, rows.stop, xhat_a_prev, sent["x_a"] - x_a)
        return StatesMessage(
            round=round_,
            plant=self.plant,
            version=self.version,
            start=rows.start,
            x_a=sent["x_a"],
            xhat_c_prev=sent.get("xhat_c_prev"),
            x_c=sent.get("x_c"),
            x_meas=sent.get("x_meas"),
            xhat_a_prev=sent.get("xhat_a_prev"),
            u=sent.get("u"),
            noise_sigma=self._mechanism.sigma(len(arrays)),
            clip=self._mechanism.clip if self._mechanism.active else None,
        )

    def gradient(self, message: GradientMessage) -> tuple[float, FloatArray]:
        """(reconstruction loss, dJ/dTheta) at the current parameters for the server's gradient message."""
        loss, total, _, _ = self._gradient(message)
        return loss, total[:, : self._aug.theta.shape[1]]

    def gradients(self, message: GradientMessage) -> tuple[float, FloatArray, FloatArray, FloatArray]:
        """(reconstruction loss, dJ/dTheta, dJ/dtheta_0, dJ/dphi) for the server's message (zeros: bias off)."""
        loss, total, total_bias, _ = self._gradient(message)
        F = self._aug.theta.shape[1]
        offset = total[:, F] if self.learns_bias else np.zeros(self.state_dim)
        return loss, total[:, :F], offset, total_bias

    def _gradient(self, message: GradientMessage) -> tuple[float, FloatArray, FloatArray, slice]:
        if self._pending is None:
            raise MessageError(R.OUT_OF_ORDER, f"plant '{self.plant}': gradients without a pending states message")
        round_, start, stop, xhat_a_prev, perturbation = self._pending
        if message.plant != self.plant or message.round != round_ or message.start != start or message.stop != stop:
            raise MessageError(
                R.MISMATCH,
                f"plant '{self.plant}' awaits round {round_} window {start}..{stop}, got "
                f"'{message.plant}' round {message.round} window {message.start}..{message.stop}",
            )
        for name in ("grad", "grad_prev"):
            value = getattr(message, name)
            if value is not None and value.shape[1] != self.state_dim:
                raise MessageError(R.BAD_ARRAY, f"{name} has {value.shape[1]} columns, expected {self.state_dim}")
        rows = slice(start, stop)
        loss, grad_c, bias_c, _ = self._local_loss_gradient(rows)
        # The server saw x_a + e_a and x_c + e_c (e: the clipping and noise this client added) and
        # sent g = -2 (x_c + e_c + pred - x_a - e_a); the client knows both e, so it takes them out:
        # g + 2 (e_c - e_a) = -2 (x_s - x_a). Post-processing of the client's own information:
        # no privacy cost; only the noise of the server's prediction from the states remains.
        grad = np.asarray(message.grad, dtype=np.float64) + 2.0 * (self._x_c_error[rows] - perturbation)
        W = stop - start
        # dL_s/dTheta~ = sum_t J_f' (g_t / W) psi~_t'   (the window's server loss is the mean of l_t)
        upstream = grad / W
        grad_s = self._chain(xhat_a_prev, rows, upstream)
        if message.grad_prev is not None:
            # the penalty reaches Theta~ through x̂_a(t-1) = x̂_c(t-1) + Theta~ psi~_t:  + sum_t (g'_t / W) psi~_t'
            # (its noise, if any, is zero-mean; the client cannot remove it: it does not know Â_mm)
            grad_s = grad_s + (np.asarray(message.grad_prev, dtype=np.float64) / W).T @ self._features(rows)
        lam = self.settings.server_weight
        total = grad_c + lam * grad_s + self._precond.r * self._extended()
        # dL_s/dphi = sum_t g_t / W
        total_bias = bias_c + lam * upstream.sum(axis=0)
        return loss, total, total_bias, rows

    def apply_gradient(self, message: GradientMessage) -> float:
        """Take one preconditioned step with the server's gradients; returns the reconstruction loss before it."""
        loss, total, total_bias, rows = self._gradient(message)
        lr = self.settings.client_lr
        step, step_bias = self._solve(total, total_bias)
        # (Theta~, phi) <- (Theta~, phi) - lr P^-1 dJ/d(Theta~, phi)
        self._set_extended(self._extended() - lr * step)
        if self.learns_bias:
            self._bias = self._bias - lr * step_bias
        self.accountant.charge(message.privacy_mu2, rows, "gradients")
        self.version += 1
        self.history.append({"round": float(message.round), "loss": loss, "server_loss": message.server_loss})
        self._pending = None
        return loss

    def privacy_summary(self) -> dict[str, Any]:
        """Spent epsilon and the raw ledger (``mu2``: Gaussian spend, ``pure``: {epsilon: count}) of this plant."""
        if self.settings.estimator == "moments":
            return self.ledger.summary()
        summary = self.accountant.summary()
        summary["mu2"] = self.accountant.mu() ** 2
        summary["pure"] = {}
        return summary

    def epsilon_spent(self) -> float:
        """Epsilon this plant has spent in training (at ``training.privacy.delta``)."""
        return float(self.privacy_summary()["epsilon"])

    # -- estimator 'moments': everything released once (fedrca.training.moments) ---------------------
    @property
    def moment_settings(self) -> MomentSettings:
        """The two releases of the private-moments protocol, from the training settings."""
        p = self.settings.privacy
        mu = math.inf if math.isinf(p.moment_epsilon) else gaussian_mu(p.moment_epsilon, p.delta)
        return MomentSettings(p.state_clip, p.state_epsilon, mu, p.moment_lags, bound_factor=0.5)

    @property
    def releases_inputs(self) -> bool:
        """True when this plant releases its inputs and its own moments with them (it has inputs; the settings)."""
        return self.settings.privacy.releases_inputs and self.input_dim > 0

    @property
    def input_moment_mu(self) -> float:
        """GDP mu of the one release of the own moments with inputs (inf = no noise)."""
        eps = self.settings.privacy.input_moment_epsilon
        return math.inf if eps is None or math.isinf(eps) else gaussian_mu(eps, self.settings.privacy.delta)

    def moments_plan(self) -> tuple[float, dict[float, int]]:
        """(mu^2, {epsilon: count}) the releases will charge: states, moments (and inputs, their own moments)."""
        ms = self.moment_settings
        mu2 = 0.0 if math.isinf(ms.moment_mu) else ms.moment_mu**2
        pure = {} if math.isinf(ms.state_epsilon) else {ms.state_epsilon: 1}
        if self.releases_inputs:
            eps_u = self.settings.privacy.input_epsilon
            assert eps_u is not None
            if not math.isinf(eps_u):
                pure[eps_u] = pure.get(eps_u, 0) + 1
            if not math.isinf(self.input_moment_mu):
                mu2 += self.input_moment_mu**2
        return mu2, pure

    def measurement_noise_cov(self) -> FloatArray | None:
        """Covariance of x̃ - x for a linear model, ``(C'C)^-1 C' R C (C'C)^-1`` (model units), else None."""
        R_ = getattr(self._model, "R", None)
        if not isinstance(self._model, LinearModel) or R_ is None:
            return None
        C = np.asarray(self._model.C)
        Cp = np.linalg.pinv(C)
        return np.asarray(Cp @ np.asarray(R_) @ Cp.T)

    def release_message(self, round_: int) -> ReleaseMessage:
        """The plant's measurement states over the trained rows, clipped + Laplace noise: released once.

        Raises
        ------
        PrivacyBudgetExceeded
            When this release and the moments after it would pass ``training.privacy.budget``.
        """
        ms = self.moment_settings
        mu2, pure = self.moments_plan()
        self.ledger.check(mu2, pure, what="releasing the states and the moments")
        rows = self.train_rows
        released, clipped = release_states(self.data.x_meas[rows], ms.state_clip, ms.state_epsilon, self._rng)
        self.clipped += clipped
        if not math.isinf(ms.state_epsilon):
            self.ledger.charge_pure(ms.state_epsilon, key="states")
        self._released = released
        inputs: dict[str, Any] = {}
        if self.releases_inputs:
            p = self.settings.privacy
            eps_u = p.input_epsilon
            assert eps_u is not None and self.data.u_prev is not None
            u, clipped_u = release_states(self.data.u_prev[rows], p.input_clip, eps_u, self._input_rng)
            self.clipped += clipped_u
            if not math.isinf(eps_u):
                self.ledger.charge_pure(eps_u, key="inputs")
            inputs = {
                "u": u,
                "input_noise_scale": laplace_scale(p.input_clip, self.input_dim, eps_u),
                "input_clip": p.input_clip,
            }
        return ReleaseMessage(
            round=round_,
            plant=self.plant,
            version=self.version,
            start=rows.start,
            x_meas=released,
            noise_scale=ms.noise_scale(self.state_dim),
            clip=ms.state_clip,
            **inputs,
        )

    def moments_message(self, round_: int, released: dict[str, ReleaseMessage]) -> MomentsMessage:
        """This plant's lag moments (own states exact, the others' released ones), Gaussian-noised: released once."""
        ms = self.moment_settings
        rows = self.train_rows
        for other, msg in released.items():
            if msg.start != rows.start or msg.stop != rows.stop:
                raise MessageError(
                    R.MISMATCH, f"plant '{self.plant}': states of '{other}' cover {msg.start}..{msg.stop}, not ours"
                )
        others = sorted(released)
        release = plant_moments(
            self.plant,
            self.data.x_meas[rows],
            {o: released[o].x_meas for o in others},
            clip=ms.state_clip,
            others_bounds={o: ms.others_bound(released[o].x_meas.shape[1]) for o in others},
            lags=ms.lags,
            mu=ms.moment_mu,
            rng=self._rng,
            noise_cov=self.measurement_noise_cov(),
        )
        self.ledger.charge_gaussian(0.0 if math.isinf(ms.moment_mu) else ms.moment_mu**2, key="moments")
        n = release.n_rows
        self._own_state_block = (release.own[ms.lags :] / n, release.noise_sigma / n)
        return MomentsMessage(
            round=round_,
            plant=self.plant,
            version=self.version,
            start=rows.start,
            moments=pack_moments(release, others),
            others=tuple(others),
            lags=ms.lags,
            n_rows=release.n_rows,
            noise_sigma=release.noise_sigma,
        )

    def own_moments_message(self, round_: int) -> OwnMomentsMessage:
        """This plant's own-block moments of [x; u] (the state block as already released; the input blocks
        released once, Gaussian): the other plants' rows use them (:mod:`fedrca.training.varx`)."""
        if self._own_state_block is None:
            raise MessageError(R.OUT_OF_ORDER, f"plant '{self.plant}': own moments before the moments release")
        ms = self.moment_settings
        p = self.settings.privacy
        rows = self.train_rows
        block, sigma = self._own_state_block
        inputs = self.data.u_prev[rows] if self.releases_inputs and self.data.u_prev is not None else None
        released = own_moments(
            self.plant,
            self.data.x_meas[rows],
            inputs,
            block,
            sigma,
            clip_x=ms.state_clip,
            clip_u=p.input_clip,
            lags=ms.lags,
            mu=self.input_moment_mu,
            rng=self._input_rng,
        )
        if inputs is not None and not math.isinf(self.input_moment_mu):
            self.ledger.charge_gaussian(self.input_moment_mu**2, key="input_moments")
        D = released.gammas.shape[1]
        return OwnMomentsMessage(
            round=round_,
            plant=self.plant,
            version=self.version,
            start=rows.start,
            moments=released.gammas.reshape(-1, D),
            state_dim=released.state_dim,
            state_sigma=released.state_sigma,
            input_sigma=released.input_sigma,
        )

    def fit_row(
        self,
        plants: list[str],
        state_dims: list[int],
        input_dims: list[int],
        releases: dict[str, ReleaseMessage],
        blocks: dict[str, OwnMomentsMessage],
        seed: int = 0,
    ) -> RowEstimate:
        """This plant's row ``[A_m. B_m.]`` from its exact states and inputs and the others' releases (private).

        Nothing leaves the plant: the row goes into its artifact's private ``whatif.*`` arrays
        (:func:`fedrca.training.varx.fit_row`).
        """
        ms = self.moment_settings
        rows = self.train_rows
        public = {}
        own_blocks = {}
        for other in plants:
            if other == self.plant:
                continue
            if other not in releases or other not in blocks:
                raise MessageError(
                    R.MISSING_STATES, f"plant '{self.plant}': no released states or moments of '{other}'"
                )
            rel, blk = releases[other], blocks[other]
            public[other] = public_series(
                rel.x_meas, rel.noise_scale, rel.clip or 0.0, rel.u, rel.input_noise_scale, rel.input_clip or 0.0
            )
            D = blk.moments.shape[1]
            own_blocks[other] = OwnMoments(
                other, blk.state_dim, D - blk.state_dim, blk.moments.reshape(-1, D, D), blk.state_sigma, blk.input_sigma
            )
        self.row = fit_row(
            self.plant,
            plants,
            state_dims,
            input_dims,
            self.data.x_meas[rows],
            self.data.u_prev[rows] if self.data.u_prev is not None else None,
            public,
            own_blocks,
            lags=ms.lags,
            first_equation=2 if self.settings.input_instruments == "lagged" else 1,
            noise_cov=self.measurement_noise_cov(),
            seed=seed,
        )
        self._row_plants = list(plants)
        return self.row

    def fit_to_target(self, message: GradientMessage, rounds: int) -> None:
        """``rounds`` local steps towards ``x_s = x_c + d`` with the server's ``grad = -2 d`` (post-processing: free).

        d is what the other plants predict of this plant from their released states; the
        plant adds its own part, ``g = -2 (x_c + d - x_a)``, so nothing more leaves it.
        """
        rows = self.train_rows
        if message.plant != self.plant or message.start != rows.start or message.stop != rows.stop:
            raise MessageError(
                R.MISMATCH,
                f"plant '{self.plant}': target for {message.plant} {message.start}.."
                f"{message.stop}, expected {rows.start}..{rows.stop}",
            )
        d = self.data
        W = rows.stop - rows.start
        lam = self.settings.server_weight
        lr = self.settings.client_lr
        for r in range(rounds):
            loss, grad_c, bias_c, xhat_a_prev = self._local_loss_gradient(rows)
            _, x_a = self.augmented(rows)
            # g = -2 (x_c + d - x_a) = message.grad - 2 (x_c - x_a)
            g = np.asarray(message.grad, dtype=np.float64) - 2.0 * (d.x_c[rows] - x_a)
            server_loss = float(np.mean(np.sum((g / 2.0) ** 2, axis=1)))
            upstream = g / W
            # dJ/dTheta~ = dL_c/dTheta~ + lambda dL_s/dTheta~ + r Theta~ ;  dJ/dphi = dL_c/dphi + lambda sum_t g_t / W
            total = grad_c + lam * self._chain(xhat_a_prev, rows, upstream) + self._precond.r * self._extended()
            total_bias = bias_c + lam * upstream.sum(axis=0)
            step, step_bias = self._solve(total, total_bias)
            # (Theta~, phi) <- (Theta~, phi) - lr P^-1 dJ/d(Theta~, phi)
            self._set_extended(self._extended() - lr * step)
            if self.learns_bias:
                self._bias = self._bias - lr * step_bias
            self.version += 1
            self.history.append({"round": float(r), "loss": loss, "server_loss": server_loss})

    # -- convergence -------------------------------------------------------------------------------
    def _build_preconditioner(self) -> _Preconditioner:
        d = self.data
        rows = self.train_rows
        Psi = self._features(rows)
        S = Psi.T @ Psi / len(Psi)
        lam = self.settings.server_weight
        xi = self.xi
        P = self.state_dim
        if isinstance(self._model, LinearModel):
            A, C = np.asarray(self._model.transition_matrix), np.asarray(self._model.C)
            weight = C.T @ C + lam * np.eye(P)
            # M = 2 A' (C'C + lambda I) A + 2 lambda xi A'A
            M = 2.0 * A.T @ weight @ A + 2.0 * lam * xi * A.T @ A
            # d^2 J / d phi^2 = 2 (C'C + lambda I); d^2 J / dTheta~ dphi = mu~ ⊗ N, N = 2 A' (C'C + lambda I)
            bias_curvature = 2.0 * weight
            N = A.T @ bias_curvature
        else:
            J = transition_jacobians(self._model, d.xhat_prev[rows], d.u(rows))
            H = batched_jacobian(self._model.measure, d.x_c[rows])
            # per-sample J'(H'H + lambda I) J, averaged
            inner = np.einsum("tdp,tdq->tpq", H, H) + lam * np.eye(P)[None]
            per_sample = np.einsum("tkp,tkl,tlq->tpq", J, inner, J)
            self._jacobians = (np.asarray(J), per_sample, inner)
            J_mean = np.asarray(J).mean(axis=0)
            M = 2.0 * per_sample.mean(axis=0) + 2.0 * lam * xi * J_mean.T @ J_mean
            bias_curvature = 2.0 * inner.mean(axis=0)
            N = 2.0 * np.einsum("tkp,tkq->pq", J, inner) / len(J)
        self._bias_curvature = 0.5 * (bias_curvature + bias_curvature.T) + 1e-12 * np.eye(P)
        self._Psi_train = Psi
        theta_part = _Preconditioner(M, S, self.settings.ridge)
        self._joint = None
        if self.learns_bias and P * (S.shape[0] + 1) <= JOINT_PRECONDITIONER_LIMIT:
            self._joint = _JointPreconditioner(theta_part, N, Psi.mean(axis=0), self._bias_curvature)
        return theta_part

    def _solve(self, G_theta: FloatArray, G_phi: FloatArray) -> tuple[FloatArray, FloatArray]:
        """P^-1 applied to a (Theta~, phi) gradient (phi's part is zero when the bias is off)."""
        if not self.learns_bias:
            return self._precond.solve(G_theta), np.zeros_like(G_phi)
        if self._joint is not None:
            return self._joint.solve(G_theta, G_phi)
        return self._precond.solve(G_theta), np.asarray(np.linalg.solve(self._bias_curvature, G_phi), dtype=np.float64)

    def _own_transition(self) -> FloatArray:
        """Ā: the transition matrix (linear) or the mean transition Jacobian over the training rows."""
        if self._jacobians is None:
            return np.asarray(self._model.transition_matrix)  # type: ignore[attr-defined]
        return np.asarray(self._jacobians[0].mean(axis=0))

    def _hessian_product(
        self, Delta: FloatArray, delta_bias: FloatArray | None = None
    ) -> tuple[FloatArray, FloatArray]:
        """Exact Gauss-Newton Hessian of J (full training window) applied to (Delta (Theta~'s shape), delta_phi (P,)).

        The penalty's curvature uses Ā for the server's Â_mm (what it estimates).
        """
        Psi = self._Psi_train
        T = len(Psi)
        db = np.zeros(self.state_dim) if delta_bias is None else delta_bias
        lam, xi = self.settings.server_weight, self.xi
        A_bar = self._own_transition()
        V = Psi @ Delta.T  # (T, P): Delta psi~_t, the change of x̂_a(t-1)
        if self._jacobians is None:
            A, C = np.asarray(self._model.transition_matrix), np.asarray(self._model.C)  # type: ignore[attr-defined]
            weight = C.T @ C + lam * np.eye(self.state_dim)
            # change of x_a(t): A Delta psi~_t + delta_phi; the Hessian of (1/T) sum ||.||^2_weight is 2 weight
            change = V @ A.T + db
            out_b = 2.0 * weight @ change.mean(axis=0)
            out_t = 2.0 * A.T @ weight @ (change.T @ Psi) / T
        else:
            J, _, inner = self._jacobians
            change = np.einsum("tpq,tq->tp", J, V) + db
            weighted = 2.0 * np.einsum("tpq,tq->tp", inner, change)
            out_b = weighted.mean(axis=0)
            out_t = np.einsum("tkq,tk,tf->qf", J, weighted, Psi) / T
        # penalty: lambda xi (1/T) sum ||Ā Delta psi~_t||^2
        out_t = out_t + 2.0 * lam * xi * A_bar.T @ A_bar @ (V.T @ Psi) / T
        out_t = out_t + self._precond.r * Delta
        return np.asarray(out_t), np.asarray(out_b)

    def iteration_spectrum(self, lr: float | None = None, iterations: int = 60) -> tuple[float, float]:
        """(smallest, largest) eigenvalue of lr P^-1 H, by power iteration with exact Hessian products.

        ``P^-1 H`` is similar to a symmetric positive definite matrix, so its eigenvalues are real
        and positive; the client iteration ``params <- params - lr P^-1 grad`` contracts iff all of
        them lie in (0, 2), i.e. its spectral radius ``max |1 - lambda|`` is below 1. With the bias
        on, H and P are those of the joint (Theta, theta_0, phi) iteration.
        """
        lr = self.settings.client_lr if lr is None else lr
        rng = np.random.default_rng(12345)
        shape = self._extended().shape
        P = self.state_dim
        joint = self.learns_bias
        n = shape[0] * shape[1]

        def op(v: FloatArray) -> FloatArray:
            Delta = v[:n].reshape(shape)
            db = v[n:] if joint else None
            h_t, h_b = self._hessian_product(Delta, db)
            step, step_bias = self._solve(h_t, h_b)
            return lr * np.concatenate([step.ravel(), step_bias if joint else []])

        size = n + (P if joint else 0)

        def power(shift: float) -> float:
            v = rng.standard_normal(size)
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
            "offset": self._offset.copy(),
            "bias": self._bias.copy(),
            "sent_fixed": self._sent_fixed.copy(),
            "x_c_error": self._x_c_error.copy(),
        }
        if self.row is not None:
            arrays.update({f"row.{k}": getattr(self.row, k).copy() for k in ("A", "B", "A_stderr", "B_stderr")})
        meta = {
            "version": self.version,
            "clipped": self.clipped,
            "rng": self._rng.bit_generator.state,
            "accountant": self.accountant.get_state(),
            "ledger": self.ledger.get_state(),
            "history": self.history,
        }
        if self.row is not None:
            meta["row"] = {
                "plants": self._row_plants,
                "parents": list(self.row.parents),
                "inputs_of": list(self.row.inputs_of),
                "pvalues": self.row.pvalues,
            }
        return arrays, meta

    def set_state(self, arrays: dict[str, np.ndarray], meta: dict[str, Any]) -> None:
        """Restore :meth:`get_state` output."""
        self._aug.theta = np.asarray(arrays["theta"], dtype=np.float64)
        zeros = np.zeros(self.state_dim)
        self._offset = np.asarray(arrays.get("offset", zeros), dtype=np.float64).copy()
        self._bias = np.asarray(arrays.get("bias", zeros), dtype=np.float64).copy()
        self._sent_fixed = np.asarray(arrays["sent_fixed"], dtype=bool).copy()
        self._x_c_error = np.asarray(arrays["x_c_error"], dtype=np.float64).copy()
        self.version = int(meta["version"])
        self.clipped = int(meta["clipped"])
        self._rng.bit_generator.state = meta["rng"]
        self.accountant.set_state(meta["accountant"])
        if "ledger" in meta:
            self.ledger.set_state(meta["ledger"])
        self.history = [dict(h) for h in meta["history"]]
        self._pending = None
        row = meta.get("row")
        if row is not None:

            def arr(name: str) -> FloatArray:
                return np.asarray(arrays[f"row.{name}"], dtype=np.float64).copy()

            self.row = RowEstimate(
                arr("A"),
                arr("B"),
                arr("A_stderr"),
                arr("B_stderr"),
                tuple(row["parents"]),
                tuple(row["inputs_of"]),
                {str(k): float(v) for k, v in row["pvalues"].items()},
            )
            self._row_plants = [str(p) for p in row["plants"]]
