"""Each plant's row of the global model with inputs, ``[A_m. B_m.]``, learned privately (pure core).

The private-moments protocol (:mod:`fedrca.training.moments`) releases every plant's
measurement states once and their lag moments once, and the server solves for A. With
control inputs the global model is

    x(t+1) = A x(t) + B u(t) + w(t),        q(t) = [x(t); u(t)],   x(t+1) = [A B] q(t) + w(t),

and a what-if query on plant m's sensors needs plant m's *row* of it, ``[A_m. B_m.]``
(P3: the target plant answers it). Plant m learns that row where its data are, so its own
states and inputs enter exactly and nothing about the row leaves it:

1. **inputs, once** (optional, ``training.privacy.input_epsilon``): a plant may release its
   inputs ``u(t)`` clipped to L2 norm ``c_u`` with Laplace noise (pure epsilon, as its states,
   :func:`~fedrca.privacy.mechanisms.release_states`), so the other plants can condition on them;
   without it each row includes only the plant's own inputs.
2. **own moments, once** (:func:`own_moments`): the lag moments ``sum_t q_m(t) q_m(t-j)'``,
   j = 0..L, of the plant's own states and inputs. The state-state part is copied from the
   plant's moments release (post-processing); the parts with inputs are a new Gaussian release
   (``training.privacy.input_moment_epsilon``, L2 sensitivity :func:`own_input_sensitivity`).
   The server forwards them to the other plants (post-processing).
3. **the row** (:func:`fit_row`): plant m solves the lagged normal (Yule-Walker) equations

       Gamma_j[x_m, K] = [A B]_m,K Gamma_{j-1}[K, K],        j in J (1..L, or 2..L under feedback)

   over the regressors K = its own q_m and those of the other plants whose block is
   significant. Each block of Gamma comes from the best source the plant has: its own block
   exactly (lag 0 minus its measurement-noise covariance), its cross blocks from its exact series
   against the other plant's released one (de-attenuated: one plant's noise, averaging out with
   T), another plant's own block from that plant's released own moments, and a block between
   two other plants from their released series. Standard errors propagate the known noise of
   every source by simulation (fixed seed) plus the sampling error of a VARX(1); a plant n
   enters the row when the Wald test of its block ``[A_mn B_mn]`` rejects zero at the
   family-wise level of the learned graph (:mod:`fedrca.rca.graph`), after which the row is
   refitted on the kept plants.

The row stays in the plant's artifact (private ``whatif.*`` arrays) and answers the what-if
queries whose target is that plant (:mod:`fedrca.whatif`). Nothing here releases anything:
the two releases are the clients' (:class:`~fedrca.training.client.Client`), every other
step is post-processing of them or private to the plant.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import scipy.stats
from numpy.typing import NDArray

from fedrca.exceptions import DataError, ModelError
from fedrca.privacy.mechanisms import clip_rows
from fedrca.training.moments import attenuation, released_noise

__all__ = [
    "OwnMoments",
    "PublicSeries",
    "RowEstimate",
    "fit_row",
    "lagged_q",
    "own_input_sensitivity",
    "own_moments",
    "public_series",
]

FloatArray = NDArray[np.float64]


def lagged_q(x: FloatArray, v: FloatArray | None) -> FloatArray:
    """q(t) = [x(t); u(t)] from states x (W, P) and inputs aligned with them, ``v(t) = u(t-1)`` (W, U).

    ``u(t) = v(t+1)``, so q has W - 1 rows and ``x(t+1) = [A B] q(t) + w(t)``.

    Examples
    --------
    >>> lagged_q(np.array([[1.0], [2.0], [3.0]]), np.array([[9.0], [10.0], [11.0]])).tolist()
    [[1.0, 10.0], [2.0, 11.0]]
    """
    X = np.asarray(x, dtype=np.float64)
    if v is None or not np.shape(v)[1]:
        return np.asarray(X[:-1])
    return np.hstack([X[:-1], np.asarray(v, dtype=np.float64)[1:]])


def _lagged(a: FloatArray, b: FloatArray, j: int, lags: int) -> FloatArray:
    """sum_t a(t) b(t-j)' over t = L .. T-1-L (the same rows for every |j| <= L)."""
    T = len(a)
    return np.asarray(a[lags : T - lags].T @ b[lags - j : T - lags - j])


