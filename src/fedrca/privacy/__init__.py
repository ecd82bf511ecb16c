"""Privacy, the product's contract: every mechanism a release goes through and every account of it (pure).

What leaves a plant is a differentially private release of its records (one record = one
time step of its sensor data), and every release is accounted per plant:

* :mod:`~fedrca.privacy.randomized_response`: the published flags (one bit, or a k-ary
  severity level) and the one keep probability ``p = e^eps / (e^eps + K - 1)``, with the
  channel matrices the RCA scores published flags with;
* :mod:`~fedrca.privacy.mechanisms`: clipping and the Gaussian mechanism (training states and
  gradients), Laplace releases of states (estimator ``moments``), the noised scatter of a
  site's sufficient statistics (``fedrca graph --epsilon``);
* :mod:`~fedrca.privacy.accounting`: exact ``(epsilon, delta)`` of Gaussian releases and
  randomized-response bits composed (privacy-loss distributions in closed form);
* :mod:`~fedrca.privacy.accountant`: a training run's per-record accountant;
* :mod:`~fedrca.privacy.ledger`: a plant's whole-life ledger (training and published flags)
  and the flag window the streaming workers keep;
* :mod:`~fedrca.privacy.budget`: the one budget check every refusal goes through.

No I/O, no other fedrca core: ``detectors``, ``training``, ``rca``, ``causal``, ``fleet``
and ``streams`` import this package, it imports only ``fedrca.exceptions`` (an
import-linter contract). docs/privacy.md is the user's account of the contract.
"""

from fedrca.privacy.accountant import PrivacyAccountant
from fedrca.privacy.accounting import composed_epsilon, gaussian_epsilon, gaussian_mu
from fedrca.privacy.budget import refuse_past_budget
from fedrca.privacy.ledger import FlagWindow, PrivacyLedger
from fedrca.privacy.mechanisms import GaussianMechanism, clip_rows, release_states
from fedrca.privacy.randomized_response import (
    LevelRandomizedResponse,
    RandomizedResponse,
    keep_probability,
    rr_channel,
    rr_level_channel,
)

__all__ = [
    "FlagWindow",
    "GaussianMechanism",
    "LevelRandomizedResponse",
    "PrivacyAccountant",
    "PrivacyLedger",
    "RandomizedResponse",
    "clip_rows",
    "composed_epsilon",
    "gaussian_epsilon",
    "gaussian_mu",
    "keep_probability",
    "refuse_past_budget",
    "release_states",
    "rr_channel",
    "rr_level_channel",
]
