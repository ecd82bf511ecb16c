"""Training messages: lossless byte round-trips, clear errors on malformed input, the in-process bus."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import array_shapes, arrays

from fedrca.exceptions import MessageError
from fedrca.training.messages import (
    GradientMessage,
    InProcessTransport,
    StatesMessage,
    decode_message,
    encode_message,
    pack_arrays,
    unpack_arrays,
)

DTYPES = st.sampled_from(["<f8", ">f8", "<f4", "<i8", ">i4", "<u2", "|b1", "<c16"])


@settings(max_examples=60, deadline=None)
@given(data=st.data(), dtype=DTYPES)
def test_arrays_round_trip_bit_exactly_with_dtype_and_shape(data, dtype):
    shape = data.draw(array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=5))
    a = data.draw(arrays(np.dtype(dtype), shape))
    kind, meta, out = unpack_arrays(pack_arrays("x", {"k": 1, "s": "é"}, {"a": a, "b": a[..., :0] if a.ndim else a}))
    assert kind == "x" and meta == {"k": 1, "s": "é"}
    assert out["a"].dtype == a.dtype and out["a"].dtype.str == np.dtype(dtype).str
    assert out["a"].shape == a.shape
    assert out["a"].tobytes() == a.tobytes()


@settings(max_examples=40, deadline=None)
@given(
    w=st.integers(0, 30),
    p=st.integers(1, 6),
    fixed=st.booleans(),
    seed=st.integers(0, 2**31),
    rnd=st.integers(0, 10**6),
    sigma=st.floats(0, 1e6, allow_nan=False),
)
def test_states_message_round_trip(w, p, fixed, seed, rnd, sigma):
    rng = np.random.default_rng(seed)
    arr = lambda: rng.normal(size=(w, p))  # noqa: E731
    msg = StatesMessage(
        round=rnd,
        plant="reactor",
        version=rnd // 3,
        start=7,
        x_a=arr(),
        xhat_c_prev=arr() if fixed else None,
        x_c=arr() if fixed else None,
        x_meas=arr() if fixed else None,
        noise_sigma=sigma,
        clip=None if sigma == 0 else 2.5,
    )
    back = decode_message(encode_message(msg))
    assert back == msg
    assert isinstance(back, StatesMessage) and back.has_fixed_states == fixed
    assert back.stop == 7 + w and back.x_a.dtype == np.float64


def test_gradient_message_round_trip_and_fields():
    g = np.arange(12.0).reshape(6, 2)
    msg = GradientMessage(
        round=4, plant="p1", version=9, start=3, grad=g, noise_sigma=0.5, clip=1.0, server_loss=0.125, privacy_mu2=0.03
    )
    back = decode_message(encode_message(msg))
    assert back == msg and back.round == 4 and back.plant == "p1" and back.version == 9
    assert np.array_equal(back.grad, g) and back.server_loss == 0.125 and back.privacy_mu2 == 0.03
    assert back != GradientMessage(round=4, plant="p1", version=9, start=3, grad=g + 1e-12)


@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        (b"", "truncated"),
        (b"XXXX\x01\x00\x00\x00\x00", "bad-magic"),
        (b"FRCA\x07\x02\x00\x00\x00{}", "bad-version"),
        (b"FRCA\x01\x04\x00\x00\x00{not", "bad-header"),
        ("not bytes", "not-bytes"),
    ],
)
def test_malformed_bytes_give_a_reasoned_message_error(raw, reason):
    with pytest.raises(MessageError) as info:
        decode_message(raw)
    assert info.value.reason == reason


def test_truncated_body_and_unknown_type_are_refused():
    raw = encode_message(GradientMessage(round=0, plant="a", version=0, start=0, grad=np.ones((4, 2))))
    with pytest.raises(MessageError, match="runs past the end"):
        decode_message(raw[:-3])
    with pytest.raises(MessageError) as info:
        decode_message(pack_arrays("weights", {}, {}))
    assert info.value.reason == "bad-type"
    with pytest.raises(MessageError) as info:
        decode_message(pack_arrays("gradients", {"round": 0, "plant": "a", "version": 0, "start": 0, "evil": 1}, {}))
    assert info.value.reason == "bad-field"


def test_invalid_fields_are_refused_at_construction():
    with pytest.raises(MessageError, match="round"):
        GradientMessage(round=-1, plant="a", version=0, start=0, grad=np.ones((2, 2)))
    with pytest.raises(MessageError, match="plant"):
        GradientMessage(round=0, plant="", version=0, start=0, grad=np.ones((2, 2)))
    with pytest.raises(MessageError, match="rows"):
        StatesMessage(round=0, plant="a", version=0, start=0, x_a=np.ones((3, 2)), x_c=np.ones((4, 2)))
    with pytest.raises(MessageError, match="NaN"):
        GradientMessage(round=0, plant="a", version=0, start=0, grad=np.array([[np.nan, 0.0]]))


def test_in_process_transport_has_independent_consumer_groups():
    bus = InProcessTransport()
    bus.publish("s.train.a", "a", b"1")
    bus.publish("s.train.a", "_server", b"22")
    assert bus.consume("s.train.a", "server") == [("a", b"1"), ("_server", b"22")]
    bus.publish("s.train.a", "a", b"333")
    assert bus.consume("s.train.a", "server") == [("a", b"333")]
    assert [v for _, v in bus.consume("s.train.a", "client-a")] == [b"1", b"22", b"333"]
    assert bus.consume("s.train.b", "server") == []
    assert bus.bytes_sent[("s.train.a", "a")] == 4
