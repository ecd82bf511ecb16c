"""What-if (counterfactual) queries on the learned global model, and its transfer function (pure, no I/O).

The federated training (:mod:`fedrca.training.server`) learns the global linear model of
the plants' states and inputs (P3),

    x(t) = A x(t-1) + B u(t-1) + w(t),        y_m(t) = C_mm x_m(t) + v_m(t),

with block ``A_mn`` (plant n's state -> plant m's state) and ``B_mn`` (plant n's inputs ->
plant m's state); ``C_mm`` is plant m's own measurement map (its proprietary model; the
plant's artifact carries it for its own queries). By Pearl's abduction-action-prediction
for a linear system (P3, proposition 4.1) the average treatment effect of setting
``u_n(t-1)`` to ``u_n + du`` instead of ``u_n`` on plant m's measurements is

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

Only the transfer function ``G(z) = C (zI - A)^-1 B`` is identified by input-output
data (a change of state basis T gives ``(T A T^-1, T B, C T^-1)`` with the same G), so
learned and true systems are compared by it: :func:`transfer_function` (poles,
transmission zeros, singular values on the unit circle), :func:`pole_distance` and
:func:`channel_zeros`.

Examples
--------
>>> A = np.array([[0.5, 0.0], [0.3, 0.6]]); B = np.array([[1.0], [0.0]])
>>> step_response(A, B @ [2.0], 3).round(3).tolist()     # input of state 1, held for 3 steps
[[2.0, 0.0], [3.0, 0.6], [3.5, 1.26]]
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

import numpy as np
import scipy.linalg
import scipy.optimize
from numpy.typing import ArrayLike, NDArray

from fedrca.contracts.artifacts import SERVER, ParameterArtifact
from fedrca.exceptions import ArtifactError, ConfigError, ModelError

__all__ = [
    "GlobalModel",
    "PlantMap",
    "TransferFunction",
    "WhatIfAnswer",
    "average_treatment_effect",
    "channel_zeros",
    "client_effect",
    "impulse_response",
    "invariant_zeros",
    "pole_distance",
    "step_response",
    "transfer_function",
    "what_if",
]

FloatArray = NDArray[np.float64]
ComplexArray = NDArray[np.complex128]
Mode = Literal["step", "impulse"]


# -- the model --------------------------------------------------------------------------------------
@dataclass(frozen=True)
class PlantMap:
    """One plant's side of the queries (from its artifact).

    Attributes
    ----------
    name : plant name
    C : (D, P) measurement map in model units (None when the artifact has none)
    y_scale : (D,) raw units per model unit of each sensor
    u_scale : (U,) raw units per model unit of each input
    sensors, inputs : column names (may be empty when unknown)
    bias : (P,) the client's bias phi, or None
    A, B : (P, P), (P, U) the plant's own transition and input blocks (its proprietary model), or None
    """

    name: str
    C: FloatArray | None = None
    y_scale: FloatArray | None = None
    u_scale: FloatArray | None = None
    sensors: tuple[str, ...] = ()
    inputs: tuple[str, ...] = ()
    bias: FloatArray | None = None
    A: FloatArray | None = None
    B: FloatArray | None = None

    @classmethod
    def from_artifact(cls, artifact: ParameterArtifact) -> PlantMap:
        """The what-if arrays of a plant artifact (older artifacts have none: C is then None)."""
        arrays = artifact.arrays

        def get(name: str) -> FloatArray | None:
            return None if name not in arrays else np.asarray(arrays[name], dtype=np.float64)

        schema = artifact.manifest.get("schema") or {}
        return cls(
            name=artifact.plant,
            C=get("whatif.C"),
            y_scale=get("whatif.y_scale"),
            u_scale=get("whatif.u_scale"),
            sensors=tuple(str(s) for s in schema.get("sensors", []) or []),
            inputs=tuple(str(s) for s in schema.get("inputs", []) or []),
            bias=get("bias"),
            A=get("whatif.A"),
            B=get("whatif.B"),
        )


@dataclass(frozen=True)
class GlobalModel:
    """The learned global linear model: plants, block sizes, A (S, S), B (S, sum U) and the plants' maps.

    Examples
    --------
    >>> model = GlobalModel(("a", "b"), (1, 1), (1, 0), np.array([[0.5, 0.0], [0.4, 0.5]]), np.array([[1.0], [0.0]]))
    >>> what_if(model, "b", "a", [1.0], steps=2).state_response.round(2).tolist()
    [[0.0], [0.4]]
    """

    plants: tuple[str, ...]
    state_dims: tuple[int, ...]
    input_dims: tuple[int, ...]
    A: FloatArray
    B: FloatArray
    maps: Mapping[str, PlantMap] = field(default_factory=dict)
    version: str = ""
    local: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        S, U = sum(self.state_dims), sum(self.input_dims)
        if len(self.plants) != len(self.state_dims) or len(self.plants) != len(self.input_dims):
            raise ModelError("the global model needs one state and one input dimension per plant")
        if np.shape(self.A) != (S, S) or np.shape(self.B) != (S, U):
            raise ModelError(
                f"A must be ({S}, {S}) and B ({S}, {U}) for state dims {self.state_dims} and input dims "
                f"{self.input_dims}, got {np.shape(self.A)} and {np.shape(self.B)}"
            )

    @classmethod
    def from_artifacts(
        cls,
        server: ParameterArtifact,
        plants: Mapping[str, ParameterArtifact] | None = None,
        local_blocks: bool = False,
    ) -> GlobalModel:
        """The model of a training run's server artifact (+ the plants' artifacts for measurement units).

        By default every block is the server's: its instrumental-variables fit estimates the
        diagonal and the cross blocks jointly, so they belong together (on TEP the server's A
        has spectral radius 0.86 while the plants' own A_mm with the server's cross blocks has
        1.33: a k-step answer would grow without bound; docs/whatif.md). With ``local_blocks`` a
        plant whose artifact carries its own model (``whatif.A``, ``whatif.B``) contributes its
        diagonal blocks A_mm, B_mm in place of the server's estimates of them: P3's global
        model, the plants' own blocks with the server's cross blocks (``local`` lists those
        plants); right when the plants' models are the true local ones (the synthetic case).

        Raises
        ------
        ArtifactError
            When the server artifact carries no input matrix (trained before inputs were learned,
            or no plant declares inputs) or is inconsistent.
        """
        if server.plant != SERVER:
            raise ArtifactError(f"'{server.plant}' is a plant artifact; the what-if needs the server's ({SERVER})")
        arrays = server.arrays
        names = server.manifest.get("plants")
        if "A" not in arrays or "state_dims" not in arrays or not names:
            raise ArtifactError(f"server artifact {server.version}: no 'A'/'state_dims'/plants; re-run fedrca train")
        if server.manifest.get("estimator") == "moments":
            raise ArtifactError(
                f"server artifact {server.version} was trained with estimator 'moments', which estimates A "
                "from private lag moments but not the input effects B; train with estimator iv to ask "
                "what-if questions (docs/whatif.md)"
            )
        if "B" not in arrays or "input_dims" not in arrays:
            raise ArtifactError(
                f"server artifact {server.version} carries no input matrix B: it was trained without control "
                "inputs (by an older fedrca, or no plant declares inputs:); declare the plants' inputs in the "
                "configuration and re-run fedrca train"
            )
        maps = {name: PlantMap.from_artifact(art) for name, art in (plants or {}).items() if name != SERVER}
        try:
            model = cls(
                plants=tuple(str(n) for n in names),
                state_dims=tuple(int(d) for d in np.asarray(arrays["state_dims"]).ravel()),
                input_dims=tuple(int(d) for d in np.asarray(arrays["input_dims"]).ravel()),
                A=np.asarray(arrays["A"], dtype=np.float64),
                B=np.asarray(arrays["B"], dtype=np.float64),
                maps=maps,
                version=server.version,
            )
        except ModelError as exc:
            raise ArtifactError(f"server artifact {server.version} is inconsistent: {exc}") from None
        return model.with_local_blocks() if local_blocks else model

    def with_local_blocks(self) -> GlobalModel:
        """The model with each plant's own A_mm (and B_mm) from its map in place of the server's (when present).

        Raises
        ------
        ArtifactError
            When a plant's own blocks do not fit the server's block sizes (artifacts of different runs).
        """
        A, B = self.A.copy(), self.B.copy()
        local = []
        for m, name in enumerate(self.plants):
            pm = self.maps.get(name)
            if pm is None or pm.A is None:
                continue
            rows, cols = self.state_slice(m), self.input_slice(m)
            P, U = self.state_dims[m], self.input_dims[m]
            if pm.A.shape != (P, P) or (pm.B is not None and pm.B.shape != (P, U)):
                raise ArtifactError(
                    f"plant '{name}': its own model has {pm.A.shape[0]} states, the server's model {P}; "
                    "the artifacts come from different training runs: re-run fedrca train"
                )
            A[rows, rows] = pm.A
            if pm.B is not None:
                B[rows, cols] = pm.B
            local.append(name)
        return GlobalModel(self.plants, self.state_dims, self.input_dims, A, B, self.maps, self.version, tuple(local))

    @property
    def spectral_radius(self) -> float:
        """max |eigenvalue of A|: below 1 the k-step response settles, at or above it grows."""
        return float(np.max(np.abs(np.linalg.eigvals(self.A)))) if self.A.size else 0.0

    def index(self, plant: str, role: str = "plant") -> int:
        """Block index of ``plant``; ConfigError naming the known plants otherwise."""
        if plant not in self.plants:
            raise ConfigError(f"unknown plant '{plant}'; plants are {', '.join(self.plants)}", key=role)
        return self.plants.index(plant)

    def state_slice(self, m: int) -> slice:
        """Columns of plant m's states in x."""
        o = np.cumsum((0, *self.state_dims))
        return slice(int(o[m]), int(o[m + 1]))

    def input_slice(self, n: int) -> slice:
        """Columns of plant n's inputs in u."""
        o = np.cumsum((0, *self.input_dims))
        return slice(int(o[n]), int(o[n + 1]))

    def input_block(self, m: int, n: int) -> FloatArray:
        """B_mn (P_m, U_n)."""
        return np.asarray(self.B[self.state_slice(m), self.input_slice(n)])

    def measurement_matrix(self) -> FloatArray | None:
        """Block-diagonal C (sum D, S) in model units, or None when a plant's map is missing."""
        blocks = []
        for name in self.plants:
            pm = self.maps.get(name)
            if pm is None or pm.C is None:
                return None
            blocks.append(pm.C)
        return np.asarray(scipy.linalg.block_diag(*blocks))


