"""The stream messages (JSON) as validated, immutable value objects, and their codecs.

Pure functions: bytes in, typed message or :class:`MessageError` out. Every
rejection carries a :class:`~fedrca.contracts.deadletter.DeadLetterReason`
(used as a metrics label and a dead-letter header) and a human ``detail``.

Contracts (one schema each, used by the topics, the replay files and the reports):

* sensors  ``{"site","plant","ts","seq","values":[...],"quality":[...]?}`` (values in the plant's
  configured order). A value may be ``null``: no usable value (missing, Bad, stale); the optional
  ``quality`` list (aligned with ``values``) says why, with the codes of :class:`Quality`. A value
  whose quality is not good is not used (it decodes as NaN whatever number was sent), a ``null``
  without a code is missing. In memory :attr:`SensorMessage.values` holds NaN where the wire holds
  ``null`` (NaN itself never travels: a ``NaN`` or ``Infinity`` literal or a number beyond the float
  range is refused, ``non-finite``), and :attr:`SensorMessage.quality` the codes (all good when the
  list is absent). A missing value is plant data, not bad input: the message is never refused for it.
* flags    ``{"site","plant","ts","seq","zc","za","eps","model_version"}`` (published flags only;
  ``"withheld": true`` with zc = za = 0 when the plant's privacy budget stopped it publishing;
  ``"degraded": true`` with zc = za = 0 when the plant's row had fewer usable sensors than its
  configured minimum and was not scored — one bit, never which sensors; ``"sensor_fault": true`` when
  the plant has a sensor fault at that sample — one bit, randomized like the flags, never which tag
  (docs/sensors.md)), plus ``"level","level_eps"`` when the plant publishes severity levels (k-ary
  randomized response). Optional fields appear only when set; a consumer reads them with a default.
* verdicts ``{"site","ts","seq","root_cause","propagated","posterior","evidence_window","outcome","candidates",
  "probabilities","level","calibration","reason","id"}`` (the reason: :mod:`fedrca.contracts.reason`)
  plus ``"sensor_plants"`` on a sensor event (outcome ``sensor_fault`` / ``sensor_recovered``: the
  plants whose sensor fault it reports; never a process root cause, ``root_cause`` is null)
"""

from __future__ import annotations

import hashlib
import json
import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import MISSING, dataclass, field, fields
from enum import IntEnum
from typing import Any

import numpy as np
import orjson
from numpy.typing import ArrayLike, NDArray

from fedrca.contracts.bounds import (
    MAX_NAME_CHARS,
    MAX_RECORD_BYTES,
    MAX_TEXT_CHARS,
    check_name,
    parse_json,
    short,
)
from fedrca.contracts.deadletter import DeadLetterReason as R
from fedrca.contracts.reason import (
    MAX_CANDIDATES,
    MAX_PROPAGATED,
    MAX_VERDICT_BYTES,
    MAX_VERDICT_NAME_CHARS,
    Reason,
)
from fedrca.exceptions import MessageError

__all__ = [
    "PRIVACY_WITHHELD",
    "SENSOR_FAULT",
    "SENSOR_OUTCOMES",
    "SENSOR_RECOVERED",
    "FlagColumns",
    "FlagMessage",
    "Quality",
    "SensorMessage",
    "Verdict",
    "decode_flag",
    "decode_flag_columns",
    "decode_flags",
    "decode_sensor",
    "decode_sensors",
    "encode",
    "encode_flags",
    "verdict_id",
]

#: Timestamps further in the future than this (seconds) are out of range.
MAX_FUTURE_SECONDS = 86_400.0
#: Largest magnitude of a sensor value: beyond it the detector's squares and products overflow
#: (the data files' bound too, :mod:`fedrca.datasets.nominal`).
MAX_ABS_VALUE = 1e150
#: Largest sample number: integers up to 2^53 are exact as JSON numbers of any reader, and a
#: stream of 1,000 samples a second takes 285,000 years to reach it.
MAX_SEQ = 2**53
#: Deepest JSON nesting of a sensor or flag message (an object holding lists).
MESSAGE_DEPTH = 2
#: Deepest JSON nesting of a verdict: the verdict, its reason, the reason's plants, a plant, its flag pair
#: (tests/contracts/test_reason.py encodes the largest verdict).
VERDICT_DEPTH = 5
#: Most plants a verdict may name (propagated, candidates): a site's plants are a few dozen.
MAX_VERDICT_PLANTS = 10_000
#: Most severity levels a plant publishes (``scoring.severity_levels``, docs/limits.md).
MAX_LEVELS = 64

#: Types a JSON number or null decodes to (``bool`` is not one of them).
_NUMBER_TYPES_OR_NULL = frozenset((int, float, type(None)))
#: Types a JSON number decodes to.
_NUMBER_TYPES = frozenset((int, float))


class Quality(IntEnum):
    """Why a sensor value is not usable: the codes of a sensor message's ``quality`` list.

    Anything but ``GOOD`` means the value is not used (it is NaN in :attr:`SensorMessage.values`).
    """

    GOOD = 0  #: a usable value
    BAD = 1  #: the device or protocol reported Bad quality
    STALE = 2  #: the edge had no fresh update within its bound
    MISSING = 3  #: never received, or no value


#: Quality codes as a set of ints (the decoder's check).
_QUALITY_CODES = frozenset(int(q) for q in Quality)
#: An all-good quality vector per sensor count, shared read-only (the decoder's hot path).
_ALL_GOOD: dict[int, NDArray[np.uint8]] = {}


def _all_good(n: int) -> NDArray[np.uint8]:
    good = _ALL_GOOD.get(n)
    if good is None:
        good = np.zeros(n, dtype=np.uint8)
        good.flags.writeable = False
        if len(_ALL_GOOD) < 64:  # a handful of plant widths; any other width gets its own array
            _ALL_GOOD[n] = good
    return good