def own_input_sensitivity(clip_x: float, clip_u: float, lags: int) -> float:
    """L2 sensitivity of the input parts of :func:`own_moments` to replacing one record (q(t)).

    Record t enters ``sum_s q(s) q(s-j)'`` at s = t and s = t + j: the state-input block of
    lag 0 by at most ``2 c_x c_u``, of lags 1..L by ``4 c_x c_u`` (twice), the input-state block
    of lags 1..L by ``4 c_x c_u`` (its lag 0 is the transpose of the state-input one, not
    released twice), the input-input block by ``2 c_u^2`` (lag 0) and ``4 c_u^2`` (lags 1..L).

    Examples
    --------
    >>> round(own_input_sensitivity(1.0, 1.0, 0), 4)     # lag 0 only: 2 c_x c_u and 2 c_u^2
    2.8284
    """
    cx, cu = clip_x * clip_u, clip_u * clip_u
    return math.sqrt((2 * cx) ** 2 + 2 * lags * (4 * cx) ** 2 + (2 * cu) ** 2 + lags * (4 * cu) ** 2)


@dataclass(frozen=True)
class OwnMoments:
    """A plant's released own-block lag moments of q = [x; u], normalised by the rows summed.

    Attributes
    ----------
    plant : whose
    state_dim, input_dim : P, U (U = 0: the inputs were not released, only the state block)
    gammas : (L+1, P+U, P+U) Gamma_j = mean_t q(t) q(t-j)' for j = 0..L (lag 0 minus the
        measurement-noise covariance in the state block)
    state_sigma : Gaussian noise per entry of the state block (normalised)
    input_sigma : Gaussian noise per entry of the blocks with inputs (normalised)
    """

    plant: str
    state_dim: int
    input_dim: int
    gammas: FloatArray
    state_sigma: float
    input_sigma: float

    @property
    def lags(self) -> int:
        """L."""
        return len(self.gammas) - 1

    def noise_sd(self) -> FloatArray:
        """(P+U, P+U) noise per entry of every lag's matrix."""
        P = self.state_dim
        sd = np.full(self.gammas.shape[1:], self.input_sigma)
        sd[:P, :P] = self.state_sigma
        return sd


def own_moments(
    plant: str,
    states: FloatArray,
    inputs: FloatArray | None,
    state_block: FloatArray,
    state_sigma: float,
    *,
    clip_x: float,
    clip_u: float,
    lags: int,
    mu: float,
    rng: np.random.Generator,
) -> OwnMoments:
    """The plant's own-block moments of q: the state block as released, the input blocks newly noised.

    Parameters
    ----------
    plant : name
    states : (W, P) measurement states; inputs : (W, U) inputs aligned with them (``u(t-1)``) or None
    state_block : (L+1, P, P) the plant's released own state moments, normalised (its moments release)
    state_sigma : their Gaussian noise per entry (normalised)
    clip_x, clip_u : L2 bounds of a state and an input vector
    lags : L
    mu : GDP parameter of the release of the input blocks (inf = no noise)
    rng : noise
    """
    P = int(np.shape(states)[1])
    if inputs is None or not np.shape(inputs)[1]:
        return OwnMoments(plant, P, 0, np.asarray(state_block, dtype=np.float64).copy(), state_sigma, 0.0)
    X, _ = clip_rows(np.asarray(states, dtype=np.float64), clip_x)
    V, _ = clip_rows(np.asarray(inputs, dtype=np.float64), clip_u)
    q = lagged_q(X, V)
    if 2 * lags + 2 >= len(q):
        raise DataError(f"plant '{plant}': {len(q)} samples are too few for {lags} moment lags")
    n = len(q) - 2 * lags
    sigma = 0.0 if math.isinf(mu) else own_input_sensitivity(clip_x, clip_u, lags) / mu
    gammas = np.stack([_lagged(q, q, j, lags) for j in range(lags + 1)])
    if sigma > 0.0:
        noise = sigma * rng.standard_normal(gammas.shape)
        # lag 0 is symmetric: its input-state block is the transpose of the state-input one (one release)
        noise[0, P:, :P] = noise[0, :P, P:].T
        noise[0, P:, P:] = np.triu(noise[0, P:, P:]) + np.triu(noise[0, P:, P:], 1).T
        gammas += noise
    gammas /= n
    gammas[:, :P, :P] = state_block
    return OwnMoments(plant, P, gammas.shape[1] - P, gammas, state_sigma, sigma / n)


