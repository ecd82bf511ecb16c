"""The CI tests' sufficient statistics: what a site adds into the secure sum, and what the server makes of it.

The pooled test needs only statistics that **add over sites**:

* **Fisher-z** needs the correlation matrix and n. Two secure sums give them exactly
  (:func:`moment_vector`, then :func:`scatter_vector` about the pooled mean)::

      round 1:  N = Σ_k n_k,  m = (Σ_k Σ_i x_ki) / N                    (counts and sums)
      round 2:  S = Σ_k Σ_i (x_ki - m)(x_ki - m)'                      (cross-products about m)
      C = D^-1/2 S D^-1/2,  D = diag(S)                                (:func:`pooled_correlation`)

  Centring at the pooled mean before the products avoids the cancellation of
  ``Σ x x' - N m m'``; the result equals the pooled data's correlation to rounding
  (``tests/causal/test_pooled.py``: 1e-9).
* **Fisher-z with noise** (``mu``-GDP per site, :func:`fedrca.privacy.mechanisms.private_scatter_vector`): each site
  standardises its columns with its own mean and standard deviation (its preprocessing,
  fixed before the release, like a plant's scaler before its training releases: the
  guarantee covers the rows given the standardiser), clips every row to the L2 norm
  ``c = clip sqrt(p)``, and adds Gaussian noise to the upper triangle of ``Σ_i z_i z_i'``::

      Δ = sqrt(2) c²                       (L2 sensitivity to replacing one row: ||z z' - z~ z~'||_F <= sqrt(2) c²)
      σ = Δ / mu                           (the Gaussian mechanism is mu-GDP)

  The server sees only the sum (noise variance K σ² per entry), projects it to a
  correlation matrix (:func:`private_correlation`) whose entries carry noise of variance
  ``τ² = K σ² / d²`` (d = mean diagonal of the summed matrix), and the Fisher-z test adds
  the noise's share to each partial correlation's variance (delta method), so that the
  noise does not pass for evidence.
* **G-square** needs the contingency tables of each query, and counts add: the sites
  agree a code book of every variable's levels (:func:`merge_codebooks`) and add their
  tables (:func:`fedrca.causal.citests.contingency_counts`) for every batch of queries.

Examples
--------
>>> import numpy as np
>>> rng = np.random.default_rng(0)
>>> parts = [rng.normal(size=(n, 3)) for n in (50, 80)]
>>> moments = sum(moment_vector(X) for X in parts)
>>> N, mean = int(moments[0]), moments[1:] / moments[0]
>>> S = sum(scatter_vector(X, mean) for X in parts)
>>> bool(np.allclose(pooled_correlation(S, 3), np.corrcoef(np.vstack(parts), rowvar=False)))
True
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

import numpy as np
from numpy.typing import ArrayLike, NDArray

from fedrca.causal.secagg import check_public_key, check_round, check_session
from fedrca.causal.wire import Message, register
from fedrca.contracts.deadletter import DeadLetterReason as Reason
from fedrca.exceptions import DataError, MessageError

__all__ = [
    "MAX_LEVELS",
    "STATISTICS",
    "LevelsReply",
    "LevelsRequest",
    "StatsRequest",
    "code_against",
    "merge_codebooks",
    "moment_vector",
    "pooled_correlation",
    "private_correlation",
    "scatter_vector",
    "triu_size",
]

FloatArray = NDArray[np.float64]
IntArray = NDArray[np.int64]
Statistic = Literal["count", "moments", "scatter", "private-scatter", "tables"]
STATISTICS: tuple[str, ...] = ("count", "moments", "scatter", "private-scatter", "tables")
#: a variable with more levels than this is not a discrete variable for G-square
MAX_LEVELS = 256
#: smallest eigenvalue kept when a noised matrix is projected to a correlation matrix
_EIGEN_FLOOR = 1e-6


# ----------------------------------------------------------------------------- site side (pure)
def triu_size(p: int) -> int:
    """Entries of the upper triangle with the diagonal, p (p + 1) / 2."""
    return p * (p + 1) // 2


def moment_vector(X: ArrayLike) -> FloatArray:
    """``[n, Σ_i x_i]`` (1 + p,) of a site's rows X (n, p)."""
    A = np.asarray(X, dtype=np.float64)
    return np.concatenate([[float(A.shape[0])], A.sum(axis=0)])


def scatter_vector(X: ArrayLike, center: ArrayLike) -> FloatArray:
    """Upper triangle (p (p + 1) / 2,) of ``Σ_i (x_i - m)(x_i - m)'`` about the pooled mean m (p,)."""
    A = np.asarray(X, dtype=np.float64) - np.asarray(center, dtype=np.float64)
    # S = (X - m)'(X - m)
    S = A.T @ A
    return S[np.triu_indices(A.shape[1])]


