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
import struct
from typing import Any

import numpy as np

from fedrca.contracts.deadletter import DeadLetterReason as R
from fedrca.exceptions import MessageError

__all__ = ["pack_arrays", "unpack_arrays"]

MAGIC = b"FRCA"
FORMAT_VERSION = 1
_HEADER = struct.Struct("<4sBI")  # magic, format version, header length


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


def unpack_arrays(raw: bytes) -> tuple[str, dict[str, Any], dict[str, np.ndarray]]:
    """Inverse of :func:`pack_arrays`; MessageError (reason code + detail) on anything malformed."""
    if not isinstance(raw, bytes | bytearray | memoryview):
        raise MessageError(R.NOT_BYTES, f"expected bytes, got {type(raw).__name__}")
    raw = bytes(raw)
    if len(raw) < _HEADER.size:
        raise MessageError(R.TRUNCATED, f"{len(raw)} bytes is shorter than the {_HEADER.size}-byte preamble")
    magic, version, header_len = _HEADER.unpack_from(raw)
    if magic != MAGIC:
        raise MessageError(R.BAD_MAGIC, f"not a fedrca training message (starts with {magic!r})")
    if version != FORMAT_VERSION:
        raise MessageError(R.BAD_VERSION, f"format version {version}, this fedrca reads {FORMAT_VERSION}")
    body_start = _HEADER.size + header_len
    if len(raw) < body_start:
        raise MessageError(R.TRUNCATED, "the header is cut short")
    try:
        header = json.loads(raw[_HEADER.size : body_start].decode("utf-8"))
        kind = str(header["type"])
        meta = dict(header["meta"])
        specs = list(header["arrays"])
    except (ValueError, KeyError, TypeError) as exc:
        raise MessageError(R.BAD_HEADER, f"header is not valid JSON of the expected form ({exc})") from None
    body = memoryview(raw)[body_start:]
    arrays: dict[str, np.ndarray] = {}
    for spec in specs:
        try:
            dtype = np.dtype(spec["dtype"])
            shape = tuple(int(s) for s in spec["shape"])
            start, nbytes = int(spec["offset"]), int(spec["nbytes"])
            name = str(spec["name"])
        except (KeyError, TypeError, ValueError) as exc:
            raise MessageError(R.BAD_HEADER, f"array spec {spec!r} is malformed ({exc})") from None
        if dtype.hasobject or nbytes != int(np.prod(shape, dtype=np.int64)) * dtype.itemsize or start < 0:
            raise MessageError(R.BAD_ARRAY, f"array '{name}': {nbytes} bytes do not match {dtype.str} {shape}")
        if start + nbytes > len(body):
            raise MessageError(R.TRUNCATED, f"array '{name}' runs past the end of the message")
        arrays[name] = np.frombuffer(body[start : start + nbytes], dtype=dtype).reshape(shape).copy()
    return kind, meta, arrays
