"""The binary container of fedrca's array messages: a JSON header and raw array buffers.

Training messages (:mod:`fedrca.training.messages`) and parameter artifacts on the
params topic (:mod:`fedrca.contracts.artifacts`) travel as one byte string: a
preamble (magic, format version, header length), a JSON header (message type,
metadata, and per array its name, dtype with byte order, shape, offset, size) and
the arrays' C-order bytes. Decoding gives back bit-identical arrays; anything
malformed is a :class:`~fedrca.exceptions.MessageError` with a reason.

Examples
--------
>>> import numpy as np
>>> kind, meta, arrays = unpack_arrays(pack_arrays("demo", {"n": 1}, {"x": np.arange(3.0)}))
>>> kind, meta, arrays["x"].tolist()
('demo', {'n': 1}, [0.0, 1.0, 2.0])
"""

from __future__ import annotations

import json
import math
import re
import struct
from typing import Any

import numpy as np

from fedrca.contracts.bounds import MAX_NAME_CHARS, MAX_TEXT_CHARS, check_name, parse_json, short
from fedrca.contracts.deadletter import DeadLetterReason as R
from fedrca.exceptions import MessageError

__all__ = ["pack_arrays", "unpack_arrays"]

MAGIC = b"FRCA"
FORMAT_VERSION = 1
_HEADER = struct.Struct("<4sBI")  # magic, format version, header length
#: Deepest JSON nesting of a header (an artifact's manifest: arrays -> name -> shape; metrics).
HEADER_DEPTH = 16
#: Most dimensions of an array.
MAX_DIMS = 8
#: Largest size of a dimension of an array without elements (one with elements is bounded by its bytes).
MAX_EMPTY_DIM = 1 << 20
#: The dtypes an array may have: booleans, integers, floats and complex numbers of at most 16 bytes.
_DTYPE = re.compile(r"[<>|=]?(?:b1|[iu](?:1|2|4|8)|f(?:2|4|8|16)|c(?:8|16|32))")


def pack_arrays(kind: str, meta: dict[str, Any], arrays: dict[str, np.ndarray]) -> bytes:
    """Encode JSON-able ``meta`` and named arrays as one byte string (lossless for any numeric dtype)."""
    specs = []
    buffers = []
    offset = 0
    for name, array in arrays.items():
        a = np.asarray(array)
        if a.dtype.hasobject:
            raise MessageError(R.BAD_ARRAY, f"array '{name}' has dtype object; only numeric arrays can be sent")
        raw = a.tobytes(order="C")
        specs.append({"name": name, "dtype": a.dtype.str, "shape": list(a.shape), "offset": offset, "nbytes": len(raw)})
        buffers.append(raw)
        offset += len(raw)
    header = json.dumps({"type": kind, "meta": meta, "arrays": specs}, separators=(",", ":")).encode("utf-8")
    return _HEADER.pack(MAGIC, FORMAT_VERSION, len(header)) + header + b"".join(buffers)


def _spec(spec: Any, body: int) -> tuple[str, np.dtype[Any], tuple[int, ...], int, int]:
    """One array's (name, dtype, shape, offset, nbytes), every bound checked before anything is allocated."""
    if not isinstance(spec, dict):
        raise MessageError(R.BAD_HEADER, f"an array spec must be an object, got {short(spec)}")
    name, dtype_text, shape, start, nbytes = (spec.get(k) for k in ("name", "dtype", "shape", "offset", "nbytes"))
    check_name(name, "array name", R.BAD_HEADER, MAX_TEXT_CHARS)
    if not isinstance(dtype_text, str) or not _DTYPE.fullmatch(dtype_text):
        raise MessageError(
            R.BAD_ARRAY, f"array {short(name)}: dtype {short(dtype_text)} is not a numeric dtype such as '<f8'"
        )
    if (
        not isinstance(shape, list)
        or len(shape) > MAX_DIMS
        or not all(type(n) is int and 0 <= n <= max(body, MAX_EMPTY_DIM) for n in shape)
    ):
        raise MessageError(
            R.BAD_ARRAY,
            f"array {short(name)}: shape {short(shape)} is not a list of at most {MAX_DIMS} sizes in "
            f"0..{max(body, MAX_EMPTY_DIM)}",
        )
    for key, value in (("offset", start), ("nbytes", nbytes)):
        if type(value) is not int or value < 0:
            raise MessageError(R.BAD_HEADER, f"array {short(name)}: {key} {short(value)} is not a byte count")
    dtype = np.dtype(dtype_text)
    # exact: Python integers do not wrap (numpy's product of 2^33 x 2^33 would)
    if math.prod(shape) * dtype.itemsize != nbytes:
        raise MessageError(R.BAD_ARRAY, f"array {short(name)}: {nbytes} bytes do not match {dtype.str} {shape}")
    if start + nbytes > body:
        raise MessageError(R.TRUNCATED, f"array {short(name)} runs past the end of the message")
    assert isinstance(name, str) and isinstance(start, int) and isinstance(nbytes, int)  # checked above
    return name, dtype, tuple(shape), start, nbytes