# -- responses --------------------------------------------------------------------------------------
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
        Unknown plant (key ``target`` / ``input_of``), a source without inputs, a ``delta`` of the
        wrong length (key ``delta``), ``steps`` < 1 or an unknown mode.
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


# -- the transfer function ------------------------------------------------------------------------
@dataclass(frozen=True)
class TransferFunction:
    """Poles, transmission zeros and singular values of G(z) = C (zI - A)^-1 B on the unit circle.

    Attributes
    ----------
    poles : (S,) eigenvalues of A
    zeros : (Z,) finite transmission zeros (often none for a non-square G)
    frequencies : (F,) omega in [0, pi] (radians per sample)
    singular_values : (F, min(D, U)) singular values of G(e^{j omega}), largest first
    """

    poles: ComplexArray
    zeros: ComplexArray
    frequencies: FloatArray
    singular_values: FloatArray

    @property
    def stable(self) -> bool:
        """True when every pole lies strictly inside the unit circle."""
        return bool(np.all(np.abs(self.poles) < 1.0))


def _finite_pencil_eigenvalues(A: FloatArray, B: FloatArray, C: FloatArray) -> ComplexArray:
    """Finite z with det([[A - zI, B], [C, 0]]) = 0 for a square system (D = U)."""
    S, U = B.shape
    M = np.block([[A, B], [C, np.zeros((C.shape[0], U))]])
    N = np.zeros_like(M)
    N[:S, :S] = np.eye(S)
    alpha, beta = scipy.linalg.eigvals(M, N, homogeneous_eigvals=True)
    scale = np.abs(alpha) + np.abs(beta)
    finite = np.abs(beta) > 1e-9 * np.where(scale > 0, scale, 1.0)
    return np.asarray(alpha[finite] / beta[finite], dtype=np.complex128)


