"""A plant's whole-life privacy ledger: training releases and published flags, composed exactly.

Everything that leaves a plant is a differentially private release of its records (one
record = one time step of the plant's sensor data):

* **training** (:mod:`fedrca.training.client`): states and gradients through the Gaussian
  mechanism (:mod:`fedrca.privacy.mechanisms`), each release ``mu``-GDP; Gaussian releases
  compose by adding ``mu^2``;
* **published flags** (:mod:`fedrca.privacy.randomized_response`): every flag bit through randomized
  response with the plant's ``flag_epsilon``, a pure ``eps``-DP release per bit.

:class:`PrivacyLedger` keeps both per plant, converts them together to ``(epsilon, delta)``
with the exact composition of :func:`~fedrca.privacy.accounting.composed_epsilon` and refuses
a release that would pass the budget. A quantity released once and used again (noised
states the server reuses in later rounds, a prediction computed from them) is
post-processing: charging it again under the same ``key`` costs nothing.

:class:`FlagWindow` is the inference side: the flags a plant published over the last
``window`` samples (``privacy.window``) compose, so the spent epsilon of the plant's
stream is that of ``k`` randomized-response bits, ``k`` = bits published in the window
(w-event privacy over the window). :meth:`FlagWindow.capacity` is the most bits any window
may hold within the budget next to the plant's training spend.

Examples
--------
>>> ledger = PrivacyLedger("reactor", delta=1e-5, budget=8.0)
>>> ledger.charge_gaussian(0.25, key="states")
True
>>> ledger.charge_gaussian(0.25, key="states")     # the same release used again: post-processing
False
>>> ledger.charge_pure(1.0, count=2)
True
>>> round(ledger.epsilon("gaussian"), 3), round(ledger.epsilon("randomized_response"), 3)
(1.993, 2.0)
>>> round(ledger.epsilon(), 3)          # composed exactly: less than the sum
3.917
"""

from __future__ import annotations

import functools
import math
from collections import deque
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

from fedrca.exceptions import ModelError
from fedrca.privacy.accounting import composed_epsilon
from fedrca.privacy.budget import Budgeted

__all__ = ["MECHANISMS", "FlagWindow", "PrivacyLedger", "flag_capacity", "spent_epsilon"]

#: Mechanism labels of the ledger (and of ``fedrca_privacy_epsilon_spent``); ``all`` = composed.
MECHANISMS = ("gaussian", "randomized_response", "all")


@functools.lru_cache(maxsize=4096)
def spent_epsilon(delta: float, mu2: float, pure: tuple[tuple[float, int], ...]) -> float:
    """Epsilon (at ``delta``) of Gaussian releases of total ``mu^2`` and pure releases ``((eps, count), ...)``.

    Cached: a streaming plant asks for the same window count again and again.

    Examples
    --------
    >>> spent_epsilon(1e-5, 0.0, ((1.0, 3),)) <= 3.0
    True
    """
    return composed_epsilon(delta, math.sqrt(mu2), dict(pure))


@functools.lru_cache(maxsize=256)
def flag_capacity(
    delta: float, budget: float, mu2: float, flag_epsilon: float, pure: tuple[tuple[float, int], ...] = ()
) -> int:
    """Most randomized-response bits of ``flag_epsilon`` that fit ``budget`` next to spend ``mu^2`` and ``pure``.

    Returns -1 when even zero bits do not fit (the training spend alone passes the budget).

    Examples
    --------
    >>> flag_capacity(1e-5, 3.0, 0.0, 1.0)          # three bits of eps 1 are (3, 0)-DP, a fourth passes 3
    3
    >>> flag_capacity(1e-5, 1.0, 1.0, 1.0)          # mu = 1 alone is eps 4.38 > 1
    -1
    """

    def with_flags(k: int) -> tuple[tuple[float, int], ...]:
        merged = dict(pure)
        merged[flag_epsilon] = merged.get(flag_epsilon, 0) + k
        return tuple(sorted(merged.items()))

    if spent_epsilon(delta, mu2, pure) > budget:
        return -1
    if math.isinf(budget) or math.isinf(flag_epsilon):
        return 2**62
    lo, hi = 0, 1
    while spent_epsilon(delta, mu2, with_flags(hi)) <= budget:
        lo, hi = hi, hi * 2
        if hi > 2**40:
            return hi
    # invariant: lo fits, hi does not
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if spent_epsilon(delta, mu2, with_flags(mid)) <= budget:
            lo = mid
        else:
            hi = mid
    return lo


