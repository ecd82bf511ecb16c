"""Secure aggregation: the server learns the sum of the sites' vectors and nothing else.

The pairwise additive masking of Bonawitz et al. (CCS 2017, without the dropout recovery):

1. **keys** (:class:`KeyRequest` / :class:`KeyReply`): every site makes an X25519 key pair
   for the session and sends its public key; the server relays the roster of public keys.
2. **pair seeds**: sites i and j derive the same 32-byte seed from their Diffie-Hellman
   secret (X25519 + HKDF-SHA256 bound to the session, :class:`SessionKeys`); the server,
   which sees only public keys, cannot.
3. **masked vectors** (:class:`MaskedVector`): a site encodes its vector in the ring
   Z_{2^(64 w)} (:func:`encode_fixed` for reals, ``w`` 64-bit limbs, 64 fraction bits;
   :func:`encode_counts` for counts, one limb) and adds, for every other site j, the
   mask ``m_ij`` (SHAKE-256 of the pair seed and the round number) when i < j and
   subtracts it when i > j::

       y_i = x_i + Σ_{j > i} m_ij - Σ_{j < i} m_ji      (mod 2^(64 w))
       Σ_i y_i = Σ_i x_i                                 (every mask is added once and subtracted once)

   Each ``y_i`` alone is uniformly distributed in the ring: it says nothing about ``x_i``.
   The server adds the masked vectors (:func:`ring_sum`) and decodes the sum.

A round number is used once per session: a site refuses to mask a second vector with
the same masks (the difference of two such vectors would be the difference of the
payloads). Threat model: an honest-but-curious server that relays the public keys
unchanged (in production the roster is authenticated out of band) and sites that do
not collude with it; every site must answer every round (no dropout recovery).
``tests/causal/test_secagg.py`` checks that the masks cancel, that a masked vector is not
its payload, and the exactness of the encodings.

Examples
--------
>>> import numpy as np
>>> keys = [SessionKeys.generate("s1", index=k, n_sites=3) for k in range(3)]
>>> roster = tuple(k.public_key for k in keys)
>>> payloads = [np.array([1.5, -2.0]), np.array([0.25, 4.0]), np.array([-1.0, 1e-3])]
>>> masked = [k.mask(encode_fixed(x), roster, round_=0) for k, x in zip(keys, payloads)]
>>> decode_fixed(ring_sum([m.data for m in masked])).tolist()
[0.75, 2.001]
"""

from __future__ import annotations

import base64
import hashlib
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey, X25519PublicKey
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from numpy.typing import ArrayLike, NDArray

from fedrca.causal.wire import Message, register
from fedrca.contracts.deadletter import DeadLetterReason as Reason
from fedrca.exceptions import DataError, MessageError

__all__ = [
    "COUNT_LIMBS",
    "FIXED_LIMBS",
    "FRACTION_BITS",
    "KeyReply",
    "KeyRequest",
    "MaskedVector",
    "SessionKeys",
    "check_public_key",
    "check_round",
    "check_session",
    "decode_counts",
    "decode_fixed",
    "encode_counts",
    "encode_fixed",
    "mask_stream",
    "ring_add",
    "ring_negate",
    "ring_sum",
]

RingArray = NDArray[np.uint64]
FloatArray = NDArray[np.float64]
IntArray = NDArray[np.int64]

#: fraction bits of the fixed-point encoding of reals (resolution 2^-64 ~ 5.4e-20)
FRACTION_BITS = 64
#: 64-bit limbs of a real: the ring Z_{2^192}, sums of magnitude up to 2^(191 - 64 - 16) ~ 2.6e33
FIXED_LIMBS = 3
#: limbs of a count: the ring Z_{2^64}
COUNT_LIMBS = 1
#: headroom bits: a sum of up to 2^16 sites' vectors stays inside the ring's signed range
_HEADROOM_BITS = 16
_KEY_BYTES = 32
_MASK = (1 << 64) - 1


# ----------------------------------------------------------------------------- the ring Z_{2^(64 w)}
def _check_ring(a: RingArray) -> RingArray:
    arr = np.asarray(a)
    if arr.dtype != np.uint64 or arr.ndim != 2 or arr.shape[1] < 1:
        raise DataError(f"ring vectors are (L, limbs) uint64, got {arr.dtype} {arr.shape}")
    return arr