def invariant_zeros(A: ArrayLike, B: ArrayLike, C: ArrayLike, seed: int = 0, tol: float = 1e-6) -> ComplexArray:
    """Finite transmission zeros of (A, B, C, 0).

    Square systems: the finite generalized eigenvalues of the Rosenbrock pencil. Non-square
    systems: a zero of G is a zero of every square projection (``W'G`` or ``G V``), while a
    random projection adds zeros of its own; the zeros common to two seeded projections
    (within ``tol``, relative) are returned. A generic tall or wide system has none.

    Examples
    --------
    >>> A = np.array([[0.2, 0.0], [0.0, 0.9]]); B = np.array([[1.0], [1.0]]); C = np.array([[1.0, -0.5]])
    >>> invariant_zeros(A, B, C).real.round(6).tolist()     # G(z) = 0.5 (z - 1.6) / ((z - 0.2)(z - 0.9))
    [1.6]
    """
    A_arr, B_arr, C_arr = (np.asarray(a, dtype=np.float64) for a in (A, B, C))
    p, m = C_arr.shape[0], B_arr.shape[1]
    if p == m:
        return _finite_pencil_eigenvalues(A_arr, B_arr, C_arr)
    rng = np.random.default_rng(seed)
    candidates = []
    for _ in range(2):
        if p > m:
            W = rng.standard_normal((p, m))
            candidates.append(_finite_pencil_eigenvalues(A_arr, B_arr, W.T @ C_arr))
        else:
            V = rng.standard_normal((m, p))
            candidates.append(_finite_pencil_eigenvalues(A_arr, B_arr @ V, C_arr))
    first, second = candidates
    common = [z for z in first if second.size and np.min(np.abs(second - z)) <= tol * (1.0 + abs(z))]
    return np.asarray(common, dtype=np.complex128)


