"""What-if (counterfactual) queries on the plants' learned global model, P3 (pure core, no I/O).

The federated training learns how each plant's state and control inputs drive the others
(A and B, :mod:`fedrca.training.server`); this package answers an operator's question
"how would plant m's measurements change if plant n's inputs were different?" on that
model: :mod:`~fedrca.whatif.model` (the global model read from a training run's loaded
artifacts), :mod:`~fedrca.whatif.query` (the average treatment effect, step and impulse
responses, the client-side answer) and :mod:`~fedrca.whatif.transfer` (the transfer
function, its poles and zeros, for comparing a learned model with the true one).
``fedrca whatif`` is the command (:mod:`fedrca.cli.whatif`); see ``docs/whatif.md``.
"""

from fedrca.whatif.model import GlobalModel, PlantMap
from fedrca.whatif.query import (
    WhatIfAnswer,
    average_treatment_effect,
    client_effect,
    impulse_response,
    step_response,
    what_if,
)
from fedrca.whatif.transfer import (
    TransferFunction,
    channel_zeros,
    invariant_zeros,
    pole_distance,
    transfer_function,
)

__all__ = [
    "GlobalModel",
    "PlantMap",
    "TransferFunction",
    "WhatIfAnswer",
    "average_treatment_effect",
    "channel_zeros",
    "client_effect",
    "impulse_response",
    "invariant_zeros",
    "pole_distance",
    "step_response",
    "transfer_function",
    "what_if",
]
