"""Dead letters: why a message was refused, and the headers that travel with it.

A message that breaks its contract is never dropped and never crashes a worker:
it goes to a dead-letter topic with a reason from :class:`DeadLetterReason` (the
complete list: the type checker refuses any other value, and
``tests/test_layout.py`` checks that the code uses no bare reason string).

Where dead letters go (the privacy boundary, ``docs/streams.md``): a plant
stage's dead letters hold raw sensor bytes, so they go to the plant's own
``<site>.deadletter.<plant>`` topic, which only that plant's processor may
write and read like its sensors topic; the RCA stage's dead letters are flags
(published bits, no raw value) and go to ``<site>.deadletter``.
"""

from __future__ import annotations

import hashlib
from enum import StrEnum
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from fedrca.exceptions import MessageError

__all__ = ["DEADLETTER_VALUE_BYTES", "DeadLetterReason", "DeadLetterStage", "deadletter_headers", "deadletter_record"]

#: Most bytes of the refused record a dead letter carries: with its headers it stays within one
#: Kafka record (1 MiB), so a refused record of that size can always be dead-lettered; a longer
#: one is cut, its length and sha256 in the headers (``fedrca-original-bytes``, ``-sha256``).
DEADLETTER_VALUE_BYTES = 1_000_000
#: Longest ``fedrca-detail`` header (characters; a longer detail is cut in the middle).
DETAIL_CHARS = 500


class DeadLetterReason(StrEnum):
    """Every reason a message can be refused for (the ``fedrca-reason`` header, a metrics label)."""

    # -- stream messages (sensors, flags) ----------------------------------------------------
    MALFORMED_JSON = "malformed-json"  #: not JSON, or not a JSON object
    TOO_LARGE = "too-large"  #: larger than a record of its kind may be (contracts/bounds.py)
    TOO_DEEP = "too-deep"  #: JSON nested deeper than its contract
    MISSING_FIELD = "missing-field"  #: a required field is absent
    WRONG_SITE = "wrong-site"  #: the message names another site
    UNKNOWN_PLANT = "unknown-plant"  #: the plant is not configured
    BAD_KEY = "bad-key"  #: a sensor message not keyed by its plant's name
    WRONG_LENGTH = "wrong-length"  #: not as many values as the plant has sensors
    NON_FINITE = "non-finite"  #: a NaN or inf literal, a non-number or a number beyond float range (null: missing)
    BAD_QUALITY = "bad-quality"  #: a sensor message's quality list that is not one Quality code per value
    BAD_SEQ = "bad-seq"  #: seq is not a non-negative integer
    BAD_TIMESTAMP = "bad-timestamp"  #: ts is not a finite time in range
    BAD_FLAG = "bad-flag"  #: zc / za is not 0 or 1
    LATE = "late"  #: a flag whose row the RCA had already judged without it
    UNPROCESSABLE = "unprocessable"  #: valid by its contract, yet its processing failed (the worker went on)
    # -- a worker's own state (state topics) -----------------------------------------------------
    BAD_STATE = "bad-state"  #: a state record that is not the worker's: skipped, the one before it used
    # -- parameter artifacts (params topic) -----------------------------------------------------
    BAD_ARTIFACT = "bad-artifact"  #: unreadable, tampered with, or for an unknown plant
    # -- binary messages (training protocol, artifacts on the wire) ------------------------------
    NOT_BYTES = "not-bytes"  #: the value is not a byte string
    TRUNCATED = "truncated"  #: shorter than its header says
    BAD_MAGIC = "bad-magic"  #: not a fedrca binary message
    BAD_VERSION = "bad-version"  #: a format version this fedrca cannot read
    BAD_HEADER = "bad-header"  #: the JSON header is malformed
    BAD_ARRAY = "bad-array"  #: an array's dtype, shape or values are invalid
    BAD_TYPE = "bad-type"  #: an unknown message type
    BAD_FIELD = "bad-field"  #: an unknown or invalid field
    BAD_WINDOW = "bad-window"  #: a training window that does not fit the data
    MISSING_STATES = "missing-states"  #: a states message without the states the server needs
    OUT_OF_ORDER = "out-of-order"  #: a training message while the party awaits another kind
    BAD_ROUND = "bad-round"  #: a training message of another round than the current one
    MISMATCH = "mismatch"  #: gradients for another window than the states they answer
    DUPLICATE = "duplicate"  #: a second message for the same round and sender
    # -- peer-to-peer consensus (the fleet detector) ----------------------------------------------
    UNEXPECTED = "unexpected"  #: a consensus message of a session or round the participant is not in
    MISSING_MESSAGES = "missing"  #: a consensus round without a message from every neighbour
    UNKNOWN_RECEIVER = "unknown-receiver"  #: addressed to a participant the fleet does not have
    WRONG_RECEIVER = "wrong-receiver"  #: delivered to a participant it is not addressed to
    BAD_SENDER = "bad-sender"  #: a participant sending in another participant's name
    # -- federated causal discovery (FedPC) -------------------------------------------------------
    BAD_ADJACENCY = "bad-adjacency"  #: a skeleton that is not a symmetric 0/1 (p, p) matrix without self-loops
    BAD_PAIRS = "bad-pairs"  #: variable-id pairs that are not (K, 2) ids x < y in range
    BAD_LAYER = "bad-layer"  #: a conditioning-set layer that is not an integer >= 0
    BAD_SEPSETS = "bad-sepsets"  #: separating sets / p-values that do not match the pairs asked for
    BAD_PVALUES = "bad-pvalues"  #: p-values outside [0, 1]
    BAD_GRAPH = "bad-graph"  #: a result graph of the wrong size or with self-loops
    BAD_REPLY = "bad-reply"  #: a site's reply that does not answer the server's request
    WRONG_SIZE = "wrong-size"  #: a request about another number of variables than the site has