class PrivacyLedger(Budgeted):
    """One plant's releases (Gaussian ``mu^2`` and pure ``{eps: count}``), composed exactly.

    Parameters
    ----------
    plant : name, for messages
    delta : the delta every epsilon is reported at
    budget : total epsilon (at ``delta``) the plant allows; inf = no limit
    budget_key : the configuration key of the budget (named when a release is refused)
    """

    def __init__(self, plant: str, delta: float, budget: float = math.inf, budget_key: str = "privacy.budget") -> None:
        if not 0.0 < delta < 1.0:
            raise ModelError(f"delta must be in (0, 1), got {delta}")
        self.plant = plant
        self.delta = float(delta)
        self.budget = float(budget)
        self.budget_key = budget_key
        self.mu2 = 0.0
        self.pure: dict[float, int] = {}
        self._keys: set[str] = set()

    def _pure_key(self, pure: Mapping[float, int] | None = None) -> tuple[tuple[float, int], ...]:
        merged = dict(self.pure)
        for eps, count in (pure or {}).items():
            merged[eps] = merged.get(eps, 0) + int(count)
        return tuple(sorted((e, k) for e, k in merged.items() if k > 0))

    def epsilon(self, mechanism: str = "all") -> float:
        """Epsilon spent: ``gaussian`` releases only, ``randomized_response`` (pure) only, or ``all`` composed."""
        if mechanism == "gaussian":
            return spent_epsilon(self.delta, self.mu2, ())
        if mechanism == "randomized_response":
            return spent_epsilon(self.delta, 0.0, self._pure_key())
        if mechanism == "all":
            return spent_epsilon(self.delta, self.mu2, self._pure_key())
        raise ModelError(f"unknown privacy mechanism '{mechanism}'; mechanisms are {', '.join(MECHANISMS)}")

    def projected(self, mu2: float = 0.0, pure: Mapping[float, int] | None = None) -> float:
        """Epsilon after further releases (nothing is charged)."""
        return spent_epsilon(self.delta, self.mu2 + mu2, self._pure_key(pure))

    def check(self, mu2: float = 0.0, pure: Mapping[float, int] | None = None, what: str = "this release") -> None:
        """Raise :class:`PrivacyBudgetExceeded` when further releases would pass the budget."""
        self._noised(mu2)
        if math.isinf(self.budget):
            return
        self._refuse_past(self.projected(mu2, pure), what)

    def charge_gaussian(self, mu2: float, key: str | None = None) -> bool:
        """Charge a Gaussian release of ``mu^2`` (after :meth:`check`); False when ``key`` was charged already."""
        if key is not None and key in self._keys:
            return False
        if mu2 < 0.0:
            raise ModelError(f"mu^2 must be >= 0, got {mu2}")
        if mu2 == 0.0:
            return False
        self.check(mu2)
        self.mu2 += float(mu2)
        if key is not None:
            self._keys.add(key)
        return True

    def charge_pure(self, epsilon: float, count: int = 1, key: str | None = None) -> bool:
        """Charge ``count`` pure ``epsilon``-DP releases (after :meth:`check`); False when ``key`` was charged."""
        if key is not None and key in self._keys:
            return False
        if count <= 0 or math.isinf(epsilon):
            return False
        self.check(pure={float(epsilon): int(count)})
        self.pure[float(epsilon)] = self.pure.get(float(epsilon), 0) + int(count)
        if key is not None:
            self._keys.add(key)
        return True

    def summary(self) -> dict[str, Any]:
        """Spent epsilon per mechanism and composed, delta, budget and the raw ledger."""
        return {
            "epsilon": self.epsilon(),
            "epsilon_gaussian": self.epsilon("gaussian"),
            "epsilon_randomized_response": self.epsilon("randomized_response"),
            "mu2": self.mu2,
            "pure": {str(e): k for e, k in sorted(self.pure.items())},
            "delta": self.delta,
            "budget": self.budget,
        }

    def get_state(self) -> dict[str, Any]:
        """JSON-friendly ledger."""
        return {"mu2": self.mu2, "pure": [[e, k] for e, k in sorted(self.pure.items())], "keys": sorted(self._keys)}

    def set_state(self, state: Mapping[str, Any]) -> None:
        """Restore :meth:`get_state` output."""
        self.mu2 = float(state["mu2"])
        self.pure = {float(e): int(k) for e, k in state["pure"]}
        self._keys = set(state["keys"])