@dataclass(frozen=True, init=False)
class SensorMessage:
    """One sensor reading of one plant: what a plant's sensors topic carries.

    Attributes
    ----------
    site, plant : who sent it
    ts : time of the reading, seconds since the epoch (or since the recording's start)
    seq : sample number (0-based row of the recording); a plant's stream is ordered by it
    values : (D,) float64 readings in the plant's configured sensor order; NaN where there is
        no usable value (``null`` on the wire)
    quality : (D,) uint8 :class:`Quality` codes, non-zero exactly where ``values`` is NaN;
        derived from ``values`` when not given (NaN is ``MISSING``)

    Raises
    ------
    MessageError
        ``bad-quality`` when ``quality`` is given and is not (D,) codes that are non-zero
        exactly where ``values`` is NaN.

    Examples
    --------
    >>> m = SensorMessage("s", "p", 0.0, 3, np.array([1.0, np.nan]))
    >>> m.quality.tolist(), m.missing.tolist()
    ([0, 3], [False, True])
    """

    site: str
    plant: str
    ts: float
    seq: int
    values: NDArray[np.float64]
    #: the codes as given (None: derived from ``values`` when first read, :attr:`quality`)
    _quality: NDArray[np.uint8] | None = field(default=None, compare=False, repr=False)

    def __init__(
        self, site: str, plant: str, ts: float, seq: int, values: NDArray[np.float64], quality: ArrayLike | None = None
    ) -> None:
        # a plant worker builds one per message: the codes are checked only when given, derived only when read
        setattr = object.__setattr__
        setattr(self, "site", site)
        setattr(self, "plant", plant)
        setattr(self, "ts", ts)
        setattr(self, "seq", seq)
        setattr(self, "values", values)
        setattr(self, "_quality", None if quality is None else self._checked(quality))

    def _checked(self, quality: ArrayLike) -> NDArray[np.uint8]:
        codes = np.asarray(quality)
        values = self.values
        if (
            codes.shape != values.shape
            or not np.array_equal(codes, codes.astype(np.uint8))
            or not np.isin(codes, list(_QUALITY_CODES)).all()
            or not np.array_equal(codes != 0, np.isnan(values))
        ):
            raise MessageError(
                R.BAD_QUALITY,
                f"plant '{self.plant}' seq {self.seq}: quality must be {values.shape} codes "
                f"{sorted(_QUALITY_CODES)}, non-zero exactly where a value is NaN",
            )
        return codes.astype(np.uint8, copy=False)

    @property
    def quality(self) -> NDArray[np.uint8]:
        """(D,) uint8 :class:`Quality` codes, non-zero exactly where ``values`` is NaN (NaN alone: ``MISSING``)."""
        codes = self._quality
        if codes is None:
            nan = np.isnan(self.values)
            codes = np.where(nan, np.uint8(Quality.MISSING), np.uint8(0)) if nan.any() else _all_good(len(nan))
            object.__setattr__(self, "_quality", codes)
        return codes

    @property
    def missing(self) -> NDArray[np.bool_]:
        """(D,) bool: True where there is no usable value (whatever the reason)."""
        return np.isnan(self.values)

    def to_dict(self) -> dict[str, Any]:
        """The JSON contract: ``null`` for NaN; ``quality`` only when a code says more than missing."""
        out: dict[str, Any] = {"site": self.site, "plant": self.plant, "ts": self.ts, "seq": self.seq}
        values = self.values.tolist()
        if self._quality is None and not np.isnan(self.values).any():
            out["values"] = values  # every value good: no null, no quality list
            return out
        quality = self.quality
        out["values"] = [None if q else v for v, q in zip(values, quality.tolist(), strict=True)]
        if ((quality != 0) & (quality != Quality.MISSING)).any():
            out["quality"] = quality.tolist()
        return out

    def encode(self) -> bytes:
        """Compact JSON bytes; :class:`MessageError` (``non-finite``) for infinite values.

        Examples
        --------
        >>> SensorMessage("s", "p", 0.0, 3, np.array([1.0, 2.5])).encode()
        b'{"site":"s","plant":"p","ts":0.0,"seq":3,"values":[1.0,2.5]}'
        >>> SensorMessage("s", "p", 0.0, 3, np.array([np.nan, 2.5])).encode()
        b'{"site":"s","plant":"p","ts":0.0,"seq":3,"values":[null,2.5]}'
        >>> SensorMessage("s", "p", 0.0, 3, np.array([np.nan, 2.5]), np.array([Quality.BAD, 0])).encode()
        b'{"site":"s","plant":"p","ts":0.0,"seq":3,"values":[null,2.5],"quality":[1,0]}'
        """
        try:
            return encode(self.to_dict())
        except ValueError:
            raise MessageError(
                R.NON_FINITE, f"plant '{self.plant}' seq {self.seq}: infinite values cannot be sent"
            ) from None


#: Verdict outcome while a plant withholds its flags (its privacy budget is exhausted and
#: ``privacy.on_exhausted`` is ``stop``): the verdict was reached without that plant's evidence.
PRIVACY_WITHHELD = "privacy_withheld"
#: Outcome of a sensor event: the plants in ``sensor_plants`` report a sensor fault from this
#: sample on (a broken tag, not a process fault; docs/sensors.md). Never names a root cause.
SENSOR_FAULT = "sensor_fault"
#: Outcome of a sensor event: the plants in ``sensor_plants`` report no sensor fault any more.
SENSOR_RECOVERED = "sensor_recovered"
#: The outcomes of sensor events.
SENSOR_OUTCOMES = (SENSOR_FAULT, SENSOR_RECOVERED)


@dataclass(frozen=True)
class FlagMessage:
    """One validated published-flag message.

    ``withheld`` marks a sample whose flags the plant did not publish (privacy budget
    exhausted): its bits are 0 and carry no evidence; the RCA judges the row without it.
    ``degraded`` marks a sample the plant did not score (fewer usable sensors than its
    configured minimum): its bits are 0 and carry no evidence either, neither alarm nor
    clearance; the bit says nothing of which sensors were missing.
    ``sensor_fault`` says the plant has a sensor fault at this sample (a tag stale, Bad, stuck,
    flat or out of range, excluded from its statistics; :mod:`fedrca.detectors.health`), after
    randomized response of budget ``eps`` like the flags; never which tag. A degraded sample
    carries it too; a withheld one publishes nothing.
    ``level`` is the published severity level of the proprietary score (0 = no alarm,
    1, 2, ... for each factor ``severity_base`` above the threshold) after its k-ary
    randomized response of budget ``level_eps``; None when the plant publishes no levels
    (then the two fields are left out of the JSON).
    """

    site: str
    plant: str
    ts: float
    seq: int
    zc: int
    za: int
    eps: float
    model_version: str
    withheld: bool = False
    level: int | None = None
    level_eps: float = math.inf
    degraded: bool = False
    sensor_fault: bool = False

    @property
    def evidence(self) -> bool:
        """Whether the bits carry evidence (False for a withheld or degraded sample)."""
        return not (self.withheld or self.degraded)

    def to_dict(self) -> dict[str, Any]:
        """The JSON contract (``withheld``, ``degraded``, ``sensor_fault`` and the levels only when set)."""
        out: dict[str, Any] = {
            "site": self.site,
            "plant": self.plant,
            "ts": self.ts,
            "seq": self.seq,
            "zc": self.zc,
            "za": self.za,
            "eps": None if math.isinf(self.eps) else self.eps,
            "model_version": self.model_version,
        }
        if self.withheld:
            out["withheld"] = True
        if self.degraded:
            out["degraded"] = True
        if self.sensor_fault:
            out["sensor_fault"] = True
        if self.level is not None:
            out["level"] = self.level
            out["level_eps"] = None if math.isinf(self.level_eps) else self.level_eps
        return out