@dataclass(frozen=True)
class PublicSeries:
    """Another plant's released series as this plant uses them (de-attenuated: clipped to the bound, / kappa).

    Attributes
    ----------
    x : (W, P) states; v : (W, U) inputs aligned with them (``u(t-1)``), or None (not released)
    x_var, v_var : noise variance per coordinate of x and v (public: from the release's scale and bound)
    """

    x: FloatArray
    v: FloatArray | None
    x_var: float
    v_var: float = 0.0

    @property
    def q(self) -> FloatArray:
        """q(t) = [x(t); u(t)] (W - 1 rows)."""
        return lagged_q(self.x, self.v)

    @property
    def q_var(self) -> FloatArray:
        """Noise variance per coordinate of q."""
        U = 0 if self.v is None else self.v.shape[1]
        return np.concatenate([np.full(self.x.shape[1], self.x_var), np.full(U, self.v_var)])


def public_series(
    x: FloatArray,
    x_scale: float,
    x_clip: float,
    v: FloatArray | None = None,
    v_scale: float = 0.0,
    v_clip: float = 0.0,
    bound_factor: float = 0.5,
) -> PublicSeries:
    """Released states (and inputs) as a receiver uses them: clipped to a public bound, divided by the attenuation.

    The bound is ``clip + bound_factor sqrt(2 d) scale`` (as the moments release,
    :meth:`~fedrca.training.moments.MomentSettings.others_bound`); ``kappa`` and the noise left
    after clipping come from the public scale and bound only (:func:`~fedrca.training.moments.attenuation`).
    """

    def one(a: FloatArray, scale: float, clip: float) -> tuple[FloatArray, float]:
        a = np.asarray(a, dtype=np.float64)
        if scale == 0.0:
            return a, 0.0
        d = a.shape[1]
        bound = clip + bound_factor * math.sqrt(2.0 * d) * scale
        kappa = attenuation(scale, bound, d)
        clipped, _ = clip_rows(a, bound)
        return clipped / kappa, released_noise(scale, bound, d) / kappa**2

    xs, x_var = one(x, x_scale, x_clip)
    if v is None or not np.shape(v)[1]:
        return PublicSeries(xs, None, x_var)
    vs, v_var = one(v, v_scale, v_clip)
    return PublicSeries(xs, vs, x_var, v_var)


@dataclass(frozen=True)
class RowEstimate:
    """Plant m's row of the global model and how it was chosen.

    Attributes
    ----------
    A : (P_m, S) row of A (zeros outside the plants in the row); A_stderr likewise (NaN outside)
    B : (P_m, sum U) row of B (zeros for inputs not in the row); B_stderr likewise
    parents : other plants whose block entered the row (Wald test)
    inputs_of : plants whose inputs are in the row (the plant itself when it has inputs, and the
        parents whose inputs were released)
    pvalues : other plant -> p-value of its block's Wald test in the full fit
    """

    A: FloatArray
    B: FloatArray
    A_stderr: FloatArray
    B_stderr: FloatArray
    parents: tuple[str, ...]
    inputs_of: tuple[str, ...]
    pvalues: dict[str, float] = field(default_factory=dict)


def _yule_walker_rows(G: Sequence[FloatArray], rows: int, equations: Sequence[int]) -> FloatArray:
    """Least squares over j in ``equations`` of ``Gamma_j[:rows] = beta Gamma_{j-1}`` (rows: the target's states).

    ``beta [Gamma_{j-1}]_j = [Gamma_j[:rows]]_j``, solved by least squares with the minimum-norm
    answer where the moments do not identify beta: an input that is an exact linear function of
    the states (a valve position that is also one of the plant's sensors, more states and inputs
    than sensors) has no separate effect
    (``tests/training/test_varx.py::test_an_input_that_is_a_function_of_the_states_gets_no_effect_of_its_own``).
    """
    X = np.hstack([G[j - 1] for j in equations])
    Y = np.hstack([G[j][:rows] for j in equations])
    # beta X = Y  <=>  X' beta' = Y'
    return np.asarray(np.linalg.lstsq(X.T, Y.T, rcond=None)[0].T)


