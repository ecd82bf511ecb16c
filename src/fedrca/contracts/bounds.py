"""Bounds every decoder checks before it allocates: size, nesting depth, counts, names, shapes, dtypes.

A record read from a topic was written by whoever can write to that topic. Before a
decoder builds anything from it, it checks what the record can make it allocate or
recurse into, and refuses anything beyond with a
:class:`~fedrca.exceptions.MessageError` and a reason:

* size: at most :data:`MAX_RECORD_BYTES`, what one Kafka record holds (``too-large``);
* nesting: JSON nested at most as deep as the contract needs (``too-deep``); the depth is
  counted on the bytes before they are parsed (:func:`json_depth`), so a record of a million
  ``[`` never reaches the parser's recursion;
* names and texts: at most :data:`MAX_NAME_CHARS` / :data:`MAX_TEXT_CHARS` characters
  (a topic name's length; a dead letter's detail is cut to :data:`MAX_DETAIL_CHARS`);
* shapes and dtypes of binary arrays: numeric dtypes only, non-negative integer dimensions
  whose product (exact, in Python integers) matches the bytes that are there
  (:mod:`fedrca.contracts.binary`).

:func:`parse_json` is the one JSON entry point of the stream decoders; :func:`short` is
how a detail quotes a value (never more than a few dozen characters of it).
``tests/contracts/test_fuzz_decoders.py`` feeds every decoder arbitrary and hostile bytes:
none raises anything but :class:`~fedrca.exceptions.MessageError`.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np

from fedrca.contracts.deadletter import DeadLetterReason as R
from fedrca.exceptions import MessageError

__all__ = [
    "MAX_DETAIL_CHARS",
    "MAX_NAME_CHARS",
    "MAX_RECORD_BYTES",
    "MAX_TEXT_CHARS",
    "check_name",
    "json_depth",
    "parse_json",
    "short",
]

#: Largest record a decoder reads: what one Kafka record holds (the brokers' default
#: ``message.max.bytes``, 1 MiB; docs/limits.md).
MAX_RECORD_BYTES = 1 << 20
#: Longest name (site, plant, participant, session) a record may carry: a Kafka topic name's length.
MAX_NAME_CHARS = 249
#: Longest free text a record may carry (a parameter version, an outcome, a reason).
MAX_TEXT_CHARS = 1_000
#: Longest detail of a dead letter (its ``fedrca-detail`` header).
MAX_DETAIL_CHARS = 500

_OPEN = frozenset(b"[{")


def short(value: Any, limit: int = 60) -> str:
    """``repr(value)`` of at most ``limit`` characters (the middle elided), for an error's detail.

    Long containers are not rendered whole: a list of a million numbers costs its first few.

    Examples
    --------
    >>> short("x" * 1000)
    "'xxxxxxxxxxxxxxxxxxxxxxxxxx ... xxxxxxxxxxxxxxxxxxxxxxxxxx'"
    >>> short([1, 2]), short({"a": [1]})
    ('[1, 2]', "{'a': [1]}")
    """
    if isinstance(value, list | tuple) and len(value) > limit:
        text = f"{type(value).__name__} of {len(value)} items"
    elif isinstance(value, dict) and len(value) > limit:
        text = f"object of {len(value)} keys"
    elif isinstance(value, str | bytes) and len(value) > 4 * limit:
        text = repr(value[: limit // 2]) + " ... " + repr(value[-(limit // 2) :])
    else:
        try:
            text = repr(value)
        except (RecursionError, ValueError):  # a deep container; an integer of too many digits
            text = f"a {type(value).__name__}"
    if len(text) > limit:
        keep = (limit - 5) // 2
        text = f"{text[:keep]} ... {text[-keep:]}"
    return text


def json_depth(raw: bytes | str) -> int:
    """Deepest nesting of ``[`` / ``{`` in a JSON text, counted on the bytes (strings skipped).

    Vectorised over the bytes: a backslash run of odd length escapes the byte after it, a
    quote that is not escaped opens or closes a string, and a bracket outside strings
    counts. Exact for valid JSON; for invalid JSON a number the parser then refuses anyway.

    Examples
    --------
    >>> json_depth(b'{"a": [1, [2]], "b": "[[[["}'), json_depth(b"[]"), json_depth(b"3")
    (3, 1, 0)
    """
    data = raw.encode("utf-8", "surrogatepass") if isinstance(raw, str) else bytes(raw)
    b = np.frombuffer(data, dtype=np.uint8)
    if b.size == 0:
        return 0
    index = np.arange(b.size)
    backslash = b == 92
    # the last non-backslash position at or before i; a byte is escaped when the run of
    # backslashes just before it is odd
    last_plain = np.maximum.accumulate(np.where(backslash, -1, index))
    run_before = np.empty(b.size, dtype=np.int64)
    run_before[0] = 0
    run_before[1:] = index[:-1] - last_plain[:-1]
    escaped = (run_before & 1) == 1
    quote = (b == 34) & ~escaped
    inside = (np.cumsum(quote) & 1) == 1  # an opening quote itself counts as inside: not a bracket anyway
    step = np.zeros(b.size, dtype=np.int64)
    step[((b == 91) | (b == 123)) & ~inside] = 1
    step[((b == 93) | (b == 125)) & ~inside] = -1
    return int(max(0, np.cumsum(step).max()))


def parse_json(raw: Any, what: str, *, max_depth: int, max_bytes: int = MAX_RECORD_BYTES) -> Any:
    """The JSON value of a record, after its size and nesting are checked.

    Raises
    ------
    MessageError
        ``not-bytes`` (not bytes or text), ``too-large``, ``too-deep``, ``malformed-json``.

    Examples
    --------
    >>> parse_json(b'{"a": [1]}', "a record", max_depth=2)
    {'a': [1]}
    >>> parse_json(b"[" * 100, "a record", max_depth=2)
    Traceback (most recent call last):
    ...
    fedrca.exceptions.MessageError: too-deep: a record nests deeper than 2 levels
    """
    if isinstance(raw, bytearray | memoryview):
        raw = bytes(raw)
    if not isinstance(raw, bytes | str):
        raise MessageError(R.NOT_BYTES, f"{what} must be bytes, got {type(raw).__name__}")
    if len(raw) > max_bytes:
        raise MessageError(R.TOO_LARGE, f"{what} of {len(raw):,} bytes is larger than {max_bytes:,}")
    # cheap first: a text with few brackets cannot nest deeply
    brackets = raw.count(b"[") + raw.count(b"{") if isinstance(raw, bytes) else raw.count("[") + raw.count("{")
    if brackets > max_depth and json_depth(raw) > max_depth:
        raise MessageError(R.TOO_DEEP, f"{what} nests deeper than {max_depth} levels")
    try:
        return json.loads(raw)
    except (UnicodeDecodeError, ValueError) as exc:  # JSONDecodeError; an integer of too many digits
        raise MessageError(R.MALFORMED_JSON, f"{what} is not JSON: {short(str(exc), 120)}") from None
    except RecursionError:  # invalid JSON whose brackets the scan could not count
        raise MessageError(R.TOO_DEEP, f"{what} nests deeper than {max_depth} levels") from None


def check_name(value: Any, field: str, reason: R = R.BAD_FIELD, limit: int = MAX_NAME_CHARS) -> str:
    """A non-empty string of at most ``limit`` characters, or :class:`MessageError`.

    Examples
    --------
    >>> check_name("reactor", "plant")
    'reactor'
    >>> check_name("x" * 300, "plant")
    Traceback (most recent call last):
    ...
    fedrca.exceptions.MessageError: bad-field: 'plant' must be a name of 1..249 characters, got a str of 300
    """
    if not isinstance(value, str) or not 0 < len(value) <= limit:
        got = f"a str of {len(value)}" if isinstance(value, str) else short(value)
        raise MessageError(reason, f"'{field}' must be a name of 1..{limit} characters, got {got}")
    return value
