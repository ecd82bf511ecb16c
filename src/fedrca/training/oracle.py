"""Centralised oracles, for comparison only (they see every plant's raw data; never used in production).

* :func:`linear_oracle`: the Kalman filter of the true joint linear model of a
  :func:`~fedrca.datasets.linear_multiplant` data set (all blocks A_mn known);
* :func:`nonlinear_oracle`: the extended Kalman filter of the true nonlinear network of
  :func:`~fedrca.datasets.nonlinear_network` (operating cycle as a known input);
* :func:`identified_oracle`: one linear model identified from all plants' nominal data
  jointly (for real data such as TEP, where no true model exists).

Also :func:`true_local_filter`, a plug-in factory giving a plant of the linear synthetic
its true *local* model (A_mm, C_m) as the proprietary filter, which is P2's setting.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import scipy.linalg
from numpy.typing import NDArray

from fedrca.datasets.synthetic import SyntheticData, linear_multiplant
from fedrca.detectors.ekf import ExtendedKalmanFilter
from fedrca.detectors.identify import identify_linear_model
from fedrca.detectors.kalman import LinearKalmanFilter
from fedrca.exceptions import DataError

__all__ = ["OracleOutput", "identified_oracle", "linear_oracle", "nonlinear_oracle", "true_local_filter"]

FloatArray = NDArray[np.float64]


@dataclass(frozen=True)
class OracleOutput:
    """Centralised filter output: predicted states x_o(t) (T, S) and residuals y - h(x_o) (T, sum D)."""

    x_pred: FloatArray
    residuals: FloatArray


def true_local_filter(
    plant: int,
    n_plants: int = 2,
    sensors_per_plant: int = 8,
    states_per_plant: int = 2,
    coupling: float = 0.4,
    self_radius: float = 0.7,
    state_noise: float = 0.1,
    sensor_noise: float = 0.1,
    system_seed: int = 0,
    inputs_per_plant: int = 0,
    input_coupling: float = 0.5,
    input_gain: float = 0.5,
) -> LinearKalmanFilter:
    """Plant ``plant``'s true local model of :func:`linear_multiplant` (chain graph): KF(A_mm, B_mm, C_m, Q, R).

    Use as a plug-in (``model: {kind: plugin, plugin: "fedrca.training.oracle:true_local_filter",
    plugin_args: {plant: 0}}``). The filter does not know the cross-plant blocks (A_mn, B_mn);
    with ``inputs_per_plant`` > 0 it knows its own input block B_mm (P3's proprietary model).

    Examples
    --------
    >>> true_local_filter(1).A.shape
    (2, 2)
    """
    system = linear_multiplant(
        n_samples=4,
        n_plants=n_plants,
        sensors_per_plant=sensors_per_plant,
        states_per_plant=states_per_plant,
        coupling=coupling,
        self_radius=self_radius,
        state_noise=state_noise,
        sensor_noise=sensor_noise,
        system_seed=system_seed,
        inputs_per_plant=inputs_per_plant,
        input_coupling=input_coupling,
        input_gain=input_gain,
    )
    if not 0 <= plant < n_plants:
        raise DataError(f"plant index must be in 0..{n_plants - 1}, got {plant}")
    s = system.state_slices[plant]
    P, D = states_per_plant, sensors_per_plant
    return LinearKalmanFilter(
        system.A[s, s] if system.A is not None else np.eye(P),
        system.C[plant],
        state_noise**2 * np.eye(P),
        sensor_noise**2 * np.eye(D),
        B=None if system.B is None else system.input_block(plant, plant),
    )


def linear_oracle(data: SyntheticData) -> OracleOutput:
    """KF of the true joint model of a linear synthetic data set over all plants' sensors."""
    if data.A is None:
        raise DataError("the linear oracle needs a data set with a linear transition (linear_multiplant)")
    q = float(data.system.get("state_noise", 0.1))
    r = float(data.system.get("sensor_noise", 0.1))
    C = scipy.linalg.block_diag(*data.C)
    kf = LinearKalmanFilter(data.A, C, q**2 * np.eye(len(data.A)), r**2 * np.eye(len(C)), B=data.B)
    U_prev = None
    if data.U is not None:
        # the filter's row t takes the input driving the transition into t: u(t-1)
        U_prev = np.vstack([np.zeros((1, data.U.shape[1])), data.U[:-1]])
    out = kf.filter(data.Y, U_prev)
    return OracleOutput(out.x_pred, out.residuals)


def _nonlinear_model(system: dict[str, Any], dims: int) -> tuple[Any, Any, Any, Any]:
    R, W, mask, G = system["R"], system["W"], system["mask"], system["G"]
    C_list = system["C"]
    coupling = float(system["coupling"])
    M = len(R)

    def f(x: FloatArray, u: FloatArray | None = None) -> FloatArray:
        X = np.atleast_2d(x).reshape(-1, M, 2)
        drive = np.einsum("mnpq,bnq->bmnp", W, X)
        cross = coupling * np.einsum("mn,bmnp->bmp", mask, np.tanh(drive))
        out = np.einsum("mpq,bmq->bmp", R, X) + 0.2 * np.sin(X) + cross
        if u is not None:
            out = out + np.atleast_2d(u).reshape(-1, M, 2)
        return out.reshape(np.shape(x))

    def F(x: FloatArray, u: FloatArray | None = None) -> FloatArray:
        X = x.reshape(M, 2)
        J = np.zeros((2 * M, 2 * M))
        for m in range(M):
            J[2 * m : 2 * m + 2, 2 * m : 2 * m + 2] = R[m] + 0.2 * np.diag(np.cos(X[m]))
            for n in range(M):
                if mask[m, n]:
                    sech2 = 1.0 - np.tanh(W[m, n] @ X[n]) ** 2
                    J[2 * m : 2 * m + 2, 2 * n : 2 * n + 2] += coupling * sech2[:, None] * W[m, n]
        return J

    def h(x: FloatArray) -> FloatArray:
        X = np.atleast_2d(x).reshape(-1, M, 2)
        Y = np.concatenate([X[:, m] @ C_list[m].T + 0.1 * (X[:, m] ** 2) @ G[m].T for m in range(M)], axis=-1)
        return Y if np.ndim(x) == 2 else Y[0]

    def H(x: FloatArray) -> FloatArray:
        X = x.reshape(M, 2)
        return np.asarray(scipy.linalg.block_diag(*[C_list[m] + 0.2 * G[m] * X[m][None, :] for m in range(M)]))

    return f, F, h, H


def nonlinear_oracle(data: SyntheticData) -> OracleOutput:
    """EKF of the true nonlinear network (all plants, known operating cycle) over all sensors."""
    system = dict(data.system)
    if "W" not in system:
        raise DataError("the nonlinear oracle needs a data set from nonlinear_network / nonlinear_two_plant")
    system["C"] = data.C
    M = data.n_plants
    f, F, h, H = _nonlinear_model(system, data.Y.shape[1])
    q, r = float(system["state_noise"]), float(system["sensor_noise"])
    ekf = ExtendedKalmanFilter(f, h, q**2 * np.eye(2 * M), r**2 * np.eye(data.Y.shape[1]), F_jacobian=F, H_jacobian=H)
    cycle = np.asarray(system["cycle"]).reshape(len(data.Y), 2 * M)
    out = ekf.filter(data.Y, cycle)
    return OracleOutput(out.x_pred, out.residuals)


def identified_oracle(
    nominal: FloatArray, test: FloatArray, n_states: int | None = None, energy: float = 0.9
) -> OracleOutput:
    """A linear model identified from all plants' nominal data jointly, filtered over ``test``.

    Residuals are in the standardised units of each column (the same units as the plants'
    identified detectors, which standardise every column with the same nominal statistics).
    """
    model = identify_linear_model(nominal, n_states=n_states, energy=energy)
    kf = model.kalman_filter()
    out = kf.filter(model.y_scaler.transform(test))
    return OracleOutput(out.x_pred, out.residuals)
