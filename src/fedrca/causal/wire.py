"""The FedPC wire format: every message is a frozen, validated value object with a JSON encoding.

A message class subclasses :class:`Message`, names its ``kind`` (the JSON ``type``),
validates itself in ``__post_init__`` (:class:`~fedrca.exceptions.MessageError` with a
reason code on anything malformed), and gives ``to_dict`` / ``from_dict``;
:func:`register` makes :func:`decode_message` know it. The vote
(:mod:`fedrca.causal.fedpc`) and the pooled-statistics protocol
(:mod:`fedrca.causal.secagg`, :mod:`fedrca.causal.sufficient`) share this one format.

Examples
--------
>>> from fedrca.causal.fedpc import SkeletonReply
>>> import numpy as np
>>> msg = SkeletonReply(layer=0, adjacency=np.array([[0, 1], [1, 0]], dtype=bool))
>>> encode_message(msg)
b'{"type":"skeleton_reply","layer":0,"n_variables":2,"edges":[[0,1]]}'
>>> decode_message(encode_message(msg)) == msg
True
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, ClassVar, TypeVar

from fedrca.contracts.deadletter import DeadLetterReason as Reason
from fedrca.exceptions import MessageError

__all__ = ["Message", "decode_message", "encode_message", "register"]

_KINDS: dict[str, type[Message]] = {}

M = TypeVar("M", bound="type[Message]")


@dataclass(frozen=True, eq=False)
class Message:
    """Base of the FedPC messages: immutable, validated, JSON-encodable; equal when their JSON forms are."""

    kind: ClassVar[str] = ""

    def to_dict(self) -> dict[str, Any]:
        """JSON-friendly form (decoded by :func:`decode_message`)."""
        raise NotImplementedError

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Message:
        """The message from its JSON form (KeyError / TypeError / ValueError on a missing or malformed field)."""
        raise NotImplementedError

    def __eq__(self, other: object) -> bool:
        if type(other) is not type(self):
            return NotImplemented
        return self.to_dict() == other.to_dict()

    __hash__ = None  # type: ignore[assignment]


def register(cls: M) -> M:
    """Class decorator: :func:`decode_message` decodes messages of ``cls.kind`` with ``cls.from_dict``."""
    if not cls.kind or cls.kind in _KINDS:
        raise TypeError(f"message kind {cls.kind!r} is empty or registered twice")
    _KINDS[cls.kind] = cls
    return cls


def encode_message(message: Message) -> bytes:
    """UTF-8 JSON bytes of a FedPC message."""
    return json.dumps(message.to_dict(), separators=(",", ":")).encode("utf-8")


def decode_message(raw: bytes | str) -> Message:
    """Inverse of :func:`encode_message`; MessageError (reason code + detail) on anything malformed."""
    try:
        data = json.loads(raw)
        kind = data["type"]
    except (ValueError, TypeError, KeyError) as exc:
        raise MessageError(Reason.MALFORMED_JSON, f"not a FedPC message ({exc})") from None
    if not isinstance(kind, str) or kind not in _KINDS:
        raise MessageError(Reason.BAD_TYPE, f"unknown FedPC message type {kind!r}; known: {', '.join(_KINDS)}")
    try:
        return _KINDS[kind].from_dict(data)
    except (KeyError, TypeError, ValueError, IndexError) as exc:
        raise MessageError(Reason.BAD_FIELD, f"{kind}: missing or malformed field ({exc})") from None