def merge_codebooks(level_lists: Sequence[Sequence[Sequence[str]]]) -> tuple[tuple[str, ...], ...]:
    """The code book: per variable, the sorted union of the sites' level labels."""
    if not level_lists:
        raise DataError("no site announced its levels")
    p = len(level_lists[0])
    if any(len(site) != p for site in level_lists):
        raise DataError(f"sites announced levels of different numbers of variables: {[len(s) for s in level_lists]}")
    return tuple(tuple(sorted(set().union(*(site[j] for site in level_lists)))) for j in range(p))


def code_against(labels: Sequence[str], codes: IntArray, codebook: Sequence[str]) -> IntArray:
    """A site's local codes (into ``labels``) recoded into the code book's positions."""
    position = {label: k for k, label in enumerate(codebook)}
    missing = [label for label in labels if label not in position]
    if missing:
        raise MessageError(Reason.BAD_FIELD, f"the code book lacks level(s) {missing[:5]} of this site")
    remap = np.array([position[label] for label in labels], dtype=np.int64)
    return remap[codes]


# ----------------------------------------------------------------------------- server side (pure)
def _symmetric(triu: FloatArray, p: int) -> FloatArray:
    if len(triu) != triu_size(p):
        raise DataError(f"an upper triangle of {p} variables has {triu_size(p)} entries, got {len(triu)}")
    S = np.zeros((p, p))
    S[np.triu_indices(p)] = triu
    return S + np.triu(S, 1).T


def pooled_correlation(scatter: ArrayLike, p: int) -> FloatArray:
    """C = D^-1/2 S D^-1/2 (p, p) from the upper triangle of the pooled scatter S."""
    S = _symmetric(np.asarray(scatter, dtype=np.float64), p)
    d = np.diag(S)
    if np.any(d <= 0):
        raise DataError(f"pooled variable(s) {np.flatnonzero(d <= 0).tolist()} are constant; drop them")
    s = np.sqrt(d)
    C = S / np.outer(s, s)
    np.fill_diagonal(C, 1.0)
    return C


def private_correlation(vector: ArrayLike, p: int, total_sd: float) -> tuple[FloatArray, float]:
    """The correlation matrix (p, p) and the noise variance of its entries, from the summed noised vector.

    Parameters
    ----------
    vector : ``[N, triu(Σ z z') + noise]`` summed over sites
    p : number of variables
    total_sd : standard deviation of the summed noise per entry, sqrt(K) σ

    The noised matrix is made symmetric positive definite (eigenvalues floored, a
    post-processing) and scaled to a unit diagonal; the noise variance of a correlation
    is ``(total_sd / d)²`` with d the mean diagonal before scaling (the Fisher-z test adds
    it to every partial correlation's variance: :meth:`fedrca.causal.citests.FisherZ.from_correlation`).
    """
    v = np.asarray(vector, dtype=np.float64)
    N = float(v[0])
    S = _symmetric(v[1:], p)
    d = float(np.mean(np.diag(S)))
    if N < 1 or d <= 0:
        raise DataError("the noise swamps the statistics (non-positive variance); raise epsilon or add data")
    # nearest positive definite matrix in the spectral sense, then unit diagonal
    w, V = np.linalg.eigh(S / d)
    C = (V * np.maximum(w, _EIGEN_FLOOR)) @ V.T
    s = np.sqrt(np.diag(C))
    C = C / np.outer(s, s)
    np.fill_diagonal(C, 1.0)
    return (C + C.T) / 2.0, (total_sd / d) ** 2


# ----------------------------------------------------------------------------- messages
def _labels(value: Any) -> tuple[tuple[str, ...], ...]:
    try:
        levels = tuple(tuple(str(v) for v in col) for col in value)
    except TypeError as exc:
        raise MessageError(Reason.BAD_FIELD, f"levels must be one list of labels per variable ({exc})") from None
    for j, col in enumerate(levels):
        if not col or len(set(col)) != len(col) or len(col) > MAX_LEVELS:
            raise MessageError(
                Reason.BAD_FIELD, f"variable {j}: levels must be 1..{MAX_LEVELS} distinct labels, got {len(col)}"
            )
    return levels


@register
@dataclass(frozen=True, eq=False)
class LevelsRequest(Message):
    """Server -> site (G-square): which levels does each variable take?"""

    kind: ClassVar[str] = "levels_request"
    session: str

    def __post_init__(self) -> None:
        object.__setattr__(self, "session", check_session(self.session))

    def to_dict(self) -> dict[str, Any]:
        """JSON-friendly form."""
        return {"type": self.kind, "session": self.session}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> LevelsRequest:
        """Inverse of :meth:`to_dict`."""
        return cls(session=data["session"])