class _RowProblem:
    """The lagged moments of one plant's row over a set of regressor blocks, with the noise of every entry."""

    def __init__(
        self,
        own_q: FloatArray,
        own_state_dim: int,
        noise_cov: FloatArray | None,
        public: Mapping[str, PublicSeries],
        blocks: Mapping[str, OwnMoments],
        members: Sequence[str],
        lags: int,
    ) -> None:
        self.members = list(members)
        L = lags
        qs = [np.asarray(own_q, dtype=np.float64)] + [public[n].q for n in self.members]
        dims = [q.shape[1] for q in qs]
        n_rows = min(len(q) for q in qs) - 2 * L
        if n_rows < 2:
            raise DataError(f"{n_rows + 2 * L} samples are too few for {L} moment lags")
        qs = [q[: n_rows + 2 * L] for q in qs]
        offsets = np.cumsum((0, *dims))
        K = int(offsets[-1])
        G = np.zeros((2 * L + 1, K, K))  # index L + j: Gamma_j, j = -L..L
        sd = np.zeros((2 * L + 1, K, K))
        power = [np.sum(q[L : L + n_rows] ** 2, axis=0) for q in qs]  # sum_t q_i(t)^2 per coordinate
        variances = [np.zeros(dims[0])] + [public[n].q_var for n in self.members]
        for a in range(len(qs)):
            ra = slice(int(offsets[a]), int(offsets[a + 1]))
            for b in range(len(qs)):
                rb = slice(int(offsets[b]), int(offsets[b + 1]))
                if a == b and a > 0:
                    own = blocks[self.members[a - 1]]
                    k = min(own.lags, L)
                    for j in range(k + 1):
                        G[L + j][ra, rb] = own.gammas[j][: dims[a], : dims[a]]
                        G[L - j][ra, rb] = own.gammas[j][: dims[a], : dims[a]].T
                    sd[:, ra, rb] = own.noise_sd()[: dims[a], : dims[a]]
                    continue
                for j in range(-L, L + 1):
                    G[L + j][ra, rb] = _lagged(qs[a], qs[b], j, L) / n_rows
                if a != b:
                    # sum_t q_a,i(t) (q_b,k(t-j) + e_k): the released noise of b times a's power (and vice versa)
                    sd[:, ra, rb] = (
                        np.sqrt(np.outer(power[a], variances[b]) + np.outer(variances[a], power[b])) / n_rows
                    )
        if noise_cov is not None:
            P = own_state_dim
            # E[x̃ x̃'] = Gamma_0 + N: the plant knows its own N
            G[L][:P, :P] -= np.asarray(noise_cov, dtype=np.float64)
        self.G, self.sd, self.L, self.n_rows = G, sd, L, n_rows
        self.offsets = offsets
        self.P = own_state_dim

    def gammas(self, G: FloatArray | None = None) -> list[FloatArray]:
        """Gamma_0 .. Gamma_L."""
        G = self.G if G is None else G
        return [G[self.L + j] for j in range(self.L + 1)]

    def solve(self, equations: Sequence[int], G: FloatArray | None = None) -> FloatArray:
        """beta (P, K) from the lag equations."""
        return _yule_walker_rows(self.gammas(G), self.P, equations)

    def stderr(self, beta: FloatArray, equations: Sequence[int], draws: int, seed: int) -> FloatArray:
        """Noise of every moment propagated by simulation (fixed seed) + the sampling error of a VARX(1)."""
        rng = np.random.default_rng(seed)
        L = self.L
        sims = []
        if np.any(self.sd > 0.0):
            for _ in range(draws):
                G = self.G + self.sd * rng.standard_normal(self.G.shape)
                # Gamma_{-j} = Gamma_j'
                for j in range(1, L + 1):
                    G[L - j] = G[L + j].T
                G[L] = 0.5 * (G[L] + G[L].T)
                sims.append(self.solve(equations, G))
        noise_var = np.var(np.stack(sims), axis=0) if sims else np.zeros_like(beta)
        G0, G1 = self.G[L], self.G[L + 1]
        # Sigma_w = Gamma_0[x, x] - beta Gamma_1[x, :]'
        sigma_w = np.clip(np.diag(G0[: self.P, : self.P] - beta @ G1[: self.P].T), 0.0, None)
        inv0 = np.clip(np.diag(np.linalg.pinv(G0)), 0.0, None)
        sampling = np.outer(sigma_w, inv0) / self.n_rows
        return np.asarray(np.sqrt(noise_var + sampling))

    def block(self, index: int) -> slice:
        """Columns of member ``index`` (0 = the plant itself)."""
        return slice(int(self.offsets[index]), int(self.offsets[index + 1]))


