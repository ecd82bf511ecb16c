"""The learned global linear model of the plants' states and inputs, read from a training run's artifacts (pure).

The federated training (:mod:`fedrca.training.server`) learns

    x(t) = A x(t-1) + B u(t-1) + w(t),        y_m(t) = C_mm x_m(t) + v_m(t),

with block ``A_mn`` (plant n's state -> plant m's state) and ``B_mn`` (plant n's inputs ->
plant m's state); ``C_mm`` is plant m's own measurement map (its proprietary model; the
plant's artifact carries it for its own queries, :class:`PlantMap`). :class:`GlobalModel`
holds A, B, the block sizes and the plants' maps; :meth:`GlobalModel.from_artifacts` reads
them from the server's and the plants' artifacts (already loaded: no file is read here) and
refuses artifacts without a learned B, naming the fix.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np
import scipy.linalg
from numpy.typing import NDArray

from fedrca.contracts.artifacts import SERVER, ParameterArtifact
from fedrca.exceptions import ArtifactError, ConfigError, ModelError

__all__ = ["FloatArray", "GlobalModel", "PlantMap"]

FloatArray = NDArray[np.float64]


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
    row_A, row_B : (P, S), (P, sum U) the plant's own estimate of its row of the global model
        (estimator ``moments``, :mod:`fedrca.training.varx`), or None
    row_inputs, row_candidates : (M,) 1 for the plants whose inputs are in that row, and whose
        inputs it could include (the plant's own and the released ones), or None
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
    row_A: FloatArray | None = None
    row_B: FloatArray | None = None
    row_inputs: FloatArray | None = None
    row_candidates: FloatArray | None = None

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
            row_A=get("whatif.row_A"),
            row_B=get("whatif.row_B"),
            row_inputs=get("whatif.row_inputs"),
            row_candidates=get("whatif.row_candidates"),
        )


@dataclass(frozen=True)
class GlobalModel:
    """The learned global linear model: plants, block sizes, A (S, S), B (S, sum U) and the plants' maps.

    Examples
    --------
    >>> model = GlobalModel(("a", "b"), (1, 1), (1, 0), np.array([[0.5, 0.0], [0.4, 0.5]]), np.array([[1.0], [0.0]]))
    >>> model.input_block(1, 0).tolist(), model.spectral_radius     # B_ba: b has no direct input push
    ([[0.0]], 0.5)
    """

    plants: tuple[str, ...]
    state_dims: tuple[int, ...]
    input_dims: tuple[int, ...]
    A: FloatArray
    B: FloatArray
    maps: Mapping[str, PlantMap] = field(default_factory=dict)
    version: str = ""
    local: tuple[str, ...] = ()
    rows: tuple[str, ...] = ()

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

        With estimator ``moments`` the rows of A and B are the plants': each plant learned its
        row ``[A_m. B_m.]`` privately from its exact states and inputs (``whatif.row_*`` of its
        artifact, :mod:`fedrca.training.varx`); a plant whose artifact is not given keeps the
        server's row of A and no input effects (``rows`` lists the plants whose rows are theirs).

        Raises
        ------
        ArtifactError
            When the server artifact carries no input matrix (trained before inputs were learned,
            or no plant declares inputs), no plant artifact carries its row (estimator ``moments``)
            or the artifacts are inconsistent.
        """
        if server.plant != SERVER:
            raise ArtifactError(f"'{server.plant}' is a plant artifact; the what-if needs the server's ({SERVER})")
        arrays = server.arrays
        names = server.manifest.get("plants")
        if "A" not in arrays or "state_dims" not in arrays or not names:
            raise ArtifactError(f"server artifact {server.version}: no 'A'/'state_dims'/plants; re-run fedrca train")
        moments = server.manifest.get("estimator") == "moments"
        if "input_dims" not in arrays or ("B" not in arrays and not moments):
            raise ArtifactError(
                f"server artifact {server.version} carries no input matrix B: it was trained without control "
                "inputs (by an older fedrca, or no plant declares inputs:); declare the plants' inputs in the "
                "configuration and re-run fedrca train"
            )
        maps = {name: PlantMap.from_artifact(art) for name, art in (plants or {}).items() if name != SERVER}
        state_dims = tuple(int(d) for d in np.asarray(arrays["state_dims"]).ravel())
        input_dims = tuple(int(d) for d in np.asarray(arrays["input_dims"]).ravel())
        A = np.asarray(arrays["A"], dtype=np.float64)
        B = np.zeros((A.shape[0], sum(input_dims))) if moments else np.asarray(arrays["B"], dtype=np.float64)
        try:
            model = cls(
                plants=tuple(str(n) for n in names),
                state_dims=state_dims,
                input_dims=input_dims,
                A=A,
                B=B,
                maps=maps,
                version=server.version,
            )
        except ModelError as exc:
            raise ArtifactError(f"server artifact {server.version} is inconsistent: {exc}") from None
        if moments:
            model = model.with_rows()
            if not model.rows:
                raise ArtifactError(
                    f"server artifact {server.version} was trained with estimator 'moments', whose rows of A and "
                    "B the plants learn: none of the plant artifacts given carries its row (whatif.row_A); pass the "
                    "run's directory with the plants' artifacts, or re-run fedrca train (an older fedrca did not "
                    "learn them)"
                )
        return model.with_local_blocks() if local_blocks else model

    def with_rows(self) -> GlobalModel:
        """The model with each plant's own estimate of its row (``whatif.row_A``, ``whatif.row_B``) where present.

        Raises
        ------
        ArtifactError
            When a plant's row does not fit the server's block sizes (artifacts of different runs).
        """
        A, B = self.A.copy(), self.B.copy()
        rows = []
        for m, name in enumerate(self.plants):
            pm = self.maps.get(name)
            if pm is None or pm.row_A is None or pm.row_B is None:
                continue
            r = self.state_slice(m)
            if pm.row_A.shape != (r.stop - r.start, A.shape[1]) or pm.row_B.shape != (r.stop - r.start, B.shape[1]):
                raise ArtifactError(
                    f"plant '{name}': its row has shape {pm.row_A.shape}, the server's model "
                    f"({r.stop - r.start}, {A.shape[1]}); the artifacts come from different training runs: "
                    "re-run fedrca train"
                )
            A[r], B[r] = pm.row_A, pm.row_B
            rows.append(name)
        return GlobalModel(
            self.plants, self.state_dims, self.input_dims, A, B, self.maps, self.version, self.local, tuple(rows)
        )

    def learned_inputs(self, target: str) -> tuple[str, ...] | None:
        """Plants whose inputs the target's row could include (None: every block is the server's, all of them)."""
        if target not in self.rows:
            return None
        pm = self.maps[target]
        if pm.row_candidates is None:
            return None
        return tuple(p for p, flag in zip(self.plants, np.ravel(pm.row_candidates), strict=True) if flag)

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
        return GlobalModel(
            self.plants, self.state_dims, self.input_dims, A, B, self.maps, self.version, tuple(local), self.rows
        )

    @property
    def spectral_radius(self) -> float:
        """max |eigenvalue of A|: below 1 the k-step response settles, at or above it grows."""
        return float(np.max(np.abs(np.linalg.eigvals(self.A)))) if self.A.size else 0.0

    def reach(self, source: str) -> tuple[str, ...]:
        """Plants a change of ``source``'s inputs reaches: those B[:, source] pushes, and on through A's blocks."""
        n = self.index(source, "input_of")
        pushed = np.any(self.B[:, self.input_slice(n)] != 0.0, axis=1)
        reached = {m for m in range(len(self.plants)) if np.any(pushed[self.state_slice(m)])}
        frontier = set(reached)
        while frontier:
            new = {
                m
                for m in range(len(self.plants))
                if m not in reached
                and any(np.any(self.A[self.state_slice(m), self.state_slice(k)] != 0.0) for k in frontier)
            }
            reached |= new
            frontier = new
        return tuple(p for i, p in enumerate(self.plants) if i in reached)

    def spectral_radius_from(self, source: str) -> float:
        """Spectral radius of A on the plants ``source``'s inputs reach (what its k-step response passes through).

        Examples
        --------
        >>> A = np.array([[0.5, 0.0], [0.0, 3.0]]); B = np.array([[1.0], [0.0]])
        >>> GlobalModel(("a", "b"), (1, 1), (1, 0), A, B).spectral_radius_from("a")   # b is never reached
        0.5
        """
        reached = [self.plants.index(p) for p in self.reach(source)]
        if not reached:
            return 0.0
        idx = np.concatenate([np.arange(self.state_slice(m).start, self.state_slice(m).stop) for m in reached])
        sub = self.A[np.ix_(idx, idx)]
        return float(np.max(np.abs(np.linalg.eigvals(sub)))) if sub.size else 0.0

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
