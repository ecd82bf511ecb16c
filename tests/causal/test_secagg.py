"""Secure aggregation: the ring, the encodings, the pair seeds, and masks that cancel in the sum only."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey
from hypothesis import given, settings
from hypothesis import strategies as st

from fedrca.causal.secagg import (
    FIXED_LIMBS,
    KeyReply,
    KeyRequest,
    MaskedVector,
    SessionKeys,
    decode_counts,
    decode_fixed,
    encode_counts,
    encode_fixed,
    mask_stream,
    ring_add,
    ring_negate,
    ring_sum,
)
from fedrca.causal.wire import decode_message, encode_message
from fedrca.exceptions import DataError, MessageError

LIMB_VALUES = st.integers(0, 2**64 - 1)


def _as_int(row: np.ndarray) -> int:
    return sum(int(v) << (64 * i) for i, v in enumerate(row.tolist()))


def _sessions(n_sites: int, session: str = "s", seed: int = 0) -> tuple[list[SessionKeys], tuple[bytes, ...]]:
    """K sites' session keys from fixed private keys (the tests are deterministic; sites use fresh ones)."""
    rng = np.random.default_rng(seed)
    keys = [
        SessionKeys(session, k, n_sites, X25519PrivateKey.from_private_bytes(rng.bytes(32))) for k in range(n_sites)
    ]
    return keys, tuple(k.public_key for k in keys)


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 4), st.data())
def test_ring_addition_and_negation_are_those_of_the_integers_mod_2_to_the_64w(limbs, data):
    rows = data.draw(st.integers(1, 6))
    a = np.array([[data.draw(LIMB_VALUES) for _ in range(limbs)] for _ in range(rows)], dtype=np.uint64)
    b = np.array([[data.draw(LIMB_VALUES) for _ in range(limbs)] for _ in range(rows)], dtype=np.uint64)
    modulus = 1 << (64 * limbs)
    total, negated = ring_add(a, b), ring_negate(a)
    for r in range(rows):
        assert _as_int(total[r]) == (_as_int(a[r]) + _as_int(b[r])) % modulus
        assert _as_int(negated[r]) == (-_as_int(a[r])) % modulus
    assert not ring_add(a, negated).any()


@settings(max_examples=40, deadline=None)
@given(st.lists(st.floats(-1e12, 1e12, allow_nan=False), min_size=1, max_size=20))
def test_the_fixed_point_encoding_is_exact_to_its_resolution(values):
    decoded = decode_fixed(encode_fixed(values))
    assert np.all(np.abs(decoded - np.array(values)) <= 2.0**-65 + 1e-16 * np.abs(values))
    # a sum of encodings decodes to the sum of the (rounded) values
    doubled = decode_fixed(ring_add(encode_fixed(values), encode_fixed(values)))
    np.testing.assert_allclose(doubled, 2 * np.array(values), rtol=1e-15, atol=2.0**-63)


def test_encodings_refuse_what_does_not_fit():
    with pytest.raises(DataError, match="NaN or inf"):
        encode_fixed([1.0, math.nan])
    with pytest.raises(DataError, match="does not fit the ring"):
        encode_fixed([2.0**111])
    with pytest.raises(DataError, match="non-negative integers"):
        encode_counts(np.array([1, -1]))
    assert decode_counts(encode_counts(np.array([0, 7, 2**40]))).tolist() == [0, 7, 2**40]


@settings(max_examples=25, deadline=None)
@given(st.integers(2, 6), st.integers(1, 12), st.sampled_from([1, FIXED_LIMBS]), st.integers(0, 10))
def test_masks_cancel_in_the_sum_of_every_site(n_sites, length, limbs, round_):
    """Σ_i (x_i + Σ_{j>i} m_ij - Σ_{j<i} m_ji) = Σ_i x_i, exactly, for any K, length and round."""
    keys, roster = _sessions(n_sites)
    zero = np.zeros((length, limbs), dtype=np.uint64)
    masked = [k.mask(zero, roster, round_) for k in keys]
    assert not ring_sum([m.data for m in masked]).any()
    # each one alone is far from its payload (zero): about half of its bits are set
    bits = np.unpackbits(np.concatenate([m.data for m in masked]).view(np.uint8))
    assert 0.35 < bits.mean() < 0.65