def fit_row(
    plant: str,
    plants: Sequence[str],
    state_dims: Sequence[int],
    input_dims: Sequence[int],
    states: FloatArray,
    inputs: FloatArray | None,
    public: Mapping[str, PublicSeries],
    blocks: Mapping[str, OwnMoments],
    *,
    lags: int,
    first_equation: int = 1,
    noise_cov: FloatArray | None = None,
    alpha: float = 0.01,
    draws: int = 200,
    seed: int = 0,
) -> RowEstimate:
    """Plant ``plant``'s row ``[A_m. B_m.]`` from its exact states and inputs and the others' releases.

    Parameters
    ----------
    plant : this plant; plants, state_dims, input_dims : every plant in block order with P_n, U_n
    states : (W, P_m) this plant's measurement states; inputs : (W, U_m) its inputs ``u(t-1)`` or None
    public : other plant -> its released series (de-attenuated), every other plant
    blocks : other plant -> its released own-block moments
    lags : L; first_equation : 1 (open loop) or 2 (instruments at least two samples back: feedback)
    noise_cov : (P_m, P_m) covariance of this plant's measurement-state noise, or None
    alpha : family-wise level of the M (M - 1) block tests (as the learned graph)
    draws, seed : simulation of the standard errors
    """
    if not 1 <= first_equation <= lags:
        raise ModelError(f"the first lag equation must be within 1..{lags}, got {first_equation}")
    m = list(plants).index(plant)
    P = int(state_dims[m])
    own_q = lagged_q(states, inputs)
    equations = list(range(first_equation, lags + 1))
    others = [p for p in plants if p != plant]
    M = len(plants)
    pvalues: dict[str, float] = {}
    kept: list[str] = []
    if others:
        full = _RowProblem(own_q, P, noise_cov, public, blocks, others, lags)
        beta = full.solve(equations)
        se = full.stderr(beta, equations, draws, seed)
        for i, other in enumerate(others, start=1):
            cols = full.block(i)
            z = beta[:, cols] / np.where(se[:, cols] > 0.0, se[:, cols], np.inf)
            # W = sum (beta / se)^2 ~ chi2(entries) when the block is zero
            pvalues[other] = float(scipy.stats.chi2.sf(float(np.sum(z**2)), z.size))
        kept = [o for o in others if pvalues[o] < alpha / max(M * (M - 1), 1)]
    problem = _RowProblem(own_q, P, noise_cov, public, blocks, kept, lags)
    beta = problem.solve(equations)
    se = problem.stderr(beta, equations, draws, seed)
    s_off = np.cumsum((0, *state_dims))
    u_off = np.cumsum((0, *input_dims))
    S, U = int(s_off[-1]), int(u_off[-1])
    A, B = np.zeros((P, S)), np.zeros((P, U))
    A_se, B_se = np.full((P, S), np.nan), np.full((P, U), np.nan)
    inputs_of = []
    for i, member in enumerate([plant, *kept]):
        n = list(plants).index(member)
        cols = problem.block(i)
        Pn = int(state_dims[n])
        sx = slice(int(s_off[n]), int(s_off[n + 1]))
        A[:, sx], A_se[:, sx] = beta[:, cols][:, :Pn], se[:, cols][:, :Pn]
        width = cols.stop - cols.start - Pn
        if width:
            su = slice(int(u_off[n]), int(u_off[n + 1]))
            B[:, su], B_se[:, su] = beta[:, cols][:, Pn:], se[:, cols][:, Pn:]
            inputs_of.append(member)
    return RowEstimate(A, B, A_se, B_se, tuple(kept), tuple(inputs_of), pvalues)