def ring_add(a: RingArray, b: RingArray) -> RingArray:
    """a + b (mod 2^(64 w)) of (L, w) little-endian limbs, carries propagated."""
    A, B = _check_ring(a), _check_ring(b)
    if A.shape != B.shape:
        raise DataError(f"ring vectors differ in shape: {A.shape} and {B.shape}")
    out = np.empty_like(A)
    carry = np.zeros(A.shape[0], dtype=np.uint64)
    for i in range(A.shape[1]):
        # limb i: s = a_i + b_i + carry (mod 2^64); the carry out is set when either addition wrapped
        s = A[:, i] + B[:, i]
        wrapped = s < A[:, i]
        t = s + carry
        wrapped |= t < s
        out[:, i] = t
        carry = wrapped.astype(np.uint64)
    return out


def ring_negate(a: RingArray) -> RingArray:
    """-a (mod 2^(64 w)): the two's complement, ~a + 1."""
    A = _check_ring(a)
    one = np.zeros_like(A)
    one[:, 0] = 1
    return ring_add(~A, one)


def ring_sum(vectors: Sequence[RingArray]) -> RingArray:
    """Σ vectors (mod 2^(64 w))."""
    if not vectors:
        raise DataError("ring_sum needs at least one vector")
    total = _check_ring(vectors[0]).copy()
    for v in vectors[1:]:
        total = ring_add(total, v)
    return total


def _to_limbs(values: Sequence[int], limbs: int) -> RingArray:
    modulus = 1 << (64 * limbs)
    out = np.empty((len(values), limbs), dtype=np.uint64)
    for row, v in enumerate(values):
        u = v % modulus
        for i in range(limbs):
            out[row, i] = (u >> (64 * i)) & _MASK
    return out


def _from_limbs(ring: RingArray) -> list[int]:
    """The signed integers (two's complement) of (L, w) limbs."""
    R = _check_ring(ring)
    w = R.shape[1]
    half = 1 << (64 * w - 1)
    modulus = 1 << (64 * w)
    values = []
    for row in R.tolist():
        u = sum(int(limb) << (64 * i) for i, limb in enumerate(row))
        values.append(u - modulus if u >= half else u)
    return values


def encode_fixed(values: ArrayLike, fraction_bits: int = FRACTION_BITS, limbs: int = FIXED_LIMBS) -> RingArray:
    """Reals (L,) as ring elements (L, limbs): ``round(v 2^f) mod 2^(64 w)``, exact to 2^-(f+1).

    Raises
    ------
    DataError
        On a non-finite value or one too large for the ring's signed range (with headroom for
        the sum of 2^16 sites).
    """
    v = np.asarray(values, dtype=np.float64).reshape(-1)
    if not np.all(np.isfinite(v)):
        raise DataError("secure aggregation encodes finite numbers only; the vector holds NaN or inf")
    limit = 64 * limbs - 1 - fraction_bits - _HEADROOM_BITS
    big = np.abs(v) >= 2.0**limit
    if big.any():
        raise DataError(f"a value of magnitude {np.abs(v).max():.3g} does not fit the ring (|v| < 2^{limit})")
    # round(v 2^f): ldexp is exact, round() of a float gives the nearest integer exactly
    return _to_limbs([round(math.ldexp(float(x), fraction_bits)) for x in v], limbs)


def decode_fixed(ring: RingArray, fraction_bits: int = FRACTION_BITS) -> FloatArray:
    """Inverse of :func:`encode_fixed` (of a sum of encodings: the sum of the rounded values)."""
    return np.array([math.ldexp(float(x), -fraction_bits) for x in _from_limbs(ring)], dtype=np.float64)


def encode_counts(counts: ArrayLike) -> RingArray:
    """Non-negative integer counts (L,) as ring elements (L, 1) of Z_{2^64}."""
    c = np.asarray(counts)
    if c.dtype.kind not in "iu" or (c.size and c.min() < 0):
        raise DataError("secure aggregation of counts takes non-negative integers")
    return c.astype(np.uint64).reshape(-1, 1)


def decode_counts(ring: RingArray) -> IntArray:
    """Inverse of :func:`encode_counts` for a sum below 2^63."""
    R = _check_ring(ring)
    if R.shape[1] != COUNT_LIMBS:
        raise DataError(f"counts travel in {COUNT_LIMBS} limb, got {R.shape[1]}")
    if np.any(R[:, 0] >= np.uint64(1 << 63)):
        raise DataError("a summed count does not fit 63 bits")
    return R[:, 0].astype(np.int64)


def mask_stream(seed: bytes, round_: int, length: int, limbs: int) -> RingArray:
    """The pair's mask of a round: (length, limbs) uint64 from SHAKE-256(seed || round || limbs)."""
    if len(seed) != _KEY_BYTES:
        raise DataError(f"a pair seed has {_KEY_BYTES} bytes, got {len(seed)}")
    xof = hashlib.shake_256(seed + int(round_).to_bytes(8, "big") + int(limbs).to_bytes(2, "big"))
    return np.frombuffer(xof.digest(8 * length * limbs), dtype="<u8").astype(np.uint64).reshape(length, limbs)


