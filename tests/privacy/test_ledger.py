"""The whole-life ledger: exact composition against hand computations and brute force, windows, refusal."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
import scipy.integrate
import scipy.stats

from fedrca.exceptions import PrivacyBudgetExceeded
from fedrca.privacy.accounting import composed_delta, composed_epsilon, gaussian_epsilon, gaussian_mu
from fedrca.privacy.ledger import FlagWindow, PrivacyLedger, flag_capacity


def rr_hockey_stick_brute_force(epsilon: float, eps0: float, k: int) -> float:
    """max over outputs of P(o) - e^eps Q(o), summed: k bits kept with p under P (true bits 1), 1 - p under Q."""
    p = math.exp(eps0) / (1.0 + math.exp(eps0))
    total = 0.0
    for bits in itertools.product((0, 1), repeat=k):
        ones = sum(bits)
        prob_p = p**ones * (1 - p) ** (k - ones)
        prob_q = (1 - p) ** ones * p ** (k - ones)
        total += max(prob_p - math.exp(epsilon) * prob_q, 0.0)
    return total


def test_one_bit_of_randomized_response_by_hand():
    # one bit: delta(eps) = p (1 - e^(eps - eps0)) for 0 <= eps < eps0, so eps(delta) = eps0 + ln(1 - delta / p)
    p = math.e / (1.0 + math.e)
    assert composed_epsilon(1e-5, pure={1.0: 1}) == pytest.approx(1.0 + math.log(1.0 - 1e-5 / p), abs=1e-10)
    assert composed_delta(1.0, pure={1.0: 1}) == 0.0  # eps0-DP exactly


@pytest.mark.parametrize("k", [2, 3, 10])
def test_randomized_response_composed_k_times_by_hand(k):
    # k bits of eps0: the top atom k eps0 has probability p^k, the next (k-2) eps0 has k p^(k-1) q; between
    # them delta(eps) = p^k (1 - e^(eps - k eps0)) + k p^(k-1) q (1 - e^(eps - (k-2) eps0))_+
    eps0, delta = 2.0, 1e-5
    p = math.exp(eps0) / (1.0 + math.exp(eps0))
    hand = k * eps0 + math.log(1.0 - delta / p**k)  # valid while the second atom does not contribute
    assert hand > (k - 2) * eps0
    assert composed_epsilon(delta, pure={eps0: k}) == pytest.approx(hand, abs=1e-9)


@pytest.mark.parametrize(("epsilon", "eps0", "k"), [(0.5, 0.3, 10), (2.0, 0.5, 8), (3.0, 1.0, 6), (0.0, 0.2, 12)])
def test_randomized_response_profile_matches_brute_force(epsilon, eps0, k):
    assert composed_delta(epsilon, pure={eps0: k}) == pytest.approx(
        rr_hockey_stick_brute_force(epsilon, eps0, k), rel=1e-9, abs=1e-15
    )


def test_gaussian_and_randomized_response_compose_exactly():
    # (N(mu, 1) x Bern(p)) vs (N(0, 1) x Bern(1 - p)): the hockey-stick divergence by quadrature
    mu, eps0, epsilon = 1.0, 1.0, 3.0
    p = math.exp(eps0) / (1.0 + math.exp(eps0))
    total = 0.0
    for a, b in ((p, 1 - p), (1 - p, p)):

        def integrand(x, a=a, b=b):
            return max(a * scipy.stats.norm.pdf(x, mu) - math.exp(epsilon) * b * scipy.stats.norm.pdf(x), 0.0)

        value, _ = scipy.integrate.quad(integrand, -30.0, 30.0, epsabs=1e-14, epsrel=1e-10, limit=400)
        total += value
    assert composed_delta(epsilon, mu=mu, pure={eps0: 1}) == pytest.approx(total, rel=1e-6)


def test_gaussian_ledger_matches_known_values():
    ledger = PrivacyLedger("p", delta=1e-5)
    for _ in range(4):
        ledger.charge_gaussian(0.25)  # four releases of mu = 0.5 compose to mu = 1
    assert ledger.epsilon("gaussian") == pytest.approx(4.3772, abs=1e-3)
    assert ledger.epsilon() == pytest.approx(gaussian_epsilon(1.0, 1e-5), abs=1e-9)
    # (1, 1e-5) needs mu = 1 / 3.7306 per release (the analytic Gaussian mechanism)
    assert 1.0 / gaussian_mu(1.0, 1e-5) == pytest.approx(3.7306, abs=1e-3)


def test_composition_is_tighter_than_the_sum_and_never_below_each_part():
    ledger = PrivacyLedger("p", delta=1e-5)
    ledger.charge_gaussian(0.5**2)
    ledger.charge_pure(0.5, count=40)
    total, gauss, rr = ledger.epsilon(), ledger.epsilon("gaussian"), ledger.epsilon("randomized_response")
    assert max(gauss, rr) < total < gauss + rr
    assert rr < 40 * 0.5  # advanced-composition regime: far below k eps0


def test_reused_release_is_charged_once():
    ledger = PrivacyLedger("p", delta=1e-5, budget=3.0)
    assert ledger.charge_gaussian(0.2, key="states/window0")
    spent = ledger.epsilon()
    for _ in range(10):
        assert not ledger.charge_gaussian(0.2, key="states/window0")
    assert ledger.epsilon() == spent


def test_refusal_names_the_budget_key_and_charges_nothing():
    ledger = PrivacyLedger("reactor", delta=1e-5, budget=2.0, budget_key="training.privacy.budget")
    ledger.charge_gaussian(gaussian_mu(1.5, 1e-5) ** 2)
    before = ledger.get_state()
    with pytest.raises(PrivacyBudgetExceeded, match=r"reactor.*training\.privacy\.budget = 2"):
        ledger.charge_gaussian(gaussian_mu(1.5, 1e-5) ** 2)
    assert ledger.get_state() == before


def test_flag_capacity_is_the_largest_count_within_the_budget():
    for budget, mu2, eps0 in ((3.0, 0.0, 1.0), (8.0, 0.25, 0.5), (4.0, 0.0, 0.1)):
        cap = flag_capacity(1e-5, budget, mu2, eps0)
        assert composed_epsilon(1e-5, math.sqrt(mu2), {eps0: cap}) <= budget
        assert composed_epsilon(1e-5, math.sqrt(mu2), {eps0: cap + 1}) > budget
    assert flag_capacity(1e-5, 1.0, 1.0, 1.0) == -1


def test_flag_window_slides_and_admits_up_to_capacity():
    window = FlagWindow("p", flag_epsilon=1.0, window=5, delta=1e-5, budget=6.0)
    assert window.capacity() == 6  # 6 bits of eps 1 are (6, 0)-DP; a 7th passes 6 at delta 1e-5
    ok = window.admit(range(10), bits_per_sample=2)
    # 3 samples (6 bits) fit any 5-sample window: seqs 0,1,2 then 5,6,7 (0..2 have left the window at 5)
    assert ok.tolist() == [True, True, True, False, False, True, True, True, False, False]
    window.record(np.flatnonzero(ok), bits_per_sample=2)
    assert window.count(7) == 6 and window.count(9) == 6 and window.count(11) == 2
    for last in range(10):
        assert window.count(last) <= window.capacity()


def test_flag_window_state_round_trip():
    window = FlagWindow("p", flag_epsilon=0.5, window=100, delta=1e-5)
    window.record(range(0, 50), 2)
    copy = FlagWindow("p", flag_epsilon=0.5, window=100, delta=1e-5)
    copy.set_state(window.get_state())
    assert copy.bits == window.bits == 100
    assert copy.epsilon() == window.epsilon()


@pytest.mark.parametrize("batch", [1, 7, 64, 1000])
def test_the_window_keeps_no_seq_that_left_it(batch):
    """The window holds at most ``window`` seqs whatever the batches (its state goes into the plant's state
    record, one Kafka record, after every batch: docs/limits.md), and counts the same bits as before trimming."""
    window = FlagWindow("p", flag_epsilon=1.0, window=100, delta=1e-5)
    for first in range(0, 1500, batch):
        window.record(np.arange(first, first + batch), bits_per_sample=2)
        held = np.concatenate([seqs for seqs, _ in window.get_state()["batches"]])
        last = first + batch - 1
        assert held.min() > last - 100 and len(held) == min(100, last + 1)
        assert window.bits == 2 * min(100, last + 1)
