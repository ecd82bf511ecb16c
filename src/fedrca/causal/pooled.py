"""FedPC with the pooled test: the server runs PC on the sites' summed sufficient statistics.

The vote (:class:`fedrca.causal.fedpc.FedPCServer`, P4) lets every site test on its own
data; with many small sites each test loses the power the pooled test has, and a
spurious independence found by most sites removes a true edge. Here the server runs
the one pooled test without the pooled data:

1. every site joins a secure-aggregation session (:class:`~fedrca.causal.secagg.KeyRequest`);
2. the server asks for the CI test's sufficient statistics, each round a secure sum of
   masked vectors (:class:`~fedrca.causal.sufficient.StatsRequest`,
   :class:`~fedrca.causal.secagg.MaskedVector`): the server decodes only the sum;
3. **Fisher-z**: counts and sums, then cross-products about the pooled mean (two rounds):
   the pooled correlation matrix and N; the server runs PC on them alone. With ``mu``
   (noise) one round of each site's noised, standardised cross-products instead.
   **G-square**: the sites' level labels make a code book, then one round per batch of
   queries adds the sites' contingency tables (the server's PC asks as it goes);
4. the server orients (v-structures from the separating sets of the pooled test, Meek's
   rules, DAG extension) exactly as PC on the pooled data would.

With exact statistics the result **is** PC on the pooled data
(:func:`fedrca.causal.fedpc.fedpc` with one test on the concatenated rows: the pure
twin, ``tests/causal/test_pooled.py``). What the server learns is the pooled statistics
(N, the pooled mean and correlation matrix, or the pooled tables of its queries), never
one site's; what a site sends is one public key, masked vectors and, for G-square, the
labels of the levels it observed.

Examples
--------
>>> import numpy as np
>>> from fedrca.causal.fedpc import FedPCSite
>>> rng = np.random.default_rng(0)
>>> def sample(n):          # a -> c <- b,  c -> d
...     a, b = rng.normal(size=n), rng.normal(size=n)
...     c = a + b + rng.normal(size=n)
...     return np.column_stack([a, b, c, c + rng.normal(size=n)])
>>> sites = [FedPCSite(sample(n), ["a", "b", "c", "d"]) for n in (150, 200, 250, 300)]
>>> result = PooledStatsServer(n_variables=4, alpha=0.01).run([s.handle for s in sites])
>>> names, cpdag = sites[0].translate(result)
>>> sorted((names[i], names[j]) for i, j in zip(*np.nonzero(cpdag & ~cpdag.T)))
[('a', 'c'), ('b', 'c'), ('c', 'd')]
"""

from __future__ import annotations

import dataclasses
import math
import secrets
from collections.abc import Sequence
from typing import Any

import numpy as np
from numpy.typing import NDArray

from fedrca.causal.citests import CITest, FisherZ, TableGSquare, table_shapes
from fedrca.causal.fedpc import FedPCResult, SiteEndpoint, TestKind, fedpc
from fedrca.causal.secagg import (
    COUNT_LIMBS,
    FIXED_LIMBS,
    KeyReply,
    KeyRequest,
    MaskedVector,
    RingArray,
    decode_counts,
    decode_fixed,
    ring_add,
)
from fedrca.causal.sufficient import (
    LevelsReply,
    LevelsRequest,
    StatsRequest,
    merge_codebooks,
    pooled_correlation,
    private_correlation,
    triu_size,
)
from fedrca.contracts.deadletter import DeadLetterReason as Reason
from fedrca.exceptions import DataError, MessageError
from fedrca.privacy.mechanisms import noise_sd

__all__ = ["PooledStatistics", "PooledStatsServer"]

FloatArray = NDArray[np.float64]
IntArray = NDArray[np.int64]

#: cells of contingency tables summed in one round (bounds one site's message: 8 bytes a cell)
_ROUND_CELLS = 1 << 21


@dataclasses.dataclass(frozen=True)
class PooledStatistics:
    """What the server decoded from the secure sums of a Fisher-z run.

    Attributes
    ----------
    n_samples : N, the pooled sample count
    correlation : (p, p) the pooled correlation matrix (noised and projected with ``mu``)
    mean : (p,) the pooled mean (None with noise: each site centres on its own)
    scatter : (p, p) the pooled cross-products about the mean (None with noise)
    noise_var : variance of the noise on each correlation (0 without noise)
    """

    n_samples: int
    correlation: FloatArray
    mean: FloatArray | None = None
    scatter: FloatArray | None = None
    noise_var: float = 0.0


