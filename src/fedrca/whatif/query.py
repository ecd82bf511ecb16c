"""What-if (counterfactual) queries on the learned global model (pure, no I/O).

By Pearl's abduction-action-prediction for a linear system (P3, proposition 4.1) the
average treatment effect of setting ``u_n(t-1)`` to ``u_n + du`` instead of ``u_n`` on
plant m's measurements is

    ATE = E[y_m(t) | do(u_n + du)] - E[y_m(t) | do(u_n)] = C_mm B_mn du,

whatever the past (the abducted state cancels). Held for k steps (a *step* change of the
input) the effect propagates through the learned A,

    dx(k) = sum_{j < k} A^j B[:, n] du,        dy_m(k) = C_mm dx_m(k),

which reaches m also through the other plants' states (n -> l -> m). A one-sample change
(an *impulse*) gives ``dx(k) = A^(k-1) B[:, n] du``. :func:`what_if` answers both, in the
sensors' and inputs' raw units (the plants' artifacts carry the scales).

Client side, a plant knows only its bias ``phi_m`` (the learned average of
``sum_n B_mn u_n``): :func:`client_effect` gives the change of its reconstructed
measurements ``C_mm dphi`` when that aggregate changes by ``dphi`` (P3, eq. 20).

Examples
--------
>>> A = np.array([[0.5, 0.0], [0.3, 0.6]]); B = np.array([[1.0], [0.0]])
>>> step_response(A, B @ [2.0], 3).round(3).tolist()     # input of state 1, held for 3 steps
[[2.0, 0.0], [3.0, 0.6], [3.5, 1.26]]
>>> model = GlobalModel(("a", "b"), (1, 1), (1, 0), np.array([[0.5, 0.0], [0.4, 0.5]]), np.array([[1.0], [0.0]]))
>>> what_if(model, "b", "a", [1.0], steps=2).state_response.round(2).tolist()
[[0.0], [0.4]]
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np
from numpy.typing import ArrayLike

from fedrca.exceptions import ConfigError
from fedrca.whatif.model import FloatArray, GlobalModel, PlantMap

__all__ = [
    "Mode",
    "WhatIfAnswer",
    "average_treatment_effect",
    "client_effect",
    "impulse_response",
    "step_response",
    "what_if",
]

Mode = Literal["step", "impulse"]


def step_response(A: ArrayLike, drive: ArrayLike, steps: int) -> FloatArray:
    """dx(k) = sum_{j<k} A^j drive for k = 1..steps (a push ``drive`` = B du held from t-1 on); (steps, S)."""
    A_arr, d = np.asarray(A, dtype=np.float64), np.asarray(drive, dtype=np.float64)
    out = np.empty((steps, len(d)))
    x = np.zeros(len(d))
    for k in range(steps):
        # dx(k+1) = A dx(k) + B du
        x = A_arr @ x + d
        out[k] = x
    return out


def impulse_response(A: ArrayLike, drive: ArrayLike, steps: int) -> FloatArray:
    """dx(k) = A^(k-1) drive for k = 1..steps (a push applied once, at t-1); (steps, S)."""
    A_arr, d = np.asarray(A, dtype=np.float64), np.asarray(drive, dtype=np.float64)
    out = np.empty((steps, len(d)))
    x = d.copy()
    for k in range(steps):
        out[k] = x
        # dx(k+1) = A dx(k)
        x = A_arr @ x
    return out


def average_treatment_effect(C_mm: ArrayLike, B_mn: ArrayLike, delta_u: ArrayLike) -> FloatArray:
    """ATE of do(u_n + du) vs do(u_n) on y_m one step later: ``C_mm B_mn du`` (P3, eq. 3).

    Examples
    --------
    >>> average_treatment_effect([[1.0, 0.0], [0.0, 2.0]], [[0.5], [0.25]], [2.0]).tolist()
    [1.0, 1.0]
    """
    return np.asarray(np.asarray(C_mm, dtype=np.float64) @ (np.asarray(B_mn, dtype=np.float64) @ np.ravel(delta_u)))


def client_effect(C_mm: ArrayLike, delta_bias: ArrayLike, y_scale: ArrayLike | None = None) -> FloatArray:
    """Change of a plant's reconstructed measurements when its bias changes by dphi: ``y_scale * C_mm dphi``.

    The bias is the plant's learned average of the other plants' input push ``sum_n B_mn u_n``
    (P3, corollary 6.2), so this answers "what if the aggregated effect of the other plants'
    inputs changed by dphi" with the plant's own knowledge only (P3, eq. 20).

    Examples
    --------
    >>> client_effect([[1.0, 0.0], [1.0, 1.0]], [0.5, -0.5]).tolist()
    [0.5, 0.0]
    """
    out = np.asarray(C_mm, dtype=np.float64) @ np.ravel(np.asarray(delta_bias, dtype=np.float64))
    return np.asarray(out if y_scale is None else out * np.asarray(y_scale, dtype=np.float64))


@dataclass(frozen=True)
class WhatIfAnswer:
    """Predicted effect on plant ``target`` of changing plant ``source``'s inputs by ``delta``.

    Attributes
    ----------
    target, source : plant names
    delta : (U_n,) the change in the inputs' raw units; delta_model : the same in model units
    mode : "step" (held from t-1 on) or "impulse" (one sample)
    state_response : (K, P_m) dx_m(k), k = 1..K (model units)
    sensor_response : (K, D_m) dy_m(k) in the sensors' raw units, or None (no measurement map)
    sensors : the target's sensor names (may be empty)
    direct_state : (P_m,) B_mn du (one step: the direct effect)
    direct_sensors : (D_m,) C_mm B_mn du in raw units (the ATE), or None
    """

    target: str
    source: str
    delta: FloatArray
    delta_model: FloatArray
    mode: str
    state_response: FloatArray
    sensor_response: FloatArray | None
    sensors: tuple[str, ...]
    direct_state: FloatArray
    direct_sensors: FloatArray | None

    @property
    def steps(self) -> int:
        """K."""
        return len(self.state_response)


def what_if(
    model: GlobalModel, target: str, source: str, delta: ArrayLike, steps: int = 1, mode: Mode = "step"
) -> WhatIfAnswer:
    """The effect on ``target``'s state and sensors of changing ``source``'s inputs by ``delta`` (raw units).

    Raises
    ------
    ConfigError
        Unknown plant (key ``target`` / ``input_of``), a source without inputs, a target whose row
        is not among the artifacts or whose row could not include the source's inputs (estimator
        ``moments``), a ``delta`` of the wrong length (key ``delta``), ``steps`` < 1 or an unknown mode.
    """
    m = model.index(target, "target")
    n = model.index(source, "input_of")
    if steps < 1:
        raise ConfigError(f"must be at least 1, got {steps}", key="steps")
    if mode not in ("step", "impulse"):
        raise ConfigError(f"must be 'step' or 'impulse', got {mode!r}", key="mode")
    U_n = model.input_dims[n]
    source_map = model.maps.get(source, PlantMap(source))
    if U_n == 0:
        with_inputs = [p for p, d in zip(model.plants, model.input_dims, strict=True) if d]
        raise ConfigError(
            f"plant '{source}' has no inputs; plants with inputs: {', '.join(with_inputs) or 'none'}", key="input_of"
        )
    if model.rows and target not in model.rows:
        raise ConfigError(
            f"the row of plant '{target}' in the model is in its own artifact, which was not given (rows of "
            f"{', '.join(model.rows)}); ask where that plant's artifacts are",
            key="target",
        )
    learned = model.learned_inputs(target)
    if learned is not None and source not in learned:
        raise ConfigError(
            f"the direct effect of the inputs of plant '{source}' on plant '{target}' is not learned: they never left "
            f"plant '{source}' (training.privacy.input_epsilon unset); ask about the inputs of "
            f"{', '.join(learned) or 'no plant'}, or set training.privacy.input_epsilon and input_moment_epsilon "
            "and re-run fedrca train",
            key="input_of",
        )
    du = np.ravel(np.asarray(delta, dtype=np.float64))
    if du.shape != (U_n,) or not np.all(np.isfinite(du)):
        names = f" ({', '.join(source_map.inputs)})" if len(source_map.inputs) == U_n else ""
        raise ConfigError(
            f"plant '{source}' has {U_n} input(s){names}; give {U_n} finite change(s), got {du.size}", key="delta"
        )
    u_scale = source_map.u_scale if source_map.u_scale is not None else np.ones(U_n)
    # raw -> model units (identified models work on standardised inputs)
    du_model = du / u_scale
    drive = model.B[:, model.input_slice(n)] @ du_model
    response = (step_response if mode == "step" else impulse_response)(model.A, drive, steps)
    cols = model.state_slice(m)
    states = np.asarray(response[:, cols])
    target_map = model.maps.get(target, PlantMap(target))
    sensors: FloatArray | None = None
    direct_sensors: FloatArray | None = None
    if target_map.C is not None:
        scale = target_map.y_scale if target_map.y_scale is not None else np.ones(len(target_map.C))
        # dy_m(k) = y_scale * C_mm dx_m(k)
        sensors = states @ target_map.C.T * scale
        direct_sensors = client_effect(target_map.C, drive[cols], scale)
    return WhatIfAnswer(
        target=target,
        source=source,
        delta=du,
        delta_model=du_model,
        mode=mode,
        state_response=states,
        sensor_response=sensors,
        sensors=target_map.sensors,
        direct_state=np.asarray(drive[cols]),
        direct_sensors=direct_sensors,
    )
