"""Federated training of cross-plant interdependencies, with differential privacy.

Pure cores (numpy/scipy, no I/O): :class:`Client` (one plant), :class:`Server`,
the byte-serialisable :mod:`messages <fedrca.training.messages>` they exchange, the
linear (Granger, instrumental-variables) and nonlinear (random-feature) server
models, the Gaussian mechanism and privacy accountant, centralised oracles for
comparison, and versioned parameter :mod:`artifacts <fedrca.training.artifacts>`.
:class:`FederatedTraining` wires them through a transport (in-process by default);
``fedrca train`` is the command line (:mod:`fedrca.training.commands`).
See ``docs/training.md``.
"""

from fedrca.training.artifacts import (
    SERVER,
    ParameterArtifact,
    apply_artifact,
    decode_published_artifact,
    encode_published_artifact,
    load_artifact,
    load_server_artifact,
    load_site_artifacts,
    save_artifact,
)
from fedrca.training.client import Client
from fedrca.training.messages import GradientMessage, InProcessTransport, StatesMessage, decode_message, encode_message
from fedrca.training.privacy import GaussianMechanism, PrivacyAccountant
from fedrca.training.run import FederatedTraining, TrainingResult, train_site
from fedrca.training.server import Server
from fedrca.training.settings import TrainingSettings, training_settings

__all__ = [
    "SERVER",
    "Client",
    "FederatedTraining",
    "GaussianMechanism",
    "GradientMessage",
    "InProcessTransport",
    "ParameterArtifact",
    "PrivacyAccountant",
    "Server",
    "StatesMessage",
    "TrainingResult",
    "TrainingSettings",
    "apply_artifact",
    "decode_message",
    "decode_published_artifact",
    "encode_message",
    "encode_published_artifact",
    "load_artifact",
    "load_server_artifact",
    "load_site_artifacts",
    "save_artifact",
    "train_site",
    "training_settings",
]