class FlagWindow:
    """The randomized-response bits a plant published over the last ``window`` samples (by seq).

    Parameters
    ----------
    plant : name, for messages
    flag_epsilon : epsilon of one published bit (inf = flags published as they are: no privacy)
    window : samples the published flags compose over
    delta, budget : of the plant's ledger (budget = total epsilon, training included)
    training_mu2 : the Gaussian spend of the plant's training (from its artifact)
    training_pure : its pure spend ``{epsilon: count}`` (estimator ``moments``)

    Examples
    --------
    >>> w = FlagWindow("reactor", flag_epsilon=1.0, window=10, delta=1e-5, budget=4.0)
    >>> w.record(np.arange(3), bits_per_sample=2)        # 6 bits of eps 1 in the window
    >>> w.bits, round(w.epsilon("randomized_response"), 3) <= 6.0
    (6, True)
    >>> w.record(np.arange(20, 21), bits_per_sample=2)   # seq 20: seqs 0..2 left the window
    >>> w.bits
    2
    """

    def __init__(
        self,
        plant: str,
        flag_epsilon: float,
        window: int,
        delta: float,
        budget: float = math.inf,
        training_mu2: float = 0.0,
        training_pure: Mapping[float, int] | None = None,
    ) -> None:
        if window < 1:
            raise ModelError(f"privacy window must be >= 1 sample, got {window}")
        self.plant = plant
        self.flag_epsilon = float(flag_epsilon)
        self.window = int(window)
        self.delta = float(delta)
        self.budget = float(budget)
        self.training_mu2 = float(training_mu2)
        self.training_pure = {float(e): int(k) for e, k in (training_pure or {}).items()}
        self._batches: deque[tuple[np.ndarray, int]] = deque()
        self._last = -1

    @property
    def active(self) -> bool:
        """False when flags are published without randomized response (nothing to account)."""
        return math.isfinite(self.flag_epsilon)

    def _trim(self, last: int) -> None:
        """Forget the seqs that left the window: the window holds at most ``window`` seqs, whatever the batches
        (its state is written with the plant's state record after every batch: docs/limits.md,
        ``tests/privacy/test_ledger.py::test_the_window_keeps_no_seq_that_left_it``)."""
        cutoff = last - self.window
        while self._batches and int(self._batches[0][0][-1]) <= cutoff:
            self._batches.popleft()
        if self._batches and int(self._batches[0][0][0]) <= cutoff:
            seqs, bits = self._batches[0]
            self._batches[0] = (seqs[seqs > cutoff], bits)

    def count(self, last: int | None = None) -> int:
        """Bits published in the window ending at seq ``last`` (default: the newest seq seen)."""
        last = self._last if last is None else last
        cutoff = last - self.window
        return int(sum(bits * int(np.count_nonzero((seqs > cutoff) & (seqs <= last))) for seqs, bits in self._batches))

    @property
    def bits(self) -> int:
        """Bits published in the current window."""
        return self.count()

    def capacity(self) -> int:
        """Most bits a window may hold within the budget (-1: the training spend alone passes it)."""
        if not self.active:
            return 2**62
        pure = tuple(sorted(self.training_pure.items()))
        return flag_capacity(self.delta, self.budget, self.training_mu2, self.flag_epsilon, pure)

    def epsilon(self, mechanism: str = "all") -> float:
        """Spent epsilon: ``randomized_response`` (flags of the window), ``gaussian`` (training), ``all`` composed.

        ``gaussian`` is the label of the training releases, which for estimator ``moments`` include one
        pure (Laplace) release of the states besides the Gaussian one of the moments.
        """
        flags = {self.flag_epsilon: self.bits} if self.active and self.bits else {}
        training = dict(self.training_pure)
        merged = dict(training)
        for eps, k in flags.items():
            merged[eps] = merged.get(eps, 0) + k
        if mechanism == "randomized_response":
            return spent_epsilon(self.delta, 0.0, tuple(sorted(flags.items())))
        if mechanism == "gaussian":
            # the training releases (Gaussian, and the pure ones of estimator 'moments')
            return spent_epsilon(self.delta, self.training_mu2, tuple(sorted(training.items())))
        if mechanism == "all":
            return spent_epsilon(self.delta, self.training_mu2, tuple(sorted(merged.items())))
        raise ModelError(f"unknown privacy mechanism '{mechanism}'; mechanisms are {', '.join(MECHANISMS)}")

    def admit(self, seqs: Iterable[int], bits_per_sample: int) -> np.ndarray:
        """Which of the (increasing) ``seqs`` may publish without passing the budget (nothing is recorded).

        Each admitted sample is counted as published when the next ones are decided, so the
        window never holds more than :meth:`capacity` bits.
        """
        seq_arr = np.asarray(list(seqs), dtype=np.int64)
        ok = np.ones(len(seq_arr), dtype=bool)
        if not self.active or len(seq_arr) == 0:
            return ok
        cap = self.capacity()
        last = int(seq_arr[-1])
        if self.count(last) + bits_per_sample * len(seq_arr) <= cap:
            return ok
        # near the limit: decide sample by sample (the window slides with every seq)
        admitted: list[int] = []
        for i, seq in enumerate(seq_arr.tolist()):
            cutoff = seq - self.window
            held = self.count(seq) + bits_per_sample * sum(1 for s in admitted if s > cutoff)
            if held + bits_per_sample <= cap:
                admitted.append(seq)
            else:
                ok[i] = False
        return ok

    def record(self, seqs: Iterable[int], bits_per_sample: int) -> None:
        """Count published samples (increasing seqs; one entry per published sample)."""
        seq_arr = np.asarray(list(seqs), dtype=np.int64)
        if len(seq_arr):
            self._last = max(self._last, int(seq_arr[-1]))
            if self.active:
                self._batches.append((seq_arr, int(bits_per_sample)))
        self._trim(self._last)

    def restart(self) -> None:
        """A new recording starts at seq 0: what was published so far moves before it, still counted by age."""
        shift = self._last + 1
        self._batches = deque((seqs - shift, bits) for seqs, bits in self._batches)
        self._last = -1
        self._trim(self._last)

    def get_state(self) -> dict[str, Any]:
        """JSON-friendly window (the seqs still inside it)."""
        return {"last": self._last, "batches": [[s.tolist(), b] for s, b in self._batches]}

    def set_state(self, state: Mapping[str, Any] | None) -> None:
        """Restore :meth:`get_state` output (None: an empty window)."""
        self._batches.clear()
        self._last = -1
        if not state:
            return
        self._last = int(state["last"])
        for seqs, bits in state["batches"]:
            self._batches.append((np.asarray(seqs, dtype=np.int64), int(bits)))