def test_the_sum_of_masked_vectors_is_the_sum_of_the_payloads_and_one_vector_reveals_nothing():
    keys, roster = _sessions(4)
    rng = np.random.default_rng(0)
    payloads = [rng.normal(size=30) * 10.0**k for k in range(4)]
    masked = [k.mask(encode_fixed(x), roster, round_=3) for k, x in zip(keys, payloads)]
    np.testing.assert_allclose(decode_fixed(ring_sum([m.data for m in masked])), sum(payloads), rtol=1e-15, atol=1e-15)
    for m, x in zip(masked, payloads):
        assert not np.any(np.all(m.data == encode_fixed(x), axis=1))  # no coordinate travels in clear
    # any K - 1 of them sum to noise: dropping one site's vector leaves no trace of the others' sum
    partial = decode_fixed(ring_sum([m.data for m in masked[1:]]))
    assert np.abs(partial - sum(payloads[1:])).min() > 1e6


def test_pair_seeds_agree_at_both_ends_and_differ_between_pairs_and_sessions():
    keys, roster = _sessions(3, "one")
    for k in keys:
        k._pair_seeds(roster)
    assert keys[0]._seeds[1] == keys[1]._seeds[0] and keys[1]._seeds[2] == keys[2]._seeds[1]
    assert len({keys[0]._seeds[1], keys[0]._seeds[2], keys[1]._seeds[2]}) == 3
    other, other_roster = _sessions(3, "two")  # the same private keys, another session
    for k in other:
        k._pair_seeds(other_roster)
    assert other[0]._seeds[1] != keys[0]._seeds[1]
    a, b = mask_stream(keys[0]._seeds[1], 0, 4, 3), mask_stream(keys[0]._seeds[1], 1, 4, 3)
    assert a.shape == (4, 3) and not np.array_equal(a, b)


def test_a_site_masks_a_round_once_and_checks_the_roster():
    keys, roster = _sessions(3)
    payload = encode_fixed([1.0, 2.0])
    keys[0].mask(payload, roster, 0)
    with pytest.raises(MessageError, match="answered already"):
        keys[0].mask(payload, roster, 0)
    with pytest.raises(MessageError, match="roster of public keys changed"):
        keys[0].mask(payload, (roster[1], roster[0], roster[2]), 1)
    stranger, _ = _sessions(3, seed=1)
    with pytest.raises(MessageError, match="not this site's public key"):
        stranger[1].mask(payload, roster, 0)
    with pytest.raises(MessageError, match="3 keys for 4 sites"):
        SessionKeys.generate("s", 0, 4).mask(payload, roster, 0)


def test_messages_round_trip_and_are_validated():
    keys, roster = _sessions(2)
    masked = keys[0].mask(encode_fixed([1.5, -2.0, 3.0]), roster, 0)
    for message in (KeyRequest(session="s", index=1, n_sites=2), keys[1].reply(), masked):
        wire = encode_message(message)
        assert decode_message(wire) == message
    assert set(json.loads(encode_message(masked))) == {"type", "session", "round", "index", "shape", "data"}
    with pytest.raises(MessageError, match="n_sites >= 2"):
        KeyRequest(session="s", index=0, n_sites=1)
    with pytest.raises(MessageError, match="not below n_sites"):
        KeyRequest(session="s", index=2, n_sites=2)
    with pytest.raises(MessageError, match="32 bytes"):
        KeyReply(session="s", index=0, public_key=b"short")
    with pytest.raises(MessageError, match="uint64"):
        MaskedVector(session="s", round=0, index=0, data=np.zeros((2, 3)))
    bad = json.loads(encode_message(masked))
    bad["shape"] = [4, 3]
    with pytest.raises(MessageError, match="masked_vector"):
        decode_message(json.dumps(bad))
