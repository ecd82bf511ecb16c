"""The training job's per-plant accountant: ``sum mu^2`` per record and channel (states, gradients).

Unit of privacy: one *record* = one time step of one plant (the state vectors it sends
for that step; the per-sample gradients that depend on it). The windows of successive
rounds may overlap, so the accountant tracks ``sum mu^2`` per record and reports the
worst record, converted with the exact Gaussian profile of
:func:`fedrca.privacy.accounting.gaussian_epsilon`. A plant's whole life (training and
published flags together) is :class:`fedrca.privacy.ledger.PrivacyLedger`'s.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
from numpy.typing import NDArray

from fedrca.exceptions import ModelError
from fedrca.privacy.accounting import gaussian_epsilon, zcdp_epsilon
from fedrca.privacy.budget import Budgeted

__all__ = ["CHANNELS", "PrivacyAccountant"]

FloatArray = NDArray[np.float64]
#: the accountant's channels
CHANNELS = ("states", "gradients")


class PrivacyAccountant(Budgeted):
    """Per-plant ledger of Gaussian releases: sum of mu^2 per record and channel.

    Parameters
    ----------
    n_records : records (time steps) of the plant's training data
    delta : the delta epsilon is reported at
    budget : the total epsilon (at delta) the plant allows; inf = no limit
    plant : name, for messages
    budget_key : the configuration key of the budget (named when a release is refused)

    Examples
    --------
    >>> acc = PrivacyAccountant(n_records=100, delta=1e-5, budget=10.0)
    >>> for _ in range(4):
    ...     acc.charge(0.25, slice(0, 100), "states")   # four releases of mu = 0.5 ...
    >>> round(acc.epsilon(), 3) == round(gaussian_epsilon(1.0, 1e-5), 3)   # ... compose to mu = 1
    True
    """

    def __init__(
        self,
        n_records: int,
        delta: float,
        budget: float = math.inf,
        plant: str = "plant",
        budget_key: str = "training.privacy.budget",
    ) -> None:
        if not 0.0 < delta < 1.0:
            raise ModelError(f"delta must be in (0, 1), got {delta}")
        self.n_records = int(n_records)
        self.delta = float(delta)
        self.budget = float(budget)
        self.plant = plant
        self.budget_key = budget_key
        self._mu2 = {c: np.zeros(self.n_records) for c in CHANNELS}
        self._releases = dict.fromkeys(CHANNELS, 0)

    def _records(self, records: slice | NDArray[np.int64] | None) -> slice | NDArray[np.int64]:
        return slice(0, self.n_records) if records is None else records

    def total_mu2(self) -> FloatArray:
        """Per-record sum of mu^2 over all channels."""
        return np.asarray(sum(self._mu2.values()), dtype=np.float64)

    def mu(self, channel: str | None = None) -> float:
        """GDP mu of the worst record (one channel, or all)."""
        mu2 = self.total_mu2() if channel is None else self._mu2[channel]
        return float(math.sqrt(float(mu2.max()))) if self.n_records else 0.0

    def epsilon(self, channel: str | None = None) -> float:
        """Epsilon spent at ``delta`` (exact Gaussian conversion)."""
        return gaussian_epsilon(self.mu(channel), self.delta)

    def epsilon_zcdp(self) -> float:
        """The looser standard zCDP bound on the same releases (for comparison)."""
        return zcdp_epsilon(self.mu() ** 2 / 2.0, self.delta)

    def projected_epsilon(self, mu2: float, records: slice | NDArray[np.int64] | None = None) -> float:
        """Epsilon after a further release of ``mu2`` on ``records``."""
        total = self.total_mu2()
        total[self._records(records)] += mu2
        return gaussian_epsilon(math.sqrt(float(total.max())), self.delta) if self.n_records else 0.0

    def plan(self, releases: Sequence[tuple[float, slice | NDArray[np.int64] | None]]) -> tuple[float, int]:
        """Epsilon after a planned sequence of releases ``(mu2, records)``, and how many of them fit the budget.

        Returns ``(epsilon after all of them, the longest prefix that stays within the budget)``.

        Examples
        --------
        >>> acc = PrivacyAccountant(n_records=10, delta=1e-5, budget=2.0)
        >>> eps, fit = acc.plan([(0.04, None)] * 50)
        >>> fit < 50 < eps * 100
        True
        """
        total = self.total_mu2()
        fit = len(releases)
        for k, (mu2, records) in enumerate(releases):
            total[self._records(records)] += mu2
            over = (
                gaussian_epsilon(math.sqrt(float(total.max())), self.delta) > self.budget if self.n_records else False
            )
            if over and fit == len(releases):
                fit = k
        eps = gaussian_epsilon(math.sqrt(float(total.max())), self.delta) if self.n_records else 0.0
        return eps, fit

    def check(self, mu2: float, records: slice | NDArray[np.int64] | None = None) -> None:
        """Raise PrivacyBudgetExceeded if a release of ``mu2`` on ``records`` would pass the budget."""
        self._noised(mu2)
        if math.isinf(self.budget) or mu2 == 0.0:
            return
        self._refuse_past(self.projected_epsilon(mu2, records))

    def charge(self, mu2: float, records: slice | NDArray[np.int64] | None, channel: str) -> None:
        """Record one release of ``mu2`` (sum of mu^2 of its mechanisms) on ``records``, after :meth:`check`."""
        if channel not in self._mu2:
            raise ModelError(f"unknown privacy channel '{channel}'; channels are {', '.join(CHANNELS)}")
        if mu2 == 0.0:
            return
        self.check(mu2, records)
        self._mu2[channel][self._records(records)] += mu2
        self._releases[channel] += 1

    def summary(self) -> dict[str, Any]:
        """Epsilon spent (total and per channel), the zCDP bound, delta and the release counts."""
        return {
            "epsilon": self.epsilon(),
            "epsilon_states": self.epsilon("states"),
            "epsilon_gradients": self.epsilon("gradients"),
            "epsilon_zcdp_bound": self.epsilon_zcdp(),
            "delta": self.delta,
            "budget": self.budget,
            "releases": dict(self._releases),
        }

    def get_state(self) -> dict[str, Any]:
        """JSON-friendly ledger."""
        return {
            "mu2": {c: v.tolist() for c, v in self._mu2.items()},
            "releases": dict(self._releases),
        }

    def set_state(self, state: dict[str, Any]) -> None:
        """Restore :meth:`get_state` output."""
        self._mu2 = {c: np.asarray(state["mu2"][c], dtype=np.float64) for c in CHANNELS}
        self._releases = {c: int(state["releases"][c]) for c in CHANNELS}
