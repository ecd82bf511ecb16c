"""Messages of the federated training protocol and their lossless byte encoding.

Clients and the server exchange nothing but these dataclasses:

* :class:`StatesMessage` (client -> server): the plant's states for a window of
  time steps, already clipped and noised by the client (with the noise level);
* :class:`GradientMessage` (server -> client): the per-sample gradient of the
  server loss with respect to the client's augmented predicted states, clipped and
  noised by the server.

Both carry the round, the plant and the parameter version that produced them, and
encode to bytes (:func:`encode_message`) as a small header (JSON) followed by the
raw array buffers with their dtype (byte order included) and shape, so decoding
(:func:`decode_message`) gives back bit-identical arrays. The same bytes travel on
the Kafka topic ``<site>.train.<plant>`` in production and through
:class:`InProcessTransport` in the embedded default.

Examples
--------
>>> import numpy as np
>>> msg = GradientMessage(round=3, plant="reactor", version=2, start=10, grad=np.ones((4, 2)))
>>> decode_message(encode_message(msg)) == msg
True
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field, fields
from typing import ClassVar

import numpy as np
from numpy.typing import NDArray

from fedrca.contracts.binary import pack_arrays, unpack_arrays
from fedrca.contracts.deadletter import DeadLetterReason as R
from fedrca.exceptions import MessageError

__all__ = [
    "ENCODINGS",
    "GradientMessage",
    "InProcessTransport",
    "Message",
    "MomentsMessage",
    "OwnMomentsMessage",
    "ReleaseMessage",
    "StatesMessage",
    "decode_message",
    "encode_message",
    "quantisation_variance",
    "quantise",
]

FloatArray = NDArray[np.float64]


def _arrays_equal(a: np.ndarray | None, b: np.ndarray | None) -> bool:
    if a is None or b is None:
        return a is None and b is None
    return a.dtype == b.dtype and a.shape == b.shape and bool(np.array_equal(a, b, equal_nan=True))


@dataclass(frozen=True, eq=False)
class Message:
    """Common header: round number, plant id, parameter version, first time index of the window."""

    KIND: ClassVar[str] = ""
    ARRAYS: ClassVar[tuple[str, ...]] = ()

    round: int
    plant: str
    version: int
    start: int

    def __post_init__(self) -> None:
        for name in ("round", "version", "start"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < 0:
                raise MessageError(R.BAD_FIELD, f"{name} must be a non-negative integer, got {value!r}")
        if not isinstance(self.plant, str) or not self.plant:
            raise MessageError(R.BAD_FIELD, f"plant must be a non-empty string, got {self.plant!r}")
        shape: tuple[int, ...] | None = None
        for name in self.ARRAYS:
            value = getattr(self, name)
            if value is None:
                continue
            if not isinstance(value, np.ndarray) or value.ndim != 2:
                raise MessageError(R.BAD_ARRAY, f"{name} must be a 2-D numpy array (window, dim)")
            if shape is not None and value.shape[0] != shape[0]:
                raise MessageError(R.BAD_ARRAY, f"{name} has {value.shape[0]} rows, the window has {shape[0]}")
            shape = value.shape
            if value.dtype.kind == "f" and not np.all(np.isfinite(value)):
                raise MessageError(R.BAD_ARRAY, f"{name} contains NaN or inf")

    @property
    def n_samples(self) -> int:
        """Window length W."""
        for name in self.ARRAYS:
            value = getattr(self, name)
            if value is not None:
                return int(value.shape[0])
        return 0

    @property
    def stop(self) -> int:
        """One past the last time index of the window."""
        return self.start + self.n_samples

    def __eq__(self, other: object) -> bool:
        if type(other) is not type(self):
            return NotImplemented
        for f in fields(self):
            a, b = getattr(self, f.name), getattr(other, f.name)
            if f.name in self.ARRAYS:
                if not _arrays_equal(a, b):
                    return False
            elif a != b:
                return False
        return True

    __hash__ = None  # type: ignore[assignment]


@dataclass(frozen=True, eq=False)
class StatesMessage(Message):
    """Client m -> server: states of window ``start .. start + W - 1`` (time index t of each row).

    Attributes
    ----------
    x_a : (W, P) augmented predicted states x_a(t) with the client's current Theta (every round)
    xhat_c_prev : (W, P) proprietary estimates x̂_c(t-1), or None (sent once per window)
    x_c : (W, P) proprietary predictions x_c(t) = f(x̂_c(t-1)), or None (sent once per window)
    x_meas : (W, P) measurement states x̃(t) = argmin_x ||y(t) - h(x)||_R (one Gauss-Newton step
        from x_c(t)), or None (sent once per window); unbiased for the state with noise that is
        white in time, which is what makes the server's instrumental-variable estimator consistent
    xhat_a_prev : (W, P) augmented estimates x̂_a(t-1), optional (sent every round when the
        disentanglement penalty is on: the server's penalty is a function of it)
    u : (W, U) inputs u(t-1) driving the transition into t, optional (sent once per window with the
        fixed states by a plant that has inputs)
    noise_sigma : standard deviation of the Gaussian noise added to every entry (0 = none)
    clip : L2 bound every state vector was clipped to before the noise (None = not clipped)
    """

    KIND: ClassVar[str] = "states"
    ARRAYS: ClassVar[tuple[str, ...]] = ("x_a", "xhat_c_prev", "x_c", "x_meas", "xhat_a_prev", "u")

    x_a: FloatArray = field(default_factory=lambda: np.empty((0, 0)))
    xhat_c_prev: FloatArray | None = None
    x_c: FloatArray | None = None
    x_meas: FloatArray | None = None
    xhat_a_prev: FloatArray | None = None
    u: FloatArray | None = None
    noise_sigma: float = 0.0
    clip: float | None = None

    @property
    def has_fixed_states(self) -> bool:
        """True when the window's fixed states (x̂_c(t-1), x_c(t), x̃(t)) are included."""
        return self.xhat_c_prev is not None and self.x_c is not None and self.x_meas is not None


@dataclass(frozen=True, eq=False)
class GradientMessage(Message):
    """Server -> client m: per-sample gradients d l_t / d x_a(t) of l_t = ||x_s,m(t) - x_a,m(t)||^2.

    Attributes
    ----------
    grad : (W, P) per-sample gradients (the window's server loss is their mean); with gradient
        privacy on, ``-2 (clip(x_s - x_c) + x_c - x_a) + N(0, sigma^2)``: the part carrying other
        plants' data is clipped to ``clip / 2`` per sample, then noised
    noise_sigma : noise standard deviation per entry (0 = none)
    clip : per-sample L2 bound applied before the noise (None = not clipped)
    grad_prev : (W, P) per-sample gradients d l_t / d x̂_a(t-1) of the disentanglement penalty
        ``xi ||Â_mm (x̂_a - x̂_c)(t-1) - sum_n Â_mn x̂_c,n(t-1)||^2``, or None (penalty off)
    server_loss : mean l_t over the window (before clipping and noise)
    privacy_mu2 : sum of mu^2 the server's gradient releases of this round charged to each of
        this plant's records (it enters the plant's own accountant)
    """

    KIND: ClassVar[str] = "gradients"
    ARRAYS: ClassVar[tuple[str, ...]] = ("grad", "grad_prev")

    grad: FloatArray = field(default_factory=lambda: np.empty((0, 0)))
    grad_prev: FloatArray | None = None
    noise_sigma: float = 0.0
    clip: float | None = None
    server_loss: float = 0.0
    privacy_mu2: float = 0.0


@dataclass(frozen=True, eq=False)
class ReleaseMessage(Message):
    """A plant's measurement states, released once (estimator ``moments``; :mod:`fedrca.training.moments`).

    Client -> server with the plant's own release; server -> client forwarding another
    plant's (``plant`` names whose states they are): post-processing, no further cost.

    Attributes
    ----------
    x_meas : (W, P) clipped measurement states + Laplace noise
    noise_scale : Laplace scale per coordinate
    clip : L2 bound the states were clipped to
    u : (W, U) the plant's inputs u(t-1), clipped + Laplace noise (``training.privacy.input_epsilon``), or None
    input_noise_scale, input_clip : their Laplace scale per coordinate and L2 bound
    """

    KIND: ClassVar[str] = "release"
    ARRAYS: ClassVar[tuple[str, ...]] = ("x_meas", "u")

    x_meas: FloatArray = field(default_factory=lambda: np.empty((0, 0)))
    noise_scale: float = 0.0
    clip: float | None = None
    u: FloatArray | None = None
    input_noise_scale: float = 0.0
    input_clip: float | None = None


@dataclass(frozen=True, eq=False)
class MomentsMessage(Message):
    """Client -> server: a plant's lag moments, released once with the Gaussian mechanism.

    Attributes
    ----------
    moments : ((2L+1) P, P + sum P_n) rows = lags -L..L x this plant's state entries; column
        blocks = this plant's own moments, then one block per plant of ``others`` (in order)
    others : the other plants, in column-block order
    lags : L
    n_rows : terms in every sum
    noise_sigma : Gaussian noise per entry
    """

    KIND: ClassVar[str] = "moments"
    ARRAYS: ClassVar[tuple[str, ...]] = ("moments",)

    moments: FloatArray = field(default_factory=lambda: np.empty((0, 0)))
    others: tuple[str, ...] = ()
    lags: int = 0
    n_rows: int = 0
    noise_sigma: float = 0.0

    def __post_init__(self) -> None:
        object.__setattr__(self, "others", tuple(str(o) for o in self.others))
        super().__post_init__()


@dataclass(frozen=True, eq=False)
class OwnMomentsMessage(Message):
    """A plant's own-block lag moments of q = [x; u] (:func:`fedrca.training.varx.own_moments`).

    Client -> server, then forwarded by the server to the other plants (post-processing): the
    state block is the plant's already released own state moments; the blocks with inputs are
    released once with the Gaussian mechanism (``training.privacy.input_moment_epsilon``).

    Attributes
    ----------
    moments : ((L+1) (P+U), P+U) Gamma_0 .. Gamma_L stacked by lag (normalised)
    state_dim : P (the first P rows and columns of every lag are the states)
    state_sigma, input_sigma : Gaussian noise per entry of the state block and of the blocks with inputs
    """

    KIND: ClassVar[str] = "own_moments"
    ARRAYS: ClassVar[tuple[str, ...]] = ("moments",)

    moments: FloatArray = field(default_factory=lambda: np.empty((0, 0)))
    state_dim: int = 0
    state_sigma: float = 0.0
    input_sigma: float = 0.0


_KINDS: dict[str, type[Message]] = {
    "states": StatesMessage,
    "gradients": GradientMessage,
    "release": ReleaseMessage,
    "moments": MomentsMessage,
    "own_moments": OwnMomentsMessage,
}

#: Array encodings of :func:`encode_message`: lossless float64, float32, or int8 with one scale per array.
ENCODINGS = ("float64", "float32", "int8")


def quantise(array: FloatArray, encoding: str) -> FloatArray:
    """What a receiver decodes from ``array`` sent with ``encoding`` (float64; bit-identical to the round trip).

    ``int8`` stores ``round(x / s)`` with ``s = max|x| / 127``: an error of at most ``s/2`` per entry,
    variance ``s^2/12``, which a sender adds to the noise it declares (:func:`quantisation_variance`).

    Examples
    --------
    >>> quantise(np.array([[1.0, -0.5]]), "int8").tolist()
    [[1.0, -0.5039370078740157]]
    """
    a = np.asarray(array, dtype=np.float64)
    if encoding == "float64":
        return a
    if encoding == "float32":
        return a.astype(np.float32).astype(np.float64)
    if encoding == "int8":
        scale = _int8_scale(a)
        return np.asarray(np.round(a / scale).astype(np.int8), dtype=np.float64) * scale
    raise MessageError(R.BAD_FIELD, f"unknown message encoding {encoding!r}; encodings are {', '.join(ENCODINGS)}")


def quantisation_variance(array: FloatArray, encoding: str) -> float:
    """Variance per entry of the rounding error of :func:`quantise` (uniform on one step)."""
    a = np.asarray(array, dtype=np.float64)
    if encoding == "int8":
        return _int8_scale(a) ** 2 / 12.0
    if encoding == "float32":
        # rounding to the nearest float32: at most half a unit in the last place of the largest entry
        return float(np.spacing(np.float32(np.max(np.abs(a), initial=0.0)))) ** 2 / 12.0
    return 0.0


def _int8_scale(a: FloatArray) -> float:
    peak = float(np.max(np.abs(a), initial=0.0))
    return peak / 127.0 if peak > 0.0 else 1.0


def encode_message(message: Message, encoding: str = "float64") -> bytes:
    """Serialise a training message to bytes.

    ``float64`` is lossless (dtype and shape of every array kept); ``float32`` and ``int8`` are
    compact: the receiver decodes exactly :func:`quantise` of each array (float64).
    """
    arrays = {name: getattr(message, name) for name in message.ARRAYS if getattr(message, name) is not None}
    meta = {f.name: getattr(message, f.name) for f in fields(message) if f.name not in message.ARRAYS}
    meta = {
        k: (int(v) if isinstance(v, np.integer) else list(v) if isinstance(v, tuple) else v) for k, v in meta.items()
    }
    if encoding == "float32":
        arrays = {k: np.asarray(v, dtype=np.float64).astype(np.float32) for k, v in arrays.items()}
        meta["_encoding"] = encoding
    elif encoding == "int8":
        scales = {k: _int8_scale(np.asarray(v, dtype=np.float64)) for k, v in arrays.items()}
        arrays = {k: np.round(np.asarray(v, dtype=np.float64) / scales[k]).astype(np.int8) for k, v in arrays.items()}
        meta["_encoding"] = encoding
        meta["_scales"] = scales
    elif encoding != "float64":
        quantise(np.zeros(1), encoding)  # raises with the list of encodings
    return pack_arrays(message.KIND, meta, arrays)


def decode_message(raw: bytes) -> Message:
    """Inverse of :func:`encode_message`; MessageError when the bytes are not a valid message."""
    kind, meta, arrays = unpack_arrays(raw)
    cls = _KINDS.get(kind)
    if cls is None:
        raise MessageError(R.BAD_TYPE, f"unknown training message type '{kind}'")
    encoding = meta.pop("_encoding", "float64")
    scales = meta.pop("_scales", {})
    if encoding == "float32":
        arrays = {k: np.asarray(v, dtype=np.float64) for k, v in arrays.items()}
    elif encoding == "int8":
        try:
            arrays = {k: np.asarray(v, dtype=np.float64) * float(scales[k]) for k, v in arrays.items()}
        except (KeyError, TypeError, ValueError):
            raise MessageError(R.BAD_FIELD, f"{kind} message: int8 arrays without a valid scale") from None
    elif encoding != "float64":
        raise MessageError(R.BAD_FIELD, f"{kind} message: unknown encoding {encoding!r}")
    names = {f.name for f in fields(cls)}
    unknown = (set(meta) | set(arrays)) - names
    if unknown:
        raise MessageError(R.BAD_FIELD, f"unknown field(s) {sorted(unknown)} for a {kind} message")
    try:
        return cls(**meta, **arrays)  # type: ignore[arg-type]
    except TypeError as exc:
        raise MessageError(R.BAD_FIELD, f"{kind} message: {exc}") from None


class InProcessTransport:
    """In-memory topics with consumer-group offsets: the embedded stand-in for Kafka.

    ``publish(topic, key, value)`` appends; ``consume(topic, group)`` returns the
    records the group has not seen yet, in order. Counts bytes per topic and key.

    Examples
    --------
    >>> bus = InProcessTransport()
    >>> bus.publish("site.train.a", "a", b"x")
    >>> bus.consume("site.train.a", "server"), bus.consume("site.train.a", "server")
    ([('a', b'x')], [])
    """

    def __init__(self) -> None:
        self._topics: dict[str, list[tuple[str, bytes]]] = defaultdict(list)
        self._offsets: dict[tuple[str, str], int] = defaultdict(int)
        self.bytes_sent: dict[tuple[str, str], int] = defaultdict(int)

    def publish(self, topic: str, key: str, value: bytes) -> None:
        """Append a record."""
        self._topics[topic].append((key, bytes(value)))
        self.bytes_sent[(topic, key)] += len(value)

    def consume(self, topic: str, group: str) -> list[tuple[str, bytes]]:
        """Records of ``topic`` not yet consumed by ``group``."""
        records = self._topics.get(topic, [])
        start = self._offsets[(topic, group)]
        self._offsets[(topic, group)] = len(records)
        return list(records[start:])
