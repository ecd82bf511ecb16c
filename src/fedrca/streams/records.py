"""Message contracts of the streams (JSON, versioned) and their validation.

Pure functions: bytes in, typed message or :class:`MessageError` out. Every
rejection carries a short machine-friendly ``reason`` (used as a metrics label
and a dead-letter header) and a human ``detail``.

Contracts (ARCHITECTURE.md):

* sensors  ``{"site","plant","ts","seq","values":[...]}`` (values in the plant's configured order)
* flags    ``{"site","plant","ts","seq","zc","za","eps","model_version"}`` (published flags only)
* verdicts ``{"site","ts","seq","root_cause","propagated","posterior","evidence_window","id"}``
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from fedrca.exceptions import MessageError

__all__ = [
    "DEADLETTER_REASONS",
    "FlagMessage",
    "SensorMessage",
    "deadletter_headers",
    "decode_flag",
    "decode_sensor",
    "decode_sensors",
    "encode",
    "encode_flags",
]

#: Every reason a message can be dead-lettered for.
DEADLETTER_REASONS = (
    "malformed-json",
    "missing-field",
    "wrong-site",
    "unknown-plant",
    "wrong-length",
    "non-finite",
    "bad-seq",
    "bad-timestamp",
    "bad-flag",
    "late",
)

#: Timestamps further in the future than this (seconds) are out of range.
MAX_FUTURE_SECONDS = 86_400.0

#: Types a JSON number decodes to (``bool`` is not one of them).
_NUMBER_TYPES = frozenset((int, float))
#: The decoder behind ``json.loads`` (default settings).
_DECODER = json.JSONDecoder()


@dataclass(frozen=True)
class SensorMessage:
    """One validated sensor reading of one plant."""

    site: str
    plant: str
    ts: float
    seq: int
    values: NDArray[np.float64]


@dataclass(frozen=True)
class FlagMessage:
    """One validated published-flag message."""

    site: str
    plant: str
    ts: float
    seq: int
    zc: int
    za: int
    eps: float
    model_version: str

    def to_dict(self) -> dict[str, Any]:
        """The JSON contract."""
        return {
            "site": self.site,
            "plant": self.plant,
            "ts": self.ts,
            "seq": self.seq,
            "zc": self.zc,
            "za": self.za,
            "eps": None if math.isinf(self.eps) else self.eps,
            "model_version": self.model_version,
        }


def encode(message: dict[str, Any]) -> bytes:
    """Compact JSON bytes of a message dict.

    Examples
    --------
    >>> encode({"seq": 1, "values": [1.5]})
    b'{"seq":1,"values":[1.5]}'
    """
    return json.dumps(message, separators=(",", ":"), allow_nan=False).encode("utf-8")


def _parse(raw: bytes | str) -> dict[str, Any]:
    try:
        data = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise MessageError("malformed-json", f"not JSON: {exc}") from None
    if not isinstance(data, dict):
        raise MessageError("malformed-json", f"expected a JSON object, got {type(data).__name__}")
    return data


def _finite(number: int | float) -> bool:
    try:
        return math.isfinite(number)
    except OverflowError:  # a JSON integer beyond the float range
        return False


def _common(
    data: dict[str, Any], site: str, plants: dict[str, int] | set[str], now: float | None
) -> tuple[str, float, int]:
    for key in ("site", "plant", "ts", "seq"):
        if key not in data:
            raise MessageError("missing-field", f"no '{key}' in message")
    if data["site"] != site:
        raise MessageError("wrong-site", f"site '{data['site']}' is not '{site}'")
    plant = data["plant"]
    if not isinstance(plant, str) or plant not in plants:
        raise MessageError("unknown-plant", f"plant {plant!r} is not one of {sorted(plants)}")
    seq = data["seq"]
    if isinstance(seq, bool) or not isinstance(seq, int) or seq < 0:
        raise MessageError("bad-seq", f"seq must be a non-negative integer, got {seq!r}")
    ts = data["ts"]
    if isinstance(ts, bool) or not isinstance(ts, int | float) or not _finite(ts):
        raise MessageError("bad-timestamp", f"ts must be a finite number of seconds, got {ts!r}")
    horizon = (time.time() if now is None else now) + MAX_FUTURE_SECONDS
    if ts < 0 or ts > horizon:
        raise MessageError("bad-timestamp", f"ts {ts} is outside [0, now + {MAX_FUTURE_SECONDS:.0f} s]")
    return plant, float(ts), seq


def decode_sensor(
    raw: bytes | str, site: str, sensor_counts: dict[str, int], now: float | None = None
) -> SensorMessage:
    """Validate a sensors-topic message.

    Parameters
    ----------
    raw : the message value
    site : the expected site
    sensor_counts : plant name -> number of configured sensors
    now : current time (seconds since epoch) for the timestamp range check

    Raises
    ------
    MessageError
        With one of :data:`DEADLETTER_REASONS`.

    Examples
    --------
    >>> m = decode_sensor(b'{"site":"s","plant":"p","ts":0,"seq":3,"values":[1,2]}', "s", {"p": 2})
    >>> m.seq, m.values.tolist()
    (3, [1.0, 2.0])
    >>> decode_sensor(b'{"site":"s","plant":"p","ts":0,"seq":3,"values":[1]}', "s", {"p": 2})
    Traceback (most recent call last):
    ...
    fedrca.exceptions.MessageError: wrong-length: plant 'p' has 2 sensors, message has 1 values
    """
    data = _parse(raw)
    plant, ts, seq = _common(data, site, sensor_counts, now)
    values = data.get("values")
    if not isinstance(values, list):
        raise MessageError("missing-field", "no 'values' list in message")
    if len(values) != sensor_counts[plant]:
        raise MessageError(
            "wrong-length", f"plant '{plant}' has {sensor_counts[plant]} sensors, message has {len(values)} values"
        )
    if not all(isinstance(v, int | float) and not isinstance(v, bool) for v in values):
        raise MessageError("non-finite", "values must all be numbers")
    try:
        array = np.asarray(values, dtype=np.float64)
    except OverflowError:  # a JSON integer beyond the float range
        raise MessageError("non-finite", "a value is beyond the float range") from None
    if not np.all(np.isfinite(array)):
        raise MessageError("non-finite", f"NaN or inf at position {int(np.argmin(np.isfinite(array)))}")
    return SensorMessage(site, plant, ts, seq, array)


def decode_sensors(
    raws: list[bytes], site: str, sensor_counts: dict[str, int], now: float | None = None
) -> tuple[list[SensorMessage], list[tuple[bytes, MessageError]]]:
    """:func:`decode_sensor` over a batch, with the value checks vectorised over the batch.

    Returns the valid messages and the rejected ones (original bytes, error), each in
    arrival order: exactly what :func:`decode_sensor` gives message by message. The hot
    path is a handful of type checks per message and one float conversion and finiteness
    check for the whole batch; a message that fails any of them is decoded again by
    :func:`decode_sensor`, which names the problem. The ``values`` of the valid messages
    are rows of one array per batch (float64, shape (D_m,)).

    Examples
    --------
    >>> ok, bad = decode_sensors([b'{"site":"s","plant":"p","ts":0,"seq":3,"values":[1,2]}', b'{'], "s", {"p": 2})
    >>> [(m.seq, m.values.tolist()) for m in ok], [err.reason for _, err in bad]
    ([(3, [1.0, 2.0])], ['malformed-json'])
    """
    horizon = (time.time() if now is None else now) + MAX_FUTURE_SECONDS
    parse = _DECODER.decode  # json.loads without its per-call encoding detection
    numbers = _NUMBER_TYPES
    fast: list[tuple[int, str, float, int, int]] = []  # (index, plant, ts, seq, number of values)
    flat: list[float] = []
    slow: list[int] = []
    for i, raw in enumerate(raws):
        try:
            # strict UTF-8 (a BOM or UTF-16 fails here and takes the slow path, as json.loads would decode it)
            data = parse(raw.decode() if isinstance(raw, bytes) else raw)
            plant, ts, seq, values = data["plant"], data["ts"], data["seq"], data["values"]
            n = sensor_counts[plant]
            ok = (
                data["site"] == site
                and type(plant) is str
                and type(seq) is int
                and seq >= 0
                and (type(ts) is float or type(ts) is int)
                and 0 <= ts <= horizon  # also false for NaN and inf
                and type(values) is list
                and 0 < n == len(values)
                and set(map(type, values)) <= numbers
            )
        except (ValueError, KeyError, TypeError):  # not JSON, not an object, a field missing, ...
            ok = False
        if ok:
            fast.append((i, plant, float(ts), seq, n))
            flat.extend(values)
        else:
            slow.append(i)
    decoded: dict[int, SensorMessage] = {}
    if fast:
        try:
            array = np.array(flat, dtype=np.float64)
        except OverflowError:  # an integer beyond float range: let decode_sensor handle each message
            array = None
            slow += [i for i, *_ in fast]
        if array is not None:
            lengths = np.array([n for *_, n in fast])
            starts = np.cumsum(lengths) - lengths
            finite = np.logical_and.reduceat(np.isfinite(array), starts)
            for (i, plant, ts, seq, n), start, good in zip(fast, starts.tolist(), finite.tolist(), strict=True):
                if good:
                    decoded[i] = SensorMessage(site, plant, ts, seq, array[start : start + n])
                else:
                    slow.append(i)
    rejected: dict[int, MessageError] = {}
    for i in slow:
        try:
            decoded[i] = decode_sensor(raws[i], site, sensor_counts, now)
        except MessageError as err:
            rejected[i] = err
    valid = [decoded[i] for i in sorted(decoded)]
    return valid, [(raws[i], rejected[i]) for i in sorted(rejected)]


def encode_flags(flags: list[FlagMessage]) -> list[bytes]:
    """``[encode(f.to_dict()) for f in flags]``, with the fields a plant's batch shares encoded once.

    Examples
    --------
    >>> f = FlagMessage("s", "p", 180.0, 1, 1, 0, math.inf, "v1")
    >>> encode_flags([f]) == [encode(f.to_dict())]
    True
    """
    out = []
    parts: dict[tuple[str, str, float, str], tuple[str, str]] = {}
    for f in flags:
        if not (type(f.ts) is float and math.isfinite(f.ts) and type(f.seq) is type(f.zc) is type(f.za) is int):
            out.append(encode(f.to_dict()))  # anything unusual: json decides
            continue
        shared = (f.site, f.plant, f.eps, f.model_version)
        head_tail = parts.get(shared)
        if head_tail is None:
            whole = f.to_dict()
            head = encode({"site": whole["site"], "plant": whole["plant"]}).decode()[:-1] + ',"ts":'
            tail = "," + encode({"eps": whole["eps"], "model_version": whole["model_version"]}).decode()[1:]
            head_tail = parts[shared] = (head, tail)
        head, tail = head_tail
        # json writes a finite float as float.__repr__ and an int as int.__repr__
        out.append(f'{head}{float.__repr__(f.ts)},"seq":{int.__repr__(f.seq)},"zc":{f.zc},"za":{f.za}{tail}'.encode())
    return out


def decode_flag(raw: bytes | str, site: str, plants: set[str], now: float | None = None) -> FlagMessage:
    """Validate a flags-topic message (same rules; zc/za must be 0 or 1).

    Examples
    --------
    >>> raw = b'{"site":"s","plant":"p","ts":1,"seq":0,"zc":1,"za":0,"eps":null,"model_version":"v1"}'
    >>> decode_flag(raw, "s", {"p"}).zc
    1
    """
    data = _parse(raw)
    plant, ts, seq = _common(data, site, plants, now)
    flags = []
    for key in ("zc", "za"):
        value = data.get(key)
        if value not in (0, 1) or isinstance(value, float):
            raise MessageError("bad-flag", f"'{key}' must be 0 or 1, got {value!r}")
        flags.append(int(value))
    eps = data.get("eps")
    return FlagMessage(
        site,
        plant,
        ts,
        seq,
        flags[0],
        flags[1],
        math.inf if eps is None else float(eps),
        str(data.get("model_version", "")),
    )


def deadletter_headers(error: MessageError, stage: str, source_topic: str) -> list[tuple[str, bytes]]:
    """Kafka headers that travel with the original bytes to the dead-letter topic."""
    return [
        ("fedrca-reason", error.reason.encode()),
        ("fedrca-detail", error.detail.encode()),
        ("fedrca-stage", stage.encode()),
        ("fedrca-source-topic", source_topic.encode()),
    ]
