"""Federated training of cross-plant interdependencies, with differential privacy (pure cores, no I/O).

:class:`Client` (one plant), :class:`Server`, the byte-serialisable
:mod:`messages <fedrca.training.messages>` they exchange, the linear (Granger,
instrumental-variables) and nonlinear (random-feature) server models (every release
goes through :mod:`fedrca.privacy`), centralised oracles for comparison, and
:class:`FederatedTraining`, which wires them through a transport (in-process by
default) and builds the parameter artifacts (:mod:`fedrca.contracts.artifacts`).
``fedrca train`` is the command line (:mod:`fedrca.cli.train`). See ``docs/training.md``.
"""

from fedrca.training.client import Client
from fedrca.training.federated import FederatedTraining, TrainingResult, TrainingState
from fedrca.training.messages import GradientMessage, InProcessTransport, StatesMessage, decode_message, encode_message
from fedrca.training.server import Server

__all__ = [
    "Client",
    "FederatedTraining",
    "GradientMessage",
    "InProcessTransport",
    "Server",
    "StatesMessage",
    "TrainingResult",
    "TrainingState",
    "decode_message",
    "encode_message",
]