# ----------------------------------------------------------------------------- messages
def check_session(value: Any) -> str:
    """A session id: a string of 1-128 characters, or MessageError."""
    if not isinstance(value, str) or not 1 <= len(value) <= 128:
        raise MessageError(Reason.BAD_FIELD, f"session must be a string of 1-128 characters, got {value!r}")
    return value


def _index(value: Any, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < 0:
        raise MessageError(Reason.BAD_SENDER, f"{what} must be an integer >= 0, got {value!r}")
    return int(value)


def check_round(value: Any) -> int:
    """A round number: an integer >= 0, or MessageError."""
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < 0:
        raise MessageError(Reason.BAD_ROUND, f"round must be an integer >= 0, got {value!r}")
    return int(value)


def check_public_key(value: Any) -> bytes:
    """A 32-byte X25519 public key, or MessageError."""
    if not isinstance(value, bytes | bytearray) or len(value) != _KEY_BYTES:
        raise MessageError(Reason.BAD_FIELD, f"a public key is {_KEY_BYTES} bytes (X25519)")
    return bytes(value)


@register
@dataclass(frozen=True, eq=False)
class KeyRequest(Message):
    """Server -> site: join session ``session`` as participant ``index`` of ``n_sites``.

    Attributes
    ----------
    session : the session id (binds the pair seeds: masks of two sessions are unrelated)
    index : this site's place in the roster, 0 .. n_sites - 1 (the sign of its masks)
    n_sites : number of sites K >= 2 (one site's sum is its own vector: nothing to hide it in)
    """

    kind: ClassVar[str] = "key_request"
    session: str
    index: int
    n_sites: int

    def __post_init__(self) -> None:
        object.__setattr__(self, "session", check_session(self.session))
        object.__setattr__(self, "index", _index(self.index, "index"))
        if isinstance(self.n_sites, bool) or not isinstance(self.n_sites, int | np.integer) or self.n_sites < 2:
            raise MessageError(Reason.BAD_FIELD, f"secure aggregation needs n_sites >= 2, got {self.n_sites!r}")
        object.__setattr__(self, "n_sites", int(self.n_sites))
        if self.index >= self.n_sites:
            raise MessageError(Reason.BAD_SENDER, f"index {self.index} is not below n_sites {self.n_sites}")

    def to_dict(self) -> dict[str, Any]:
        """JSON-friendly form."""
        return {"type": self.kind, "session": self.session, "index": self.index, "n_sites": self.n_sites}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> KeyRequest:
        """Inverse of :meth:`to_dict`."""
        return cls(session=data["session"], index=data["index"], n_sites=data["n_sites"])


@register
@dataclass(frozen=True, eq=False)
class KeyReply(Message):
    """Site -> server: the site's X25519 public key for the session (nothing else)."""

    kind: ClassVar[str] = "key_reply"
    session: str
    index: int
    public_key: bytes

    def __post_init__(self) -> None:
        object.__setattr__(self, "session", check_session(self.session))
        object.__setattr__(self, "index", _index(self.index, "index"))
        object.__setattr__(self, "public_key", check_public_key(self.public_key))

    def to_dict(self) -> dict[str, Any]:
        """JSON-friendly form (the key in hex)."""
        return {"type": self.kind, "session": self.session, "index": self.index, "public_key": self.public_key.hex()}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> KeyReply:
        """Inverse of :meth:`to_dict`."""
        return cls(session=data["session"], index=data["index"], public_key=bytes.fromhex(data["public_key"]))


@register
@dataclass(frozen=True, eq=False)
class MaskedVector(Message):
    """Site -> server: one round's vector, masked (uniform in the ring on its own; nothing else).

    Attributes
    ----------
    session, round : what it answers
    index : the sender's place in the roster
    data : (L, w) uint64 ring elements (read-only)
    """

    kind: ClassVar[str] = "masked_vector"
    session: str
    round: int
    index: int
    data: RingArray

    def __post_init__(self) -> None:
        object.__setattr__(self, "session", check_session(self.session))
        object.__setattr__(self, "round", check_round(self.round))
        object.__setattr__(self, "index", _index(self.index, "index"))
        arr = np.array(self.data)
        if arr.dtype != np.uint64 or arr.ndim != 2 or arr.shape[1] not in (COUNT_LIMBS, FIXED_LIMBS):
            raise MessageError(
                Reason.BAD_ARRAY, f"a masked vector is (L, {COUNT_LIMBS} or {FIXED_LIMBS}) uint64, got {arr.dtype} "
                f"{arr.shape}"
            )  # fmt: skip
        arr.flags.writeable = False
        object.__setattr__(self, "data", arr)

    @property
    def n_bytes(self) -> int:
        """Payload bytes on the wire (before base64)."""
        return int(self.data.nbytes)

    def to_dict(self) -> dict[str, Any]:
        """JSON-friendly form (the limbs as little-endian bytes in base64)."""
        return {
            "type": self.kind,
            "session": self.session,
            "round": self.round,
            "index": self.index,
            "shape": list(self.data.shape),
            "data": base64.b64encode(self.data.astype("<u8").tobytes()).decode("ascii"),
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> MaskedVector:
        """Inverse of :meth:`to_dict`."""
        L, w = (int(v) for v in data["shape"])
        raw = base64.b64decode(data["data"], validate=True)
        if len(raw) != 8 * L * w:
            raise ValueError(f"{len(raw)} bytes for shape ({L}, {w})")
        values = np.frombuffer(raw, dtype="<u8").astype(np.uint64).reshape(L, w)
        return cls(session=data["session"], round=data["round"], index=data["index"], data=values)


# ----------------------------------------------------------------------------- a site's session
class SessionKeys:
    """A site's secure-aggregation state for one session: its key pair, the pair seeds, the rounds it answered.

    Parameters
    ----------
    session : the session id
    index : the site's place in the roster
    n_sites : K
    private_key : the site's X25519 private key (:meth:`generate` makes a fresh one)
    """

    def __init__(self, session: str, index: int, n_sites: int, private_key: X25519PrivateKey) -> None:
        request = KeyRequest(session=session, index=index, n_sites=n_sites)  # validates the three
        self.session, self.index, self.n_sites = request.session, request.index, request.n_sites
        self._private = private_key
        self._public = private_key.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
        self._roster: tuple[bytes, ...] | None = None
        self._seeds: dict[int, bytes] = {}
        self._used_rounds: set[int] = set()

    @classmethod
    def generate(cls, session: str, index: int, n_sites: int) -> SessionKeys:
        """A fresh key pair (from the operating system's randomness) for the session."""
        return cls(session, index, n_sites, X25519PrivateKey.generate())

    @property
    def public_key(self) -> bytes:
        """The 32-byte X25519 public key (what the site sends)."""
        return self._public

    def reply(self) -> KeyReply:
        """The :class:`KeyReply` announcing the public key."""
        return KeyReply(session=self.session, index=self.index, public_key=self._public)

    def _pair_seeds(self, roster: Sequence[bytes]) -> dict[int, bytes]:
        keys = tuple(check_public_key(k) for k in roster)
        if self._roster is not None:
            if keys != self._roster:
                raise MessageError(Reason.BAD_FIELD, "the roster of public keys changed within the session")
            return self._seeds
        if len(keys) != self.n_sites:
            raise MessageError(Reason.BAD_FIELD, f"the roster has {len(keys)} keys for {self.n_sites} sites")
        if keys[self.index] != self._public:
            raise MessageError(Reason.BAD_SENDER, f"the roster's key {self.index} is not this site's public key")
        if len(set(keys)) != len(keys):
            raise MessageError(Reason.BAD_FIELD, "the roster repeats a public key")
        for j, key in enumerate(keys):
            if j == self.index:
                continue
            shared = self._private.exchange(X25519PublicKey.from_public_bytes(key))
            lo, hi = sorted((self.index, j))
            # both ends derive the same seed: HKDF over the DH secret, bound to the session and the pair
            info = b"fedrca secagg v1|" + self.session.encode("utf-8") + f"|{lo}|{hi}".encode("ascii")
            self._seeds[j] = HKDF(algorithm=hashes.SHA256(), length=_KEY_BYTES, salt=None, info=info).derive(shared)
        self._roster = keys
        return self._seeds

    def mask(self, payload: RingArray, roster: Sequence[bytes], round_: int) -> MaskedVector:
        """The masked vector of this round: ``x + Σ_{j > i} m_ij - Σ_{j < i} m_ji`` (mod the ring).

        Raises
        ------
        MessageError
            When the round was answered already (reusing its masks would reveal payload
            differences), or the roster is not the session's.
        """
        if round_ in self._used_rounds:
            raise MessageError(Reason.BAD_ROUND, f"round {round_} of session {self.session} was answered already")
        seeds = self._pair_seeds(roster)
        y = _check_ring(payload).copy()
        L, w = y.shape
        for j, seed in sorted(seeds.items()):
            m = mask_stream(seed, round_, L, w)
            y = ring_add(y, m if self.index < j else ring_negate(m))
        self._used_rounds.add(round_)
        return MaskedVector(session=self.session, round=round_, index=self.index, data=y)