def encode(message: dict[str, Any]) -> bytes:
    """Compact JSON bytes of a message dict.

    Examples
    --------
    >>> encode({"seq": 1, "values": [1.5]})
    b'{"seq":1,"values":[1.5]}'
    """
    return json.dumps(message, separators=(",", ":"), allow_nan=False).encode("utf-8")


def _parse(raw: bytes | str, what: str = "the message", max_depth: int = MESSAGE_DEPTH) -> dict[str, Any]:
    data = parse_json(raw, what, max_depth=max_depth)
    if not isinstance(data, dict):
        raise MessageError(R.MALFORMED_JSON, f"expected a JSON object, got {type(data).__name__}")
    return data


def _finite(number: int | float) -> bool:
    try:
        return math.isfinite(number)
    except OverflowError:  # a JSON integer beyond the float range
        return False


def _number(value: Any) -> bool:
    """A JSON number (``bool`` is not one)."""
    return type(value) in _NUMBER_TYPES


def _seq(value: Any, what: str = "seq") -> int:
    if type(value) is not int or not 0 <= value <= MAX_SEQ:
        raise MessageError(R.BAD_SEQ, f"{what} must be an integer in 0..{MAX_SEQ}, got {short(value)}")
    return value


def _common(
    data: dict[str, Any], site: str, plants: dict[str, int] | set[str], now: float | None
) -> tuple[str, float, int]:
    for key in ("site", "plant", "ts", "seq"):
        if key not in data:
            raise MessageError(R.MISSING_FIELD, f"no '{key}' in message")
    if data["site"] != site:
        raise MessageError(R.WRONG_SITE, f"site {short(data['site'])} is not '{site}'")
    plant = data["plant"]
    if not isinstance(plant, str) or plant not in plants:
        raise MessageError(R.UNKNOWN_PLANT, f"plant {short(plant)} is not one of {short(sorted(plants), 200)}")
    seq = _seq(data["seq"])
    ts = data["ts"]
    if not _number(ts) or not _finite(ts):
        raise MessageError(R.BAD_TIMESTAMP, f"ts must be a finite number of seconds, got {short(ts)}")
    horizon = (time.time() if now is None else now) + MAX_FUTURE_SECONDS
    if ts < 0 or ts > horizon:
        raise MessageError(R.BAD_TIMESTAMP, f"ts {short(ts)} is outside [0, now + {MAX_FUTURE_SECONDS:.0f} s]")
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
        With a :class:`~fedrca.contracts.deadletter.DeadLetterReason`.

    Examples
    --------
    >>> m = decode_sensor(b'{"site":"s","plant":"p","ts":0,"seq":3,"values":[1,2]}', "s", {"p": 2})
    >>> m.seq, m.values.tolist()
    (3, [1.0, 2.0])
    >>> m = decode_sensor(b'{"site":"s","plant":"p","ts":0,"seq":3,"values":[null,2],"quality":[2,0]}', "s", {"p": 2})
    >>> m.values.tolist(), [Quality(q).name for q in m.quality]
    ([nan, 2.0], ['STALE', 'GOOD'])
    >>> decode_sensor(b'{"site":"s","plant":"p","ts":0,"seq":3,"values":[1]}', "s", {"p": 2})
    Traceback (most recent call last):
    ...
    fedrca.exceptions.MessageError: wrong-length: plant 'p' has 2 sensors, message has 1 values
    """
    data = _parse(raw, "a sensor message")
    plant, ts, seq = _common(data, site, sensor_counts, now)
    values = data.get("values")
    if not isinstance(values, list):
        raise MessageError(R.MISSING_FIELD, "no 'values' list in message")
    if len(values) != sensor_counts[plant]:
        raise MessageError(
            R.WRONG_LENGTH, f"plant '{plant}' has {sensor_counts[plant]} sensors, message has {len(values)} values"
        )
    if not all(v is None or (isinstance(v, int | float) and not isinstance(v, bool)) for v in values):
        raise MessageError(R.NON_FINITE, "values must all be numbers or null")
    try:
        # None -> NaN: the missing values
        array = np.asarray(values, dtype=np.float64)
    except OverflowError:  # a JSON integer beyond the float range
        raise MessageError(R.NON_FINITE, "a value is beyond the float range") from None
    nulls = np.fromiter((v is None for v in values), dtype=bool, count=len(values))
    bad = ~np.isfinite(array) & ~nulls  # a NaN or Infinity literal, or a float beyond its range
    if bad.any():
        raise MessageError(R.NON_FINITE, f"NaN or inf at position {int(np.argmax(bad))}")
    huge = np.abs(array) > MAX_ABS_VALUE  # False for the nulls' NaN
    if huge.any():
        raise MessageError(
            R.NON_FINITE,
            f"the value at position {int(np.argmax(huge))} is beyond +-{MAX_ABS_VALUE:g}, which overflows the "
            "detector's statistics",
        )
    quality = _decode_quality(data, len(values), nulls)
    if quality is None:
        return SensorMessage(site, plant, ts, seq, array)
    # a value whose quality is not good is not used, whatever number was sent
    array[quality != 0] = np.nan
    return SensorMessage(site, plant, ts, seq, array, quality)


def _decode_quality(data: dict[str, Any], n: int, nulls: NDArray[np.bool_]) -> NDArray[np.uint8] | None:
    """The ``quality`` list of a sensor message, made consistent with its nulls (None when it says nothing).

    A code other than good marks its value unusable; a null marked good is missing.
    """
    quality = data.get("quality")
    if quality is None:
        return None
    if (
        not isinstance(quality, list)
        or len(quality) != n
        or not all(type(q) is int and q in _QUALITY_CODES for q in quality)
    ):
        raise MessageError(
            R.BAD_QUALITY, f"'quality' must be a list of {n} codes {sorted(_QUALITY_CODES)} (Quality), one a value"
        )
    codes = np.asarray(quality, dtype=np.uint8)
    codes[nulls & (codes == Quality.GOOD)] = Quality.MISSING
    return codes


def decode_sensors(
    raws: list[bytes], site: str, sensor_counts: dict[str, int], now: float | None = None
) -> tuple[list[SensorMessage], list[tuple[bytes, MessageError]]]:
    """:func:`decode_sensor` over a batch, with the value checks vectorised over the batch.

    Returns the valid messages and the rejected ones (original bytes, error), each in
    arrival order: exactly what :func:`decode_sensor` gives message by message. The hot
    path is a handful of type checks per message and one float conversion and finiteness
    check for the whole batch; a message that fails any of them is decoded again by
    :func:`decode_sensor`, which names the problem. The ``values`` of the valid messages
    are rows of one array per batch (float64, shape (D_m,)), NaN where the message has a
    ``null``; a message with a ``quality`` list is decoded by :func:`decode_sensor`.

    Examples
    --------
    >>> ok, bad = decode_sensors([b'{"site":"s","plant":"p","ts":0,"seq":3,"values":[1,2]}', b'{'], "s", {"p": 2})
    >>> [(m.seq, m.values.tolist()) for m in ok], [str(err.reason) for _, err in bad]
    ([(3, [1.0, 2.0])], ['malformed-json'])
    """
    horizon = (time.time() if now is None else now) + MAX_FUTURE_SECONDS
    # strict JSON (as decode_flags): whatever orjson accepts, json.loads reads the same; a BOM, UTF-16, NaN
    # or an integer beyond 64 bits fails here and takes the slow path, where decode_sensor decides
    parse = orjson.loads
    numbers = _NUMBER_TYPES_OR_NULL
    null = type(None)
    # (index, plant, ts, seq, number of values, number of nulls)
    fast: list[tuple[int, str, float, int, int, int]] = []
    flat: list[float | None] = []
    slow: list[int] = []
    for i, raw in enumerate(raws):
        try:
            if len(raw) > MAX_RECORD_BYTES:
                raise ValueError("too large")  # decode_sensor names it
            data = parse(raw)
            plant, ts, seq, values = data["plant"], data["ts"], data["seq"], data["values"]
            n = sensor_counts[plant]
            types = set(map(type, values))
            ok = (
                data["site"] == site
                and type(plant) is str
                and type(seq) is int
                and 0 <= seq <= MAX_SEQ
                and (type(ts) is float or type(ts) is int)
                and 0 <= ts <= horizon  # also false for NaN and inf
                and type(values) is list
                and 0 < n == len(values)
                and types <= numbers
                and "quality" not in data  # quality codes: decode_sensor checks them
                # any other key (its nesting, e.g. ``"extra": [[1]]``, is bounded there): decode_sensor decides
                # (tests/contracts/test_fuzz_decoders.py: the batch decoder agrees with the one-message decoder)
                and len(data) == 5
            )
        except (ValueError, KeyError, TypeError, RecursionError):  # not JSON, not an object, a field missing, ...
            ok = False
        if ok:
            fast.append((i, plant, float(ts), seq, n, values.count(None) if null in types else 0))
            flat.extend(values)
        else:
            slow.append(i)
    decoded: dict[int, SensorMessage] = {}
    if fast:
        try:
            array = np.array(flat, dtype=np.float64)  # None -> NaN: the missing values
        except OverflowError:  # an integer beyond float range: let decode_sensor handle each message
            array = None
            slow += [i for i, *_ in fast]
        if array is not None:
            lengths = np.array([f[4] for f in fast])
            starts = np.cumsum(lengths) - lengths
            # within the bound: False for NaN (a null, or a NaN literal), inf and the huge
            finite = np.logical_and.reduceat(np.abs(array) <= MAX_ABS_VALUE, starts)
            for (i, plant, ts, seq, n, nulls), start, good in zip(fast, starts.tolist(), finite.tolist(), strict=True):
                values = array[start : start + n]
                if good or (
                    nulls and not (np.abs(values) > MAX_ABS_VALUE).any() and np.count_nonzero(np.isnan(values)) == nulls
                ):
                    # every value within the bound, or every one out of it a null (no NaN literal, no inf, none huge)
                    decoded[i] = _sensor_message(site, plant, ts, seq, values)
                else:
                    slow.append(i)
    rejected: dict[int, MessageError] = {}
    for i in slow:
        try:
            decoded[i] = decode_sensor(raws[i], site, sensor_counts, now)
        except MessageError as err:
            rejected[i] = err
    # without a slow message, the fast ones came in arrival order
    valid = list(decoded.values()) if not slow else [decoded[i] for i in sorted(decoded)]
    return valid, [(raws[i], rejected[i]) for i in sorted(rejected)]


def _sensor_message(site: str, plant: str, ts: float, seq: int, values: NDArray[np.float64]) -> SensorMessage:
    """``SensorMessage(site, plant, ts, seq, values)`` without its ``__init__`` (every field set, no quality codes:
    derived when read), for the values :func:`decode_sensors` checked: a plant worker builds one per message
    (``tests/contracts/test_batch_codecs.py``: the same messages as :func:`decode_sensor`'s)."""
    message = object.__new__(SensorMessage)
    object.__setattr__(message, "__dict__", {
        "site": site, "plant": plant, "ts": ts, "seq": seq, "values": values, "_quality": None,
    })  # fmt: skip
    return message


#: The JSON around a flag's own fields, by what a plant's flags share (:func:`encode_flags`; a few keys per plant)
_FLAG_PARTS: dict[tuple[Any, ...], tuple[str, str, str]] = {}
#: Keys :data:`_FLAG_PARTS` holds at most (cleared when full: a worker's plants and versions are a handful).
_FLAG_PARTS_KEPT = 1024


def encode_flags(flags: list[FlagMessage]) -> list[bytes]:
    """``[encode(f.to_dict()) for f in flags]``, with the fields a plant's flags share encoded once.

    What a plant's flags share (site, plant, epsilons, model version) is encoded once per worker and
    kept (:data:`_FLAG_PARTS`), keyed by the values and their types: a plant worker encodes a few
    flags per batch, hundreds of batches a second.

    Examples
    --------
    >>> f = FlagMessage("s", "p", 180.0, 1, 1, 0, math.inf, "v1")
    >>> encode_flags([f]) == [encode(f.to_dict())]
    True
    """
    out = []
    parts = _FLAG_PARTS
    for f in flags:
        level, eps, level_eps = f.level, f.eps, f.level_eps
        if (
            f.withheld
            or f.degraded
            or f.sensor_fault
            or not (type(f.ts) is float and math.isfinite(f.ts) and type(f.seq) is type(f.zc) is type(f.za) is int)
            or not (level is None or type(level) is int)
            or not (type(f.site) is type(f.plant) is type(f.model_version) is str)
            # a positive int or float epsilon (equal values of one type write the same JSON: not 0.0 and -0.0)
            or not ((type(eps) is float or type(eps) is int) and eps > 0)
            or not (level is None or ((type(level_eps) is float or type(level_eps) is int) and level_eps > 0))
        ):
            out.append(encode(f.to_dict()))  # anything unusual: json decides
            continue
        # what follows za (eps, model_version, and with a level its level_eps) is shared by a plant's flags
        shared = (f.site, f.plant, type(eps), eps, f.model_version, level is None or (type(level_eps), level_eps))
        found = parts.get(shared)
        if found is None:
            whole = f.to_dict()
            head = encode({"site": whole["site"], "plant": whole["plant"]}).decode()[:-1] + ',"ts":'
            rest = {"eps": whole["eps"], "model_version": whole["model_version"]}
            if level is not None:
                rest |= {"level": 0, "level_eps": whole["level_eps"]}
            tail = "," + encode(rest).decode()[1:]
            # with a level: the tail up to '"level":' and after the level's digits
            before, _, after = tail.partition('"level":0') if level is not None else (tail, "", "")
            if len(parts) >= _FLAG_PARTS_KEPT:
                parts.clear()
            found = parts[shared] = (head, before, after)
        head, before, after = found
        # json writes a finite float as float.__repr__ and an int as int.__repr__
        text = f'{head}{float.__repr__(f.ts)},"seq":{int.__repr__(f.seq)},"zc":{f.zc},"za":{f.za}{before}'
        out.append((text if level is None else f'{text}"level":{int.__repr__(level)}{after}').encode())
    return out


def _epsilon(value: Any, key: str) -> float:
    """A published epsilon: ``null`` (no randomized response) or a positive finite number."""
    if value is None:
        return math.inf
    if not _number(value) or not _finite(value) or value <= 0:
        raise MessageError(R.BAD_FLAG, f"'{key}' must be null or a positive finite number, got {short(value)}")
    return float(value)


def decode_flag(raw: bytes | str, site: str, plants: set[str], now: float | None = None) -> FlagMessage:
    """Validate a flags-topic message (same rules; zc/za must be 0 or 1, a level a non-negative integer).

    Every field is checked for its type and bound (no field is converted from another
    type): ``eps`` and ``level_eps`` null or a positive finite number, ``level`` an integer
    below :data:`MAX_LEVELS`, ``model_version`` a text of at most :data:`MAX_TEXT_CHARS`.

    Examples
    --------
    >>> raw = b'{"site":"s","plant":"p","ts":1,"seq":0,"zc":1,"za":0,"eps":null,"model_version":"v1"}'
    >>> decode_flag(raw, "s", {"p"}).zc
    1
    """
    data = _parse(raw, "a flag message")
    plant, ts, seq = _common(data, site, plants, now)
    flags = []
    for key in ("zc", "za"):
        value = data.get(key)
        if type(value) is not int or value not in (0, 1):
            raise MessageError(R.BAD_FLAG, f"'{key}' must be 0 or 1, got {short(value)}")
        flags.append(value)
    withheld = data.get("withheld", False)
    if type(withheld) is not bool or (withheld and flags != [0, 0]):
        raise MessageError(R.BAD_FLAG, f"'withheld' must be true (with zc = za = 0) or false, got {short(withheld)}")
    degraded = data.get("degraded", False)
    if type(degraded) is not bool or (degraded and flags != [0, 0]):
        raise MessageError(R.BAD_FLAG, f"'degraded' must be true (with zc = za = 0) or false, got {short(degraded)}")
    sensor_fault = data.get("sensor_fault", False)
    if type(sensor_fault) is not bool or (sensor_fault and withheld):
        raise MessageError(
            R.BAD_FLAG, f"'sensor_fault' must be true or false (false on a withheld flag), got {short(sensor_fault)}"
        )
    eps = _epsilon(data.get("eps"), "eps")
    level = data.get("level")
    if level is not None and (type(level) is not int or not 0 <= level < MAX_LEVELS):
        raise MessageError(R.BAD_FLAG, f"'level' must be an integer in 0..{MAX_LEVELS - 1}, got {short(level)}")
    level_eps = _epsilon(data.get("level_eps"), "level_eps")
    version = data.get("model_version", "")
    if not isinstance(version, str) or len(version) > MAX_TEXT_CHARS:
        raise MessageError(
            R.BAD_FIELD, f"'model_version' must be a text of at most {MAX_TEXT_CHARS} characters, got {short(version)}"
        )
    return FlagMessage(
        site, plant, ts, seq, flags[0], flags[1], eps, version, withheld, level, level_eps, degraded, sensor_fault
    )


def _names(value: Any, field: str) -> tuple[str, ...]:
    if not isinstance(value, list) or len(value) > MAX_VERDICT_PLANTS:
        raise MessageError(R.BAD_FIELD, f"{field} must be a list of at most {MAX_VERDICT_PLANTS:,} plants, got "
                           f"{short(value)}")  # fmt: skip
    return tuple(check_name(p, field) for p in value)


def _json_list(data: Mapping[str, Any], key: str, required: bool = False) -> tuple[Any, ...]:
    """A JSON list field as a tuple (absent and not ``required``: empty); anything but a list is refused."""
    value = data[key] if required else data.get(key, [])
    if not isinstance(value, list | tuple):
        raise MessageError(R.BAD_FIELD, f"verdict field '{key}' must be a list, got {type(value).__name__}")
    return tuple(value)


#: The fields of a flag message :func:`decode_flags` decodes on its fast path (with or without the levels'):
#: any other field (``withheld``, ``degraded``, ``sensor_fault``, ...) takes :func:`decode_flag`.
_PLAIN_FLAG = frozenset(("site", "plant", "ts", "seq", "zc", "za", "eps", "model_version"))
_LEVEL_FLAG = _PLAIN_FLAG | {"level", "level_eps"}
#: The fields of a message :func:`decode_flag_columns` takes: the plain ones (with or without the levels'),
#: with or without the sensor-fault bit.
_COLUMN_SHAPES = {_PLAIN_FLAG, _LEVEL_FLAG, _PLAIN_FLAG | {"sensor_fault"}, _LEVEL_FLAG | {"sensor_fault"}}
#: The defaults of FlagMessage's optional fields (what :func:`decode_flags` sets before the message's own).
_FLAG_DEFAULTS = {f.name: f.default for f in fields(FlagMessage) if f.default is not MISSING}


def decode_flags(
    raws: list[bytes], site: str, plants: set[str] | dict[str, Any], now: float | None = None
) -> list[FlagMessage | MessageError]:
    """:func:`decode_flag` over a batch: per raw message, in order, its flag or the error that refuses it.

    The RCA worker's hot path: a message with only the contract's plain fields (and the
    levels) of the expected types is parsed by orjson (strict JSON: whatever it accepts,
    ``json.loads`` reads the same) and checked with a few type tests; anything else, or
    anything that fails a test, is decoded by :func:`decode_flag`, which names the problem.
    The result is exactly :func:`decode_flag`'s, message by message
    (``tests/contracts/test_batch_codecs.py``).

    Examples
    --------
    >>> raw = b'{"site":"s","plant":"p","ts":1,"seq":0,"zc":1,"za":0,"eps":null,"model_version":"v1"}'
    >>> [type(m).__name__ for m in decode_flags([raw, b"{"], "s", {"p"})]
    ['FlagMessage', 'MessageError']
    """
    horizon = (time.time() if now is None else now) + MAX_FUTURE_SECONDS
    out: list[FlagMessage | MessageError] = []
    inf = math.inf
    # the fast path's values are checked: its messages are built without the frozen dataclass's
    # per-field __init__ (half its cost), every field set, each default from the class's
    new, setattr_, defaults = object.__new__, object.__setattr__, _FLAG_DEFAULTS
    for raw in raws:
        try:
            # parse_json's size bound first; a message of the plain fields' scalar types nests 1 deep
            data: Any = orjson.loads(raw) if len(raw) <= MAX_RECORD_BYTES else None
            keys = data.keys()
            plain = keys == _PLAIN_FLAG
            plant, ts, seq, zc, za, eps, version = (
                data["plant"], data["ts"], data["seq"], data["zc"], data["za"], data["eps"], data["model_version"]
            )  # fmt: skip
            level, level_eps = (None, None) if plain else (data["level"], data["level_eps"])
            ok = (
                (plain or keys == _LEVEL_FLAG)
                and data["site"] == site
                and type(plant) is str
                and plant in plants
                and type(seq) is int
                and 0 <= seq <= MAX_SEQ
                and (type(ts) is float or type(ts) is int)
                and 0 <= ts <= horizon
                and type(zc) is int
                and type(za) is int
                and 0 <= zc <= 1
                and 0 <= za <= 1
                and (eps is None or ((type(eps) is float or type(eps) is int) and eps > 0))
                and type(version) is str
                and len(version) <= MAX_TEXT_CHARS
                and (level is None or (type(level) is int and 0 <= level < MAX_LEVELS))
                and (level_eps is None or ((type(level_eps) is float or type(level_eps) is int) and level_eps > 0))
            )
        except (orjson.JSONDecodeError, AttributeError, KeyError, TypeError):  # not JSON, not an object, ...
            ok = False
        if ok:
            flag = new(FlagMessage)
            # every field, in the class's order: the defaults first, then the message's own
            setattr_(flag, "__dict__", {
                **defaults,
                "site": site,
                "plant": plant,
                "ts": float(ts),
                "seq": seq,
                "zc": zc,
                "za": za,
                "eps": inf if eps is None else float(eps),
                "model_version": version,
                "level": level,
                "level_eps": inf if level_eps is None else float(level_eps),
            })  # fmt: skip
            out.append(flag)
            continue
        try:
            out.append(decode_flag(raw, site, plants, now))  # type: ignore[arg-type]
        except MessageError as err:
            out.append(err)
    return out


@dataclass(frozen=True, eq=False)
class FlagColumns:
    """A batch of validated plain flag messages as columns (:func:`decode_flag_columns`), in arrival order.

    Every message of the batch has only the contract's plain fields (and the levels', and the
    sensor-fault bit): none is withheld or degraded. Each column is a tuple of the values
    :class:`FlagMessage` holds (``ts``, ``eps`` and ``level_eps`` as floats, an absent epsilon
    as ``inf``); ``sensor_fault`` is None when no message of the batch carries the field (every
    bit False); :meth:`messages` gives the messages themselves.
    """

    site: str
    plant: tuple[str, ...]
    ts: tuple[float, ...]
    seq: tuple[int, ...]
    zc: tuple[int, ...]
    za: tuple[int, ...]
    eps: tuple[float, ...]
    model_version: tuple[str, ...]
    level: tuple[int | None, ...]
    level_eps: tuple[float, ...]
    sensor_fault: tuple[bool, ...] | None = None

    def __len__(self) -> int:
        return len(self.seq)

    def messages(self) -> list[FlagMessage]:
        """The messages, in order: equal to :func:`decode_flags` of the same batch."""
        site = self.site
        sensor = self.sensor_fault if self.sensor_fault is not None else (False,) * len(self.seq)
        return [
            FlagMessage(site, p, t, s, c, a, e, v, level=lv, level_eps=le, sensor_fault=sf)
            for p, t, s, c, a, e, v, lv, le, sf in zip(
                self.plant, self.ts, self.seq, self.zc, self.za, self.eps, self.model_version, self.level,
                self.level_eps, sensor, strict=True,
            )
        ]  # fmt: skip


_NONE = type(None)


def _epsilons(values: Sequence[Any]) -> tuple[float, ...] | None:
    """An epsilon column (each null or a positive JSON number) as :class:`FlagMessage` holds it (null: inf);
    None when a value is neither."""
    types = set(map(type, values))
    if types == {_NONE}:
        return (math.inf,) * len(values)
    if not types <= {_NONE, float, int}:
        return None
    numbers = values if _NONE not in types else [x for x in values if x is not None]
    if min(numbers) <= 0:
        return None
    return tuple([math.inf if x is None else float(x) for x in values])


def decode_flag_columns(
    raws: list[bytes], site: str, plants: set[str] | dict[str, Any], now: float | None = None
) -> FlagColumns | None:
    """A batch of flag messages as validated columns, or None when any message is not a plain valid one.

    The RCA worker's hot path: each message is parsed by orjson (as in :func:`decode_flags`), then
    every field of the whole batch is checked at once: its types by the set of the column's types
    (``bool`` is no integer, no text a number), its bounds by the column's minimum and maximum, the
    plants and the site by set inclusion. Only when every message passes is the batch returned;
    otherwise (a malformed, withheld or degraded message anywhere in it) the caller
    takes :func:`decode_flags`, which refuses the bad messages one by one with their reasons. The
    columns equal :func:`decode_flags`'s messages field by field
    (``tests/contracts/test_batch_codecs.py::test_flag_columns_equal_the_messages``). A batch whose
    messages all have their fields in one order (as one encoder writes them) is transposed at once.

    Examples
    --------
    >>> raw = b'{"site":"s","plant":"p","ts":1,"seq":0,"zc":1,"za":0,"eps":null,"model_version":"v1"}'
    >>> decode_flag_columns([raw, raw], "s", {"p"}).ts
    (1.0, 1.0)
    >>> decode_flag_columns([raw, b"{"], "s", {"p"}) is None
    True
    """
    horizon = (time.time() if now is None else now) + MAX_FUTURE_SECONDS
    loads = orjson.loads
    try:
        # parse_json's size bound first, as decode_flags
        datas: list[Any] = [loads(raw) if len(raw) <= MAX_RECORD_BYTES else None for raw in raws]
    except orjson.JSONDecodeError:
        return None
    if not datas:
        return FlagColumns(site, (), (), (), (), (), (), (), (), ())
    # every message an object of the plain fields, or of the plain and the levels', either with the
    # sensor-fault bit or without it (in any order)
    if set(map(type, datas)) != {dict}:
        return None
    orders = set(map(tuple, datas))
    shapes = {frozenset(keys) for keys in orders}
    if not shapes <= _COLUMN_SHAPES:
        return None
    n = len(datas)
    columns: dict[str, tuple[Any, ...]]
    if len(orders) == 1:
        # the common batch, every message's fields in one order (one producer's encoder): the columns
        # are the transposed values
        (order,) = orders
        columns = dict(zip(order, zip(*map(dict.values, datas), strict=True), strict=True))
    else:
        # an absent level or level_eps is None (as a null one); an absent sensor-fault bit False
        # (a null one is refused below)
        columns = {
            key: tuple([data.get(key, False if key == "sensor_fault" else None) for data in datas])
            for key in frozenset().union(*shapes)
        }
    sites, plant, ts, seq, zc, za, eps, version = (
        columns[key] for key in ("site", "plant", "ts", "seq", "zc", "za", "eps", "model_version")
    )
    nothing = (None,) * n
    level, level_eps = columns.get("level", nothing), columns.get("level_eps", nothing)
    sensor = columns.get("sensor_fault")
    level_types = set(map(type, level))
    levels = level if _NONE not in level_types else [x for x in level if x is not None]
    try:
        ok = (
            set(sites) == {site}
            and set(map(type, plant)) == {str}
            and set(plant) <= set(plants)
            and set(map(type, seq)) == {int}
            and min(seq) >= 0
            and max(seq) <= MAX_SEQ
            and set(map(type, ts)) <= {float, int}
            and min(ts) >= 0
            and max(ts) <= horizon
            and set(map(type, zc)) == {int}
            and set(zc) <= {0, 1}
            and set(map(type, za)) == {int}
            and set(za) <= {0, 1}
            and set(map(type, version)) == {str}
            and max(map(len, version)) <= MAX_TEXT_CHARS
            and level_types <= {_NONE, int}
            and (not levels or (min(levels) >= 0 and max(levels) < MAX_LEVELS))
            and (sensor is None or set(map(type, sensor)) == {bool})
        )
    except TypeError:  # an unhashable site or plant (a list, an object)
        return None
    eps_f = _epsilons(eps) if ok else None
    level_eps_f = _epsilons(level_eps) if eps_f is not None else None
    if eps_f is None or level_eps_f is None:
        return None
    return FlagColumns(
        site,
        tuple(plant),
        tuple(map(float, ts)),
        tuple(seq),
        tuple(zc),
        tuple(za),
        eps_f,
        tuple(version),
        tuple(level),
        level_eps_f,
        None if sensor is None or not any(sensor) else tuple(sensor),
    )


def verdict_id(site: str, root_cause: str | None, window: tuple[int, int], sensor: str | None = None) -> str:
    """Deterministic verdict id: the same verdict of the same evidence always gets the same id.

    ``sensor`` tells a sensor event apart (its outcome and plants): it shares no id with a
    process verdict of the same window.

    Examples
    --------
    >>> verdict_id("tep", "reactor", (161, 170)) == verdict_id("tep", "reactor", (161, 170))
    True
    >>> verdict_id("tep", None, (1, 9)) == verdict_id("tep", None, (1, 9), sensor="sensor_fault:reactor")
    False
    """
    key = f"{site}|{root_cause}|{window[0]}|{window[1]}"
    if sensor is not None:
        key += f"|{sensor}"
    return hashlib.sha1(key.encode()).hexdigest()[:16]


@dataclass(frozen=True)
class Verdict:
    """One RCA verdict: what the verdicts topic, the replay files and the reports carry.

    Attributes
    ----------
    site : the site
    ts : time of the row the verdict is issued at (seconds, the flags' timestamps)
    seq : row (sample index) at which the verdict is issued
    root_cause : the root-cause plant, or None (no anomaly, or not a single-root situation: see outcome)
    propagated : plants showing the propagated effect (at most :data:`~fedrca.contracts.reason.MAX_PROPAGATED`,
        the clearest)
    posterior : posterior probability of the decided hypothesis, in [0, 1] (6 digits)
    evidence_window : (first seq, last seq) of the rows the evidence came from, inclusive
    outcome : outcome code (:data:`fedrca.rca.table.OUTCOMES`)
    candidates : the root-cause candidates an operator is shown, most likely first: the smallest set of
        plants whose root probabilities reach ``level`` (at most :data:`~fedrca.contracts.reason.MAX_CANDIDATES`;
        empty when no root hypothesis has weight); the named root, when there is one, comes first
    probabilities : P(the root is this candidate) for each candidate, in [0, 1] (4 digits): calibrated on
        a fault library when ``calibration`` names the map, else the engine's own root posterior
        (over-confident: docs/rca.md "What the probabilities mean"); empty from producers without them
    level : the coverage level the candidate set was built for (``rca.coverage``), None when not stated
    calibration : id of the calibration map the probabilities come from, None = uncalibrated
    reason : why (:class:`~fedrca.contracts.reason.Reason`): the plants' alarms, paths, the look-up
        table's reading and what would change the verdict; None for verdicts that name no root
    sensor_plants : a sensor event (outcome in :data:`SENSOR_OUTCOMES`): the plants whose sensor
        fault began (``sensor_fault``) or ended (``sensor_recovered``); empty on every process
        verdict. A sensor event never names a root cause
    id : deterministic id (:func:`verdict_id`), derived; a re-processed window gives the same id

    Examples
    --------
    >>> v = Verdict("tep", 540.0, 3, "reactor", ("separator",), 0.97, (1, 3), "root_cause")
    >>> Verdict.decode(v.encode()) == v
    True
    >>> sorted(v.to_dict())[:5]
    ['calibration', 'candidates', 'evidence_window', 'id', 'level']
    >>> e = Verdict("tep", 540.0, 3, None, (), 1.0, (2, 3), SENSOR_FAULT, sensor_plants=("reactor",))
    >>> e.to_dict()["sensor_plants"], e.is_sensor_event, Verdict.decode(e.encode()) == e
    (['reactor'], True, True)
    """

    site: str
    ts: float
    seq: int
    root_cause: str | None
    propagated: tuple[str, ...]
    posterior: float
    evidence_window: tuple[int, int]
    outcome: str
    candidates: tuple[str, ...] = ()
    probabilities: tuple[float, ...] = ()
    level: float | None = None
    calibration: str | None = None
    reason: Reason | None = None
    sensor_plants: tuple[str, ...] = ()
    id: str = field(init=False)

    def __post_init__(self) -> None:
        if not 0.0 <= self.posterior <= 1.0:
            raise MessageError(R.BAD_FIELD, f"posterior must be in [0, 1], got {self.posterior!r}")
        self._check_candidates()
        # the contract carries 6 digits: a verdict equals itself after a trip over the wire
        object.__setattr__(self, "posterior", round(float(self.posterior), 6))
        first, last = self.evidence_window
        if first > last:
            raise MessageError(R.BAD_WINDOW, f"evidence window {self.evidence_window} is empty")
        sensor = None
        if self.sensor_plants or self.outcome in SENSOR_OUTCOMES:
            if self.outcome not in SENSOR_OUTCOMES or not self.sensor_plants or self.root_cause is not None:
                raise MessageError(
                    R.BAD_FIELD,
                    f"a sensor event has outcome {' or '.join(SENSOR_OUTCOMES)}, its plants in sensor_plants and "
                    f"no root cause; got outcome {self.outcome!r}, sensor_plants {list(self.sensor_plants)}, "
                    f"root_cause {self.root_cause!r}",
                )
            sensor = f"{self.outcome}:{','.join(self.sensor_plants)}"
        object.__setattr__(self, "id", verdict_id(self.site, self.root_cause, self.evidence_window, sensor))

    @property
    def is_sensor_event(self) -> bool:
        """True for a sensor event (a broken tag reported by its plant), False for a process verdict."""
        return bool(self.sensor_plants)

    def _check_candidates(self) -> None:
        """Bounded candidates with one probability each (or none), a level in (0, 1], a bounded map id."""
        propagated = tuple(self.propagated)
        if len(propagated) > MAX_PROPAGATED or not all(
            isinstance(p, str) and 0 < len(p) <= MAX_VERDICT_NAME_CHARS for p in propagated
        ):
            raise MessageError(R.BAD_FIELD, f"propagated must be at most {MAX_PROPAGATED} plant names")
        object.__setattr__(self, "propagated", propagated)
        candidates, probabilities = tuple(self.candidates), tuple(self.probabilities)
        if len(candidates) > MAX_CANDIDATES or not all(
            isinstance(c, str) and 0 < len(c) <= MAX_VERDICT_NAME_CHARS for c in candidates
        ):
            raise MessageError(R.BAD_FIELD, f"candidates must be at most {MAX_CANDIDATES} plant names")
        if probabilities and len(probabilities) != len(candidates):
            raise MessageError(R.BAD_FIELD, f"{len(probabilities)} probabilities for {len(candidates)} candidates")
        if not all(not isinstance(p, bool) and isinstance(p, int | float) and 0.0 <= p <= 1.0 for p in probabilities):
            raise MessageError(R.BAD_FIELD, "candidate probabilities must be numbers in [0, 1]")
        if sum(probabilities) > 1.0 + 1e-3:
            raise MessageError(R.BAD_FIELD, f"candidate probabilities sum to {sum(probabilities):.4f} > 1")
        object.__setattr__(self, "candidates", candidates)
        object.__setattr__(self, "probabilities", tuple(round(float(p), 4) for p in probabilities))
        level = self.level
        if level is not None and (isinstance(level, bool) or not isinstance(level, int | float) or not 0 < level <= 1):
            raise MessageError(R.BAD_FIELD, f"level must be in (0, 1], got {level!r:.40}")
        if self.calibration is not None and not (
            isinstance(self.calibration, str) and 0 < len(self.calibration) <= MAX_VERDICT_NAME_CHARS
        ):
            raise MessageError(R.BAD_FIELD, f"calibration must be an id of at most {MAX_VERDICT_NAME_CHARS} characters")
        if self.reason is not None and not isinstance(self.reason, Reason):
            raise MessageError(R.BAD_FIELD, "reason must be a Reason")

    def to_dict(self) -> dict[str, Any]:
        """The JSON contract (``sensor_plants`` only on a sensor event)."""
        out: dict[str, Any] = {
            "site": self.site,
            "ts": self.ts,
            "seq": self.seq,
            "root_cause": self.root_cause,
            "propagated": list(self.propagated),
            "posterior": self.posterior,
            "evidence_window": list(self.evidence_window),
            "outcome": self.outcome,
            "candidates": list(self.candidates),
            "probabilities": list(self.probabilities),
            "level": self.level,
            "calibration": self.calibration,
            "reason": None if self.reason is None else self.reason.to_dict(),
            "id": self.id,
        }
        if self.sensor_plants:
            out["sensor_plants"] = list(self.sensor_plants)
        return out

    def encode(self) -> bytes:
        """Compact JSON bytes (at most :data:`~fedrca.contracts.reason.MAX_VERDICT_BYTES`)."""
        raw = encode(self.to_dict())
        if len(raw) > MAX_VERDICT_BYTES:
            # unreachable with the bounded fields (tests/contracts/test_reason.py): a guard, not a path
            raise MessageError(R.BAD_FIELD, f"verdict of {len(raw)} bytes exceeds {MAX_VERDICT_BYTES}")
        return raw

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Verdict:
        """Validate a decoded verdict record; :class:`MessageError` when it breaks the contract.

        Every field must have its contract's type (nothing is converted: ``"3"`` is not a seq)
        and bound: names of at most :data:`~fedrca.contracts.bounds.MAX_NAME_CHARS` characters,
        at most :data:`MAX_VERDICT_PLANTS` plants in a list, a finite ``ts`` >= 0.
        """
        if not isinstance(data, Mapping):
            raise MessageError(R.MALFORMED_JSON, f"a verdict must be a JSON object, got {type(data).__name__}")
        for key in ("site", "ts", "seq", "root_cause", "propagated", "posterior", "evidence_window", "outcome"):
            if key not in data:
                raise MessageError(R.MISSING_FIELD, f"no '{key}' in verdict")
        site = check_name(data["site"], "site")
        ts = data["ts"]
        if not _number(ts) or not _finite(ts) or ts < 0:
            raise MessageError(R.BAD_TIMESTAMP, f"ts must be a finite number of seconds >= 0, got {short(ts)}")
        seq = _seq(data["seq"])
        root = data["root_cause"]
        root = None if root is None else check_name(root, "root_cause")
        propagated = _names(data["propagated"], "propagated")
        candidates = _names(data.get("candidates", []), "candidates")
        posterior = data["posterior"]
        if not _number(posterior) or not 0.0 <= posterior <= 1.0:
            raise MessageError(R.BAD_FIELD, f"posterior must be a number in [0, 1], got {short(posterior)}")
        window = data["evidence_window"]
        if not isinstance(window, list) or len(window) != 2:
            raise MessageError(R.BAD_WINDOW, f"evidence_window must be [first, last], got {short(window)}")
        first, last = (_seq(w, "evidence_window") for w in window)
        outcome = data["outcome"]
        if not isinstance(outcome, str) or len(outcome) > MAX_NAME_CHARS:
            raise MessageError(R.BAD_FIELD, f"outcome must be a short text, got {short(outcome)}")
        sensor_plants = _names(data.get("sensor_plants", []), "sensor_plants")
        reason = data.get("reason")
        try:
            # optional: verdicts of producers without probabilities or a reason (checked by __post_init__)
            verdict = cls(
                site, float(ts), seq, root, propagated, float(posterior), (first, last), outcome, candidates,
                _json_list(data, "probabilities"), data.get("level"), data.get("calibration"),
                None if reason is None else Reason.from_dict(reason), sensor_plants,
            )  # fmt: skip
        except (KeyError, TypeError, ValueError, IndexError) as exc:
            raise MessageError(R.BAD_FIELD, f"verdict field of the wrong type ({exc})") from None
        if "id" in data and data["id"] != verdict.id:
            raise MessageError(R.BAD_FIELD, f"verdict id {short(data['id'])} does not match its content")
        return verdict

    @classmethod
    def decode(cls, raw: bytes | str) -> Verdict:
        """Inverse of :meth:`encode`; a record longer than :data:`~fedrca.contracts.reason.MAX_VERDICT_BYTES`
        is refused before it is parsed."""
        if len(raw) > MAX_VERDICT_BYTES:
            raise MessageError(R.BAD_FIELD, f"verdict of {len(raw)} bytes exceeds {MAX_VERDICT_BYTES}")
        return cls.from_dict(_parse(raw, "a verdict", VERDICT_DEPTH))