class DeadLetterStage(StrEnum):
    """The stage that refused a message (the ``fedrca-stage`` header, a metrics label)."""

    PLANT = "plant"
    RCA = "rca"
    PARAMS = "params"
    STATE = "state"
    FLEET = "fleet"
    CONTROL = "control"


def deadletter_headers(error: MessageError, stage: DeadLetterStage, source_topic: str) -> list[tuple[str, bytes]]:
    """Kafka headers that travel with a dead letter: reason, detail, stage, source topic.

    The detail names what was wrong without quoting the message's values (a plant's
    raw readings never leave its boundary through a header either).

    Examples
    --------
    >>> from fedrca.exceptions import MessageError
    >>> error = MessageError(DeadLetterReason.BAD_SEQ, "seq must be >= 0")
    >>> h = deadletter_headers(error, DeadLetterStage.RCA, "t.flags")
    >>> dict(h)["fedrca-reason"], dict(h)["fedrca-stage"]
    (b'bad-seq', b'rca')
    """
    detail = str(error.detail)
    if len(detail) > DETAIL_CHARS:
        keep = (DETAIL_CHARS - 5) // 2
        detail = f"{detail[:keep]} ... {detail[-keep:]}"
    return [
        ("fedrca-reason", str(error.reason).encode()),
        ("fedrca-detail", detail.encode("utf-8", "replace")),
        ("fedrca-stage", str(stage).encode()),
        ("fedrca-source-topic", source_topic.encode()),
    ]


def deadletter_record(
    raw: bytes | None, error: MessageError, stage: DeadLetterStage, source_topic: str
) -> tuple[bytes, list[tuple[str, bytes]]]:
    """The value and headers of a dead letter, within one Kafka record whatever was refused.

    Examples
    --------
    >>> from fedrca.exceptions import MessageError
    >>> value, headers = deadletter_record(b"x" * 2_000_000, MessageError(DeadLetterReason.TOO_LARGE, "big"),
    ...                                    DeadLetterStage.PLANT, "s.sensors.p")
    >>> len(value), dict(headers)["fedrca-original-bytes"]
    (1000000, b'2000000')
    """
    value = b"" if raw is None else bytes(raw)
    headers = deadletter_headers(error, stage, source_topic)
    if len(value) > DEADLETTER_VALUE_BYTES:
        headers += [
            ("fedrca-original-bytes", str(len(value)).encode()),
            ("fedrca-original-sha256", hashlib.sha256(value).hexdigest().encode()),
        ]
        value = value[:DEADLETTER_VALUE_BYTES]
    return value, headers