class PooledStatsServer:
    """The pooled-statistics FedPC server: secure sums of the CI test's sufficient statistics, PC on them.

    Parameters
    ----------
    n_variables : p, the agreed number of variables
    test : ``fisher-z`` or ``g-square`` (every site must run the same)
    alpha : significance level of the pooled CI tests
    max_cond : largest conditioning set, None = no limit
    mu : Fisher-z only: the Gaussian mechanism's mu per site for one noised release of
        its standardised cross-products (None or inf = exact statistics, no noise)
    clip : Fisher-z with noise: each standardised row is clipped to L2 norm ``clip sqrt(p)``
    session : the session id (default: 16 random bytes in hex)

    ``run(sites)`` takes one endpoint per site (``FedPCSite.handle`` in process, a transport
    in production); at least two sites (one site's sum would be its own statistics). A
    server runs one session (each round's masks are used once).
    """

    def __init__(
        self,
        n_variables: int,
        *,
        test: TestKind = "fisher-z",
        alpha: float = 0.01,
        max_cond: int | None = None,
        mu: float | None = None,
        clip: float = 1.5,
        session: str | None = None,
    ) -> None:
        if n_variables < 2:
            raise DataError(f"FedPC needs at least 2 variables, got {n_variables}")
        if not 0.0 < alpha < 1.0:
            raise DataError(f"alpha must be in (0, 1), got {alpha}")
        if max_cond is not None and max_cond < 0:
            raise DataError(f"max_cond must be >= 0 or None, got {max_cond}")
        if test not in ("fisher-z", "g-square"):
            raise DataError(f"unknown CI test {test!r}; use 'fisher-z' or 'g-square'")
        if mu is not None and not mu > 0:
            raise DataError(f"mu must be > 0, got {mu}")
        if mu is not None and math.isfinite(mu) and test != "fisher-z":
            raise DataError("noise on the pooled statistics is offered for fisher-z only (docs/fedpc.md, Limits)")
        if not (math.isfinite(clip) and clip > 0):
            raise DataError(f"clip must be a finite number > 0, got {clip}")
        self.n_variables = int(n_variables)
        self.test = test
        self.alpha = float(alpha)
        self.max_cond = max_cond
        self.mu = None if mu is None or math.isinf(mu) else float(mu)
        self.clip = float(clip)
        self.session = session if session is not None else secrets.token_hex(16)
        self._round = 0
        self._bytes: list[int] = []
        self._roster: tuple[bytes, ...] = ()

    # ------------------------------------------------------------------ protocol steps
    def _join(self, sites: Sequence[SiteEndpoint]) -> None:
        K = len(sites)
        if K < 2:
            raise DataError(
                f"pooled statistics need at least 2 sites (secure aggregation hides each among the others), got {K}; "
                "use the vote (mode vote) or more sites"
            )
        keys = []
        for k, site in enumerate(sites):
            reply = site(KeyRequest(session=self.session, index=k, n_sites=K))
            if not isinstance(reply, KeyReply) or reply.session != self.session or reply.index != k:
                raise MessageError(
                    Reason.BAD_REPLY, f"site {k} did not answer the key request of its session and index"
                )
            keys.append(reply.public_key)
        if len(set(keys)) != K:
            raise MessageError(Reason.BAD_REPLY, "two sites announced the same public key")
        self._roster = tuple(keys)
        self._bytes = [0] * K

    def _secure_sum(self, sites: Sequence[SiteEndpoint], limbs: int, length: int, **fields: Any) -> Any:
        """One round: every site's masked vector of ``length`` ring elements; the decoded sum."""
        request = StatsRequest(session=self.session, round=self._round, roster=self._roster, **fields)
        # summed as the vectors arrive: the round holds one running sum, not one vector per site
        # (memory independent of the number of sites: docs/limits.md, tests/cli/test_limits.py)
        total: RingArray | None = None
        for k, site in enumerate(sites):
            reply = site(request)
            if not isinstance(reply, MaskedVector):
                raise MessageError(Reason.BAD_REPLY, f"site {k} answered {type(reply).__name__}, expected MaskedVector")
            if reply.session != self.session or reply.round != self._round or reply.index != k:
                raise MessageError(Reason.BAD_REPLY, f"site {k} answered another session, round or index")
            if reply.data.shape != (length, limbs):
                raise MessageError(
                    Reason.BAD_REPLY,
                    f"site {k} sent a vector of shape {reply.data.shape}, expected ({length}, {limbs})",
                )
            total = reply.data.copy() if total is None else ring_add(total, reply.data)
            self._bytes[k] += reply.n_bytes
        self._round += 1
        assert total is not None  # _join admits at least two sites
        return decode_counts(total) if limbs == COUNT_LIMBS else decode_fixed(total)

    def pooled_statistics(self, sites: Sequence[SiteEndpoint]) -> PooledStatistics:
        """Fisher-z: the pooled N and correlation matrix from secure sums (joins the session first)."""
        if self.test != "fisher-z":
            raise DataError("pooled_statistics is the Fisher-z path; G-square sums tables query by query")
        p = self.n_variables
        if not self._roster:
            self._join(sites)
        if self.mu is not None:
            v = self._secure_sum(
                sites, FIXED_LIMBS, 1 + triu_size(p), statistic="private-scatter", clip=self.clip, mu=self.mu
            )
            N = round(float(v[0]))
            total_sd = math.sqrt(len(sites)) * noise_sd(self.clip, p, self.mu)
            corr, tau2 = private_correlation(v, p, total_sd)
            return PooledStatistics(N, corr, noise_var=tau2)
        moments = self._secure_sum(sites, FIXED_LIMBS, 1 + p, statistic="moments")
        N = round(float(moments[0]))
        if N < 4:
            raise DataError(f"the sites hold {N} samples together; Fisher-z needs at least 4")
        mean = moments[1:] / N
        triu = self._secure_sum(sites, FIXED_LIMBS, triu_size(p), statistic="scatter", center=mean)
        corr = pooled_correlation(triu, p)
        S = np.zeros((p, p))
        S[np.triu_indices(p)] = triu
        S = S + np.triu(S, 1).T
        return PooledStatistics(N, corr, mean=mean, scatter=S)

    def _table_test(self, sites: Sequence[SiteEndpoint]) -> TableGSquare:
        replies = []
        for k, site in enumerate(sites):
            reply = site(LevelsRequest(session=self.session))
            if not isinstance(reply, LevelsReply) or reply.session != self.session:
                raise MessageError(Reason.BAD_REPLY, f"site {k} did not answer the levels request")
            if len(reply.levels) != self.n_variables:
                raise MessageError(Reason.BAD_REPLY, f"site {k} announced levels of {len(reply.levels)} variables")
            replies.append(reply.levels)
        codebook = merge_codebooks(replies)
        levels = np.array([len(c) for c in codebook], dtype=np.int64)
        (N,) = self._secure_sum(sites, COUNT_LIMBS, 1, statistic="count")

        def count(x: IntArray, y: IntArray, S: IntArray) -> IntArray:
            sizes = np.prod(table_shapes(levels, x, y, S), axis=1)
            queries = np.column_stack([x, y, S])
            parts, lo = [], 0
            while lo < len(queries):
                # as many queries as fit one round's cells (at least one)
                hi = lo + max(1, int(np.searchsorted(np.cumsum(sizes[lo:]), _ROUND_CELLS, side="right")))
                cells = int(sizes[lo:hi].sum())
                parts.append(
                    self._secure_sum(sites, COUNT_LIMBS, cells, statistic="tables", queries=queries[lo:hi],
                                     codebook=codebook)
                )  # fmt: skip
                lo = hi
            return np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)

        return TableGSquare(levels, int(N), count)

    def run(self, sites: Sequence[SiteEndpoint]) -> FedPCResult:
        """Run FedPC with the pooled test over the sites; the result over variable ids.

        ``result.extra`` holds the mode, the rounds, the bytes each site sent, N and, with
        noise, ``mu`` per site, the clip and the noise's standard deviation on a correlation.
        """
        if self._roster:
            raise DataError("a PooledStatsServer runs one session; make a new server for another run")
        self._join(sites)
        extra: dict[str, Any] = {"mode": "pooled-stats"}
        test: CITest
        if self.test == "fisher-z":
            stats = self.pooled_statistics(sites)
            test = FisherZ.from_correlation(stats.correlation, stats.n_samples, noise_var=stats.noise_var)
            extra.update(samples=stats.n_samples)
            if self.mu is not None:
                extra.update(mu=self.mu, clip=self.clip, noise_sd=math.sqrt(stats.noise_var))
        else:
            test = self._table_test(sites)
            extra.update(samples=test.n_samples)
        # PC on the pooled test: one "site", so the vote keeps what the test keeps
        result = fedpc([test], alpha=self.alpha, keep_fraction=0.0, max_cond=self.max_cond)
        extra.update(rounds=self._round, bytes_per_site=list(self._bytes))
        return dataclasses.replace(result, n_sites=len(sites), extra=extra)