def unpack_arrays(
    raw: bytes, max_bytes: int | None = None, max_depth: int = HEADER_DEPTH
) -> tuple[str, dict[str, Any], dict[str, np.ndarray]]:
    """Inverse of :func:`pack_arrays`; MessageError (reason code + detail) on anything malformed.

    Bounded before anything is allocated: at most ``max_bytes`` in all (None: what the caller
    holds already, e.g. one Kafka record of its topic), a header nested at
    most ``max_depth`` deep, numeric dtypes of at most 16 bytes, at most :data:`MAX_DIMS`
    dimensions, sizes whose exact product matches the array's bytes, arrays that lie
    within the message and names given once (:mod:`fedrca.contracts.bounds`).
    """
    if not isinstance(raw, bytes | bytearray | memoryview):
        raise MessageError(R.NOT_BYTES, f"expected bytes, got {type(raw).__name__}")
    raw = bytes(raw)
    if max_bytes is not None and len(raw) > max_bytes:
        raise MessageError(R.TOO_LARGE, f"a message of {len(raw):,} bytes is larger than {max_bytes:,}")
    if len(raw) < _HEADER.size:
        raise MessageError(R.TRUNCATED, f"{len(raw)} bytes is shorter than the {_HEADER.size}-byte preamble")
    magic, version, header_len = _HEADER.unpack_from(raw)
    if magic != MAGIC:
        raise MessageError(R.BAD_MAGIC, f"not a fedrca binary message (starts with {magic!r})")
    if version != FORMAT_VERSION:
        raise MessageError(R.BAD_VERSION, f"format version {version}, this fedrca reads {FORMAT_VERSION}")
    body_start = _HEADER.size + header_len
    if len(raw) < body_start:
        raise MessageError(R.TRUNCATED, "the header is cut short")
    try:
        header = parse_json(raw[_HEADER.size : body_start], "the header", max_depth=max_depth, max_bytes=header_len)
    except MessageError as exc:
        raise MessageError(R.BAD_HEADER if exc.reason == R.MALFORMED_JSON else exc.reason, exc.detail) from None
    if not isinstance(header, dict) or not isinstance(header.get("meta"), dict):
        raise MessageError(R.BAD_HEADER, "the header is not an object with 'type', 'meta' and 'arrays'")
    kind, meta, specs = header.get("type"), header["meta"], header.get("arrays")
    if not isinstance(kind, str) or len(kind) > MAX_NAME_CHARS or not isinstance(specs, list):
        raise MessageError(R.BAD_HEADER, "the header is not an object with 'type', 'meta' and 'arrays'")
    body = memoryview(raw)[body_start:]
    arrays: dict[str, np.ndarray] = {}
    for spec in specs:
        name, dtype, shape, start, nbytes = _spec(spec, len(body))
        if name in arrays:
            raise MessageError(R.BAD_HEADER, f"array {short(name)} is given twice")
        arrays[name] = np.frombuffer(body[start : start + nbytes], dtype=dtype).reshape(shape).copy()
    return kind, meta, arrays