def channel_zeros(A: ArrayLike, B: ArrayLike, C: ArrayLike) -> list[list[ComplexArray]]:
    """Zeros of every single-input single-output channel G_ij(z) = c_i (zI - A)^-1 b_j (``[i][j]``)."""
    A_arr, B_arr, C_arr = (np.asarray(a, dtype=np.float64) for a in (A, B, C))
    return [
        [_finite_pencil_eigenvalues(A_arr, B_arr[:, [j]], C_arr[[i], :]) for j in range(B_arr.shape[1])]
        for i in range(C_arr.shape[0])
    ]


def transfer_function(A: ArrayLike, B: ArrayLike, C: ArrayLike, n_frequencies: int = 128) -> TransferFunction:
    """Poles, zeros and the singular-value spectrum of ``G(z) = C (zI - A)^-1 B`` for ``z = e^{j omega}``.

    Examples
    --------
    >>> tf = transfer_function([[0.5]], [[1.0]], [[2.0]], n_frequencies=2)
    >>> tf.poles.real.tolist(), tf.stable, tf.singular_values[:, 0].round(3).tolist()   # |2 / (z - 0.5)|
    ([0.5], True, [4.0, 1.333])
    """
    A_arr, B_arr, C_arr = (np.asarray(a, dtype=np.float64) for a in (A, B, C))
    S = len(A_arr)
    omega = np.linspace(0.0, np.pi, n_frequencies)
    values = []
    for w in omega:
        # G(e^{jw}) = C (e^{jw} I - A)^-1 B
        G = C_arr @ np.linalg.solve(np.exp(1j * w) * np.eye(S) - A_arr, B_arr)
        values.append(np.linalg.svd(G, compute_uv=False))
    return TransferFunction(
        poles=np.asarray(np.linalg.eigvals(A_arr), dtype=np.complex128),
        zeros=invariant_zeros(A_arr, B_arr, C_arr),
        frequencies=omega,
        singular_values=np.asarray(values, dtype=np.float64),
    )


def pole_distance(learned: Sequence[complex] | ComplexArray, true: Sequence[complex] | ComplexArray) -> float:
    """Largest distance between matched poles (optimal one-to-one matching of two equally long sets).

    Examples
    --------
    >>> pole_distance([0.5, 0.1 + 0.2j, 0.1 - 0.2j], [0.1 - 0.25j, 0.52, 0.1 + 0.25j])
    0.05
    """
    a, b = np.ravel(np.asarray(learned, dtype=np.complex128)), np.ravel(np.asarray(true, dtype=np.complex128))
    if a.shape != b.shape:
        raise ModelError(f"pole sets differ in size: {a.size} learned vs {b.size} true")
    if not a.size:
        return 0.0
    cost = np.abs(a[:, None] - b[None, :])
    rows, cols = scipy.optimize.linear_sum_assignment(cost)
    return round(float(cost[rows, cols].max()), 12)