@register
@dataclass(frozen=True, eq=False)
class LevelsReply(Message):
    """Site -> server (G-square): per variable id, the labels of the levels the site observed (no counts)."""

    kind: ClassVar[str] = "levels_reply"
    session: str
    levels: tuple[tuple[str, ...], ...]

    def __post_init__(self) -> None:
        object.__setattr__(self, "session", check_session(self.session))
        object.__setattr__(self, "levels", _labels(self.levels))

    def to_dict(self) -> dict[str, Any]:
        """JSON-friendly form."""
        return {"type": self.kind, "session": self.session, "levels": [list(c) for c in self.levels]}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> LevelsReply:
        """Inverse of :meth:`to_dict`."""
        return cls(session=data["session"], levels=tuple(tuple(c) for c in data["levels"]))


@register
@dataclass(frozen=True, eq=False)
class StatsRequest(Message):
    """Server -> site: add your ``statistic`` into round ``round`` of the secure sum.

    Attributes
    ----------
    session, round : the secure-aggregation session and its round (each round's masks are used once)
    roster : the K sites' public keys, in roster order
    statistic : ``count`` ([n]), ``moments`` ([n, Σx]), ``scatter`` (cross-products about
        ``center``), ``private-scatter`` (noised, needs ``clip`` and ``mu``) or ``tables``
        (contingency counts of ``queries`` under ``codebook``)
    center : (p,) float, the pooled mean (scatter)
    clip : row bound in units of sqrt(p) standard deviations (private-scatter)
    mu : the Gaussian mechanism's mu per site (private-scatter)
    queries : (Q, 2 + l) int rows (x, y, S...) (tables)
    codebook : per variable, the agreed level labels (tables)
    """

    kind: ClassVar[str] = "stats_request"
    session: str
    round: int
    roster: tuple[bytes, ...]
    statistic: Statistic
    center: FloatArray | None = None
    clip: float | None = None
    mu: float | None = None
    queries: IntArray | None = None
    codebook: tuple[tuple[str, ...], ...] | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "session", check_session(self.session))
        object.__setattr__(self, "round", check_round(self.round))
        roster = tuple(check_public_key(k) for k in self.roster)
        if len(roster) < 2:
            raise MessageError(Reason.BAD_FIELD, "a secure sum needs a roster of at least 2 sites")
        object.__setattr__(self, "roster", roster)
        if self.statistic not in STATISTICS:
            raise MessageError(Reason.BAD_FIELD, f"statistic must be one of {', '.join(STATISTICS)}")
        needs = {
            "scatter": ("center",),
            "private-scatter": ("clip", "mu"),
            "tables": ("queries", "codebook"),
        }.get(self.statistic, ())
        for name in ("center", "clip", "mu", "queries", "codebook"):
            given = getattr(self, name) is not None
            if given != (name in needs):
                raise MessageError(
                    Reason.BAD_FIELD, f"statistic {self.statistic} {'needs' if name in needs else 'takes no'} {name}"
                )
        if self.center is not None:
            c = np.array(self.center, dtype=np.float64).reshape(-1)
            if not np.all(np.isfinite(c)):
                raise MessageError(Reason.BAD_ARRAY, "the center must be finite")
            c.flags.writeable = False
            object.__setattr__(self, "center", c)
        if self.clip is not None and not (math.isfinite(self.clip) and self.clip > 0):
            raise MessageError(Reason.BAD_FIELD, f"clip must be a finite number > 0, got {self.clip!r}")
        if self.mu is not None and not self.mu > 0:
            raise MessageError(Reason.BAD_FIELD, f"mu must be > 0, got {self.mu!r}")
        if self.queries is not None:
            q = np.array(self.queries, dtype=np.int64)
            if q.ndim != 2 or q.shape[1] < 2 or (q.size and q.min() < 0):
                raise MessageError(Reason.BAD_ARRAY, f"queries must be (Q, 2 + l) ids >= 0, got shape {q.shape}")
            q.flags.writeable = False
            object.__setattr__(self, "queries", q)
        if self.codebook is not None:
            object.__setattr__(self, "codebook", _labels(self.codebook))

    def to_dict(self) -> dict[str, Any]:
        """JSON-friendly form (keys in hex; absent fields as null)."""
        return {
            "type": self.kind,
            "session": self.session,
            "round": self.round,
            "roster": [k.hex() for k in self.roster],
            "statistic": self.statistic,
            "center": None if self.center is None else [float(v) for v in self.center],
            "clip": self.clip,
            "mu": self.mu,
            "queries": None if self.queries is None else self.queries.tolist(),
            "codebook": None if self.codebook is None else [list(c) for c in self.codebook],
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> StatsRequest:
        """Inverse of :meth:`to_dict`."""
        queries = data["queries"]
        return cls(
            session=data["session"],
            round=data["round"],
            roster=tuple(bytes.fromhex(k) for k in data["roster"]),
            statistic=data["statistic"],
            center=data["center"],
            clip=data["clip"],
            mu=data["mu"],
            queries=None if queries is None else np.array(queries, dtype=np.int64).reshape(len(queries), -1),
            codebook=None if data["codebook"] is None else tuple(tuple(c) for c in data["codebook"]),
        )
