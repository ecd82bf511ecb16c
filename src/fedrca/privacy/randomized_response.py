"""Randomized response: local differential privacy for one published bit, or for a k-ary level.

The one place the keep probability ``p = e^eps / (e^eps + K - 1)`` is worked out
(:func:`keep_probability`; ``K = 2`` for a bit): the plants' perturbation
(:class:`RandomizedResponse`, :class:`LevelRandomizedResponse`), the RCA's model of what
it receives (:func:`rr_channel`, :func:`rr_level_channel`) and the accountant's privacy-loss
distribution (:func:`fedrca.privacy.accounting.randomized_response_loss`) all read it here.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from fedrca.exceptions import DataError, ModelError

__all__ = [
    "LevelRandomizedResponse",
    "RandomizedResponse",
    "generator_state",
    "keep_probability",
    "rr_channel",
    "rr_level_channel",
    "set_generator_state",
]

#: the 128-bit integers of numpy's PCG64 state (its ``state`` and ``inc``)
_WIDE = ("state", "inc")


def keep_probability(epsilon: float, n_levels: int = 2) -> float:
    """Probability that K-ary randomized response of budget ``epsilon`` publishes the true value.

    ``p = e^eps / (e^eps + K - 1)`` (``K = 2``: a bit, ``p = e^eps / (1 + e^eps)``); 1 for
    ``epsilon = inf``. The ratio of any two outcomes' probabilities is at most ``e^eps``: the
    release is ``epsilon``-locally differentially private.

    Examples
    --------
    >>> round(keep_probability(2.0), 4), round(keep_probability(2.0, 4), 4), keep_probability(math.inf)
    (0.8808, 0.7112, 1.0)
    """
    if math.isinf(epsilon):
        return 1.0
    # p = e^eps / (e^eps + K - 1), written so that a large eps cannot overflow
    return 1.0 / (1.0 + (int(n_levels) - 1) * math.exp(-float(epsilon)))


def rr_channel(epsilon: float) -> NDArray[np.float64]:
    """(4, 4) matrix ``C[o, s] = P(published pair o | true pair s)`` of two independent randomized-response bits.

    Columns sum to 1; the identity for ``epsilon = inf``. States are coded ``2 zc + za``.

    Examples
    --------
    >>> C = rr_channel(np.log(3.0))   # p = 0.75
    >>> C[:, 0].round(4).tolist()      # published pairs given a true (0, 0)
    [0.5625, 0.1875, 0.1875, 0.0625]
    """
    p = keep_probability(epsilon)
    K = np.array([[p, 1.0 - p], [1.0 - p, p]])
    # bit order of the code 2 zc + za: zc is the major bit
    return np.kron(K, K)


def rr_level_channel(epsilon: float, n_levels: int) -> NDArray[np.float64]:
    """(K, K) matrix ``C[o, l] = P(published level o | true level l)`` of k-ary randomized response.

    The true level is kept with probability :func:`keep_probability` and otherwise
    replaced by one of the other K - 1 levels uniformly.

    Examples
    --------
    >>> rr_level_channel(math.log(3.0), 3).round(3).tolist()
    [[0.6, 0.2, 0.2], [0.2, 0.6, 0.2], [0.2, 0.2, 0.6]]
    """
    K = int(n_levels)
    if K < 2:
        raise DataError(f"a severity level needs at least 2 values, got {K}")
    if math.isinf(epsilon):
        return np.eye(K)
    p = keep_probability(epsilon, K)
    return np.full((K, K), (1.0 - p) / (K - 1)) + (p - (1.0 - p) / (K - 1)) * np.eye(K)


def generator_state(rng: np.random.Generator) -> dict[str, Any]:
    """The bit generator's state with its 128-bit integers as decimal strings.

    A plant worker writes this with every batch (``streams/agents.py``); integers wider than
    64 bits are what JSON encoders other than the standard library's refuse.

    Examples
    --------
    >>> rng = np.random.default_rng(1)
    >>> state = generator_state(rng)
    >>> a = rng.random(3)
    >>> set_generator_state(rng, state)
    >>> bool((rng.random(3) == a).all()), type(state["state"]["inc"]).__name__
    (True, 'str')
    """
    state = dict(rng.bit_generator.state)
    inner = state.get("state")
    if isinstance(inner, dict):
        state["state"] = {k: str(v) if k in _WIDE and isinstance(v, int) else v for k, v in inner.items()}
    return state


def set_generator_state(rng: np.random.Generator, state: dict[str, Any]) -> None:
    """Restore :func:`generator_state` output (or numpy's own ``bit_generator.state``, integers as such)."""
    inner = state.get("state")
    if isinstance(inner, dict):
        state = {**state, "state": {k: int(v) if k in _WIDE and isinstance(v, str) else v for k, v in inner.items()}}
    rng.bit_generator.state = state


class RandomizedResponse:
    """Publish each flag truthfully with probability ``p = e^eps / (1 + e^eps)``, flipped otherwise.

    This is epsilon-local differential privacy for each published bit.
    ``epsilon = inf`` publishes the flags unchanged.

    Parameters
    ----------
    epsilon : float > 0 or math.inf
    seed : int or None; the generator is ``numpy.random.default_rng(seed)``

    Examples
    --------
    >>> import numpy as np
    >>> rr = RandomizedResponse(epsilon=2.0, seed=0)
    >>> round(rr.keep_probability, 4)
    0.8808
    >>> published = rr.perturb(np.zeros(100_000, dtype=bool))
    >>> bool(abs(rr.estimate_rate(published)) < 0.01)
    True
    """

    def __init__(self, epsilon: float, seed: int | None = None) -> None:
        if not (epsilon > 0):
            raise ModelError(f"flag epsilon must be > 0 (or inf for no perturbation), got {epsilon}")
        self.epsilon = float(epsilon)
        self.seed = seed
        self._rng = np.random.default_rng(seed)

    @property
    def keep_probability(self) -> float:
        """p = e^eps / (1 + e^eps); 1 for eps = inf (:func:`keep_probability`)."""
        return keep_probability(self.epsilon)

    def perturb(self, flags: ArrayLike) -> NDArray[np.bool_]:
        """Randomize a batch of flags (any shape, row-major draw order).

        Draw order is the flat C order of ``flags``, so a batch and the same flags
        passed one row at a time consume the generator identically.
        """
        Z = np.asarray(flags, dtype=bool)
        if math.isinf(self.epsilon):
            return Z.copy()
        flip = self._rng.random(Z.shape) >= self.keep_probability
        return np.asarray(Z ^ flip)

    def estimate_rate(self, published: ArrayLike, axis: int | None = None) -> Any:
        """Unbiased estimate of the true flag rate from published flags.

        ``E[mean(published)] = (1 - p) + (2p - 1) pi`` so
        ``pi_hat = (mean(published) - (1 - p)) / (2p - 1)`` (may fall outside [0, 1]).
        """
        p = self.keep_probability
        observed = np.mean(np.asarray(published, dtype=np.float64), axis=axis)
        return (observed - (1.0 - p)) / (2.0 * p - 1.0)

    def get_state(self) -> dict[str, Any]:
        """Generator state (for restarts; see :func:`generator_state`)."""
        return generator_state(self._rng)

    def set_state(self, state: dict[str, Any]) -> None:
        """Restore :meth:`get_state` output."""
        set_generator_state(self._rng, state)


class LevelRandomizedResponse:
    """k-ary randomized response for a level in ``0 .. K-1``: kept with ``p = e^eps / (e^eps + K - 1)``.

    Otherwise the level is replaced by one of the other ``K - 1`` levels, uniformly:
    epsilon-local differential privacy for each published level. ``epsilon = inf``
    publishes the levels unchanged. Its generator is its own (seeded from ``seed``
    and a fixed stream tag), so publishing levels leaves the flags' draws unchanged.

    Examples
    --------
    >>> import numpy as np
    >>> rr = LevelRandomizedResponse(epsilon=2.0, n_levels=4, seed=0)
    >>> round(rr.keep_probability, 4)
    0.7112
    >>> levels = rr.perturb(np.zeros(100_000, dtype=np.int64))
    >>> bool(abs(np.mean(levels == 0) - rr.keep_probability) < 0.01), int(levels.max())
    (True, 3)
    """

    #: Stream tag of the level generator (so that it never repeats the flags' draws).
    STREAM = 0x1E7E1

    def __init__(self, epsilon: float, n_levels: int, seed: int | None = None) -> None:
        if not (epsilon > 0):
            raise ModelError(f"level epsilon must be > 0 (or inf for no perturbation), got {epsilon}")
        if n_levels < 2:
            raise ModelError(f"a level needs at least 2 values, got {n_levels}")
        self.epsilon = float(epsilon)
        self.n_levels = int(n_levels)
        self.seed = seed
        self._rng = np.random.default_rng([self.STREAM, 0 if seed is None else int(seed)])

    @property
    def keep_probability(self) -> float:
        """p = e^eps / (e^eps + K - 1); 1 for eps = inf (:func:`keep_probability`)."""
        return keep_probability(self.epsilon, self.n_levels)

    def perturb(self, levels: ArrayLike) -> NDArray[np.int64]:
        """Randomize a batch of levels (T,); two uniform draws per level, in order (chunking-invariant)."""
        L = np.asarray(levels, dtype=np.int64)
        if math.isinf(self.epsilon):
            return L.copy()
        u = self._rng.random((len(L), 2))
        # another level, uniformly among the K - 1 others: r in 0..K-2, skipping the true one
        r = np.minimum((u[:, 1] * (self.n_levels - 1)).astype(np.int64), self.n_levels - 2)
        other = np.where(r >= L, r + 1, r)
        return np.asarray(np.where(u[:, 0] < self.keep_probability, L, other), dtype=np.int64)

    def get_state(self) -> dict[str, Any]:
        """Generator state (for restarts; see :func:`generator_state`)."""
        return generator_state(self._rng)

    def set_state(self, state: dict[str, Any]) -> None:
        """Restore :meth:`get_state` output."""
        set_generator_state(self._rng, state)
