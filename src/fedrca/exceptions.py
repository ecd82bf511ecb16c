"""Exceptions raised by fedrca.

Every error fedrca raises on purpose derives from :class:`FedrcaError`, so a
caller can catch them all at once and leave real bugs (``TypeError`` ...)
alone. The hierarchy::

    FedrcaError
    ├── ConfigError            a configuration file or value is invalid
    ├── DataError              input data breaks its contract (shape, NaN, columns, file)
    │   ├── MessageError       one stream message is malformed (goes to the dead-letter topic)
    │   └── OutputError        an output cannot be written (disk full, read-only, no permission)
    ├── ModelError             a model cannot be built or used
    │   ├── NotFittedError     a detector/scorer was used before ``fit``
    │   └── ConvergenceError   a learner's iteration cannot converge (e.g. spectral radius >= 1)
    ├── PrivacyBudgetExceeded  a run would spend more privacy (epsilon) than configured
    └── ArtifactError          a parameter artifact is missing or unreadable
        └── IntegrityError     an artifact's sha256 does not match its manifest

    UserWarning
    └── PrivacyWarning         a release is legal but weak: its statistics sit close to a few raw samples

Messages always say what was wrong *and* how to fix it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from fedrca.contracts.deadletter import DeadLetterReason

__all__ = [
    "ArtifactError",
    "ConfigError",
    "ConvergenceError",
    "DataError",
    "FedrcaError",
    "IntegrityError",
    "MessageError",
    "ModelError",
    "NotFittedError",
    "OutputError",
    "PrivacyBudgetExceeded",
    "PrivacyWarning",
]


class FedrcaError(Exception):
    """Base class of every error fedrca raises on purpose."""


class ConfigError(FedrcaError):
    """A configuration file or value is invalid.

    Parameters
    ----------
    message : str
        What is wrong and what would be valid.
    source : str, optional
        The file the configuration came from.
    key : str, optional
        The key path inside the file, e.g. ``plants[2].sensors[3]``.
    """

    def __init__(self, message: str, *, source: str | None = None, key: str | None = None):
        self.source = source
        self.key = key
        self.reason = message
        prefix = ": ".join(p for p in (source, key) if p)
        super().__init__(f"{prefix}: {message}" if prefix else message)


class DataError(FedrcaError):
    """Input data breaks its contract (missing file, wrong columns, NaN/inf...)."""


class MessageError(DataError):
    """A single message is malformed; ``reason`` says why (it goes to the dead-letter topic with it).

    Parameters
    ----------
    reason : the machine-friendly code, a member of
        :class:`fedrca.contracts.deadletter.DeadLetterReason`
    detail : what was wrong, for a human (never the message's raw values)
    """

    def __init__(self, reason: DeadLetterReason, detail: str):
        self.reason = reason
        self.detail = detail
        super().__init__(f"{reason}: {detail}")


class OutputError(DataError):
    """An output file or folder cannot be written: the disk is full, the file system read-only, no permission."""


class ModelError(FedrcaError):
    """A model cannot be built or used with the given arguments."""


class NotFittedError(ModelError):
    """A detector or scorer was used before ``fit``."""


class ConvergenceError(ModelError):
    """An iterative learner cannot converge with the chosen settings."""


class PrivacyBudgetExceeded(FedrcaError):
    """Continuing would spend more privacy budget (epsilon) than configured."""


class ArtifactError(FedrcaError):
    """A parameter artifact is missing, unreadable or incompatible."""


class IntegrityError(ArtifactError):
    """An artifact's content does not match the sha256 recorded in its manifest."""


class PrivacyWarning(UserWarning):
    """A release within the budget is still weak: e.g. a fleet participant's released statistics fall
    below the entropy l-diversity bound (:mod:`fedrca.fleet.collabdict`)."""
