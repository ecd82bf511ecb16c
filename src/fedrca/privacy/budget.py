"""The one budget check: a release that would bring a plant past its epsilon budget is refused.

Both accountants (:class:`fedrca.privacy.accountant.PrivacyAccountant` for a training run,
:class:`fedrca.privacy.ledger.PrivacyLedger` for a plant's whole life) and the training
job's plan of its rounds (:mod:`fedrca.training.federated`) call :func:`refuse_past_budget`,
so every refusal says the same thing: who, what, the epsilon it would reach, the budget's
configuration key, and the fix.
"""

from __future__ import annotations

import math

from fedrca.exceptions import ModelError, PrivacyBudgetExceeded

__all__ = ["DEFAULT_FIX", "Budgeted", "refuse_past_budget"]

#: What lowers a plant's spend, named in every refusal after the budget key to raise.
DEFAULT_FIX = "spend less (fewer releases or rounds, lower per-release epsilons: more noise)"


def refuse_past_budget(
    plant: str,
    after: float,
    budget: float,
    *,
    delta: float,
    spent: float,
    what: str = "this release",
    budget_key: str = "privacy.budget",
    fit: str | None = None,
    fix: str = DEFAULT_FIX,
) -> None:
    """Raise :class:`PrivacyBudgetExceeded` when ``after`` (epsilon at ``delta``) passes ``budget``.

    Parameters
    ----------
    plant : the plant whose budget it is
    after : epsilon the plant would have spent after the release (at ``delta``)
    budget : its budget; ``inf`` never refuses
    delta : the delta every epsilon is reported at
    spent : epsilon spent before the release
    what : the release, as the message names it
    budget_key : the configuration key of the budget
    fit : what would still fit (e.g. ``"at most 3 round(s) fit"``), named in the message when given
    fix : how to spend less

    Examples
    --------
    >>> refuse_past_budget("reactor", 3.0, 4.0, delta=1e-5, spent=1.0)   # within the budget: nothing
    >>> try:
    ...     refuse_past_budget("reactor", 5.0, 4.0, delta=1e-5, spent=1.0, what="2 rounds")
    ... except PrivacyBudgetExceeded as e:
    ...     print(str(e).split(";")[0])
    plant 'reactor': 2 rounds would bring epsilon to 5 (delta=1e-05), above privacy.budget = 4 (spent so far 1)
    """
    if math.isinf(budget) or not after > budget:
        return
    room = f"; {fit}" if fit else ""
    raise PrivacyBudgetExceeded(
        f"plant '{plant}': {what} would bring epsilon to {after:.3g} (delta={delta:g}), "
        f"above {budget_key} = {budget:g} (spent so far {spent:.3g}){room}; {fix} or raise {budget_key}"
    )


class Budgeted:
    """What both accountants share: a plant, a budget under its configuration key, and the one check.

    Subclasses set ``plant``, ``delta``, ``budget`` and ``budget_key`` and define :meth:`epsilon`.
    """

    plant: str
    delta: float
    budget: float
    budget_key: str

    def epsilon(self) -> float:
        """Epsilon spent so far (at ``delta``)."""
        raise NotImplementedError

    @staticmethod
    def _noised(mu2: float) -> None:
        if math.isinf(mu2):
            raise ModelError("a release without noise cannot be charged; switch the mechanism off instead")

    def _refuse_past(self, after: float, what: str = "this release") -> None:
        """:func:`refuse_past_budget` for this account: ``after`` is the epsilon the release would bring."""
        key, spent = self.budget_key, self.epsilon()
        refuse_past_budget(self.plant, after, self.budget, delta=self.delta, spent=spent, what=what, budget_key=key)
