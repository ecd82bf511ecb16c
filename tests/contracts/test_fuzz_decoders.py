"""Every decoder a worker reads through, fuzzed: a value of its contract or the project's own error, nothing else.

The decoders of every record a worker reads (issue 34): sensor messages, flags, verdicts,
parameter artifacts of the params topic, the fleet's consensus messages, the workers'
own state records and the operators' commands of the control topic (a plant's history
records: ``tests/drift/test_keeper.py``). Each is fed valid records mutated at the field level (a field set to a
hostile value: nested thousands deep, a string of a million characters, a huge or negative
number, NaN, a wrong type, a shape of 2^70, an unknown dtype) and at the byte level
(truncated, spliced, bytes replaced), and arbitrary bytes. The property, for every example:
the decoder returns a message of its contract or raises a :class:`~fedrca.exceptions.FedrcaError`
(:class:`~fedrca.exceptions.MessageError` with a reason, for the stream decoders) whose text is
one line of bounded length: never a ``RecursionError``, ``OverflowError``, ``ValueError``,
``TypeError`` or ``MemoryError``.

``make test`` runs :data:`FAST` examples of each; ``make exhaustive`` runs :data:`SLOW`
(``pytest -m exhaustive tests/contracts/test_fuzz_decoders.py -s`` prints the counts).
"""

from __future__ import annotations

import json
import math
import struct
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fedrca.application.fleet.kafka import decode_consensus, encode_consensus
from fedrca.contracts import (
    BaselineCommand,
    DeadLetterReason,
    FlagMessage,
    Verdict,
    decode_flag,
    decode_published_artifact,
    decode_sensor,
    decode_sensors,
    encode,
    encode_published_artifact,
    make_artifact,
)
from fedrca.contracts.binary import MAGIC, pack_arrays
from fedrca.exceptions import FedrcaError, MessageError
from fedrca.fleet.consensus import ConsensusMessage
from fedrca.streams.loop import parse_state_record, state_record

FAST = 100
SLOW = 10_000

SITE = "tep"
NOW = 1_700_000_000.0
COUNTS = {"feed": 3, "reactor": 2}

#: Tokens a field-level mutation puts into the JSON text (hostile shapes json.dumps cannot make).
TOKENS = {
    "@DEEP@": "[" * 5_000 + "]" * 5_000,
    "@DEEPOBJ@": '{"a":' * 3_000 + "1" + "}" * 3_000,
    "@OPEN@": "[" * 100_000,
    "@NAN@": "NaN",
    "@INF@": "-Infinity",
    "@BIGINT@": "9" * 5_000,
    "@HUGE@": "1e999",
    "@MIB@": '"' + "x" * 1_000_000 + '"',
    "@ESC@": '"' + "\\\\" * 2_000 + '[[["',
    "@LONGLIST@": "[" + ",".join(["1.5"] * 200_000) + "]",
}

#: Values a field-level mutation sets (the tokens above among them).
HOSTILE: list[Any] = [
    None, True, False, 0, 1, -1, 2, 2**53, 2**53 + 1, 2**63, 2**70, -(2**70), 0.5, -0.0, 1e308, 1e-320, "", "x",
    "a" * 300, "\x00", "é", "v1", [], [1], [0, 1], [1, 0], [[1]], {}, {"a": 1}, "feed", "reactor", "tep",
    [1.0, 2.5, -3.0], [1.0, 2.0], [None, 2.0, 3.0], *TOKENS,
]  # fmt: skip


def _text(value: dict[str, Any]) -> bytes:
    text = json.dumps(value)
    for token, replacement in TOKENS.items():
        text = text.replace(json.dumps(token), replacement)
    return text.encode()


@st.composite
def json_records(draw: st.DrawFn, valid: dict[str, Any]) -> bytes:
    """A valid JSON message with fields set to hostile values, then perhaps cut, spliced or replaced."""
    record = dict(valid)
    keys = [*valid, "extra", "values", "level", "withheld", "level_eps", "candidates"]
    for _ in range(draw(st.integers(0, 3))):
        record[draw(st.sampled_from(keys))] = draw(st.sampled_from(HOSTILE))
    if draw(st.integers(0, 5)) == 0:
        record = draw(st.sampled_from([[record], "x", 3, None]))  # not an object at all
    raw = _text(record) if isinstance(record, dict) else json.dumps(record).encode()
    return _mangle(draw, raw)


def _mangle(draw: st.DrawFn, raw: bytes) -> bytes:
    how = draw(st.integers(0, 7))
    if how == 0 and raw:  # cut short
        return raw[: draw(st.integers(0, len(raw) - 1))]
    if how == 1:  # a splice
        at = draw(st.integers(0, len(raw)))
        return raw[:at] + draw(st.sampled_from([b"[", b"{", b'"', b"\\", b"\xff", b"\x00", b"]]]", b","])) + raw[at:]
    if how == 2 and raw:  # a byte replaced
        at = draw(st.integers(0, len(raw) - 1))
        return raw[:at] + bytes([draw(st.integers(0, 255))]) + raw[at + 1 :]
    if how == 3:
        return draw(st.binary(max_size=200))
    return raw


def _bounded(exc: BaseException) -> None:
    text = str(exc)
    assert text and "\n" not in text and len(text) <= 2_000, text[:300]
    if isinstance(exc, MessageError):
        assert DeadLetterReason(exc.reason) == exc.reason


def _fuzz(strategy: st.SearchStrategy[Any], decode: Callable[[Any], Any], accept: type, examples: int) -> dict:
    counts = {"ok": 0, "refused": 0}

    @settings(
        max_examples=examples, deadline=None, database=None, derandomize=True, suppress_health_check=list(HealthCheck)
    )
    @given(strategy)
    def run(raw: Any) -> None:
        try:
            out = decode(raw)
        except FedrcaError as exc:
            _bounded(exc)
            counts["refused"] += 1
            return
        assert isinstance(out, accept), out
        counts["ok"] += 1

    run()
    return counts


# -- the decoders ----------------------------------------------------------------------------------------
SENSOR = {"site": SITE, "plant": "feed", "ts": 1000.0, "seq": 7, "values": [1.0, 2.5, -3.0]}
FLAG = FlagMessage(SITE, "feed", 180.0, 3, 1, 0, math.inf, "v1").to_dict()
VERDICT = Verdict(SITE, 540.0, 3, "reactor", ("feed",), 0.97, (1, 3), "root_cause", ("reactor", "feed")).to_dict()


def _sensor(raw: bytes) -> object:
    one = decode_sensor(raw, SITE, COUNTS, now=NOW)
    # the batch decoder agrees with the one-message decoder on every record
    ok, bad = decode_sensors([raw], SITE, COUNTS, now=NOW)
    assert (len(ok), len(bad)) == (1, 0) and ok[0].seq == one.seq
    assert np.array_equal(ok[0].values, one.values, equal_nan=True)  # a null is NaN in both
    return one


def _sensor_or_refused(raw: bytes) -> object:
    try:
        return _sensor(raw)
    except MessageError:
        ok, bad = decode_sensors([raw], SITE, COUNTS, now=NOW)
        assert not ok and len(bad) == 1 and isinstance(bad[0][1], MessageError)
        raise


def _verdict(raw: bytes) -> Verdict:
    return Verdict.decode(raw)


def _flag(raw: bytes) -> FlagMessage:
    return decode_flag(raw, SITE, set(COUNTS), now=NOW)


ARTIFACT = encode_published_artifact(
    make_artifact(
        "feed",
        3,
        {"theta": np.arange(6.0).reshape(2, 3), "nominal_state_counts": np.arange(4)},
        config_hash="abc",
        metrics={"far": 0.01},
    )
)
CONSENSUS = encode_consensus(ConsensusMessage("em3/c1", 4, "average", "a", "b", [1.5, -2.0], [0.25, math.inf]))


def _binary_parts(raw: bytes) -> tuple[dict[str, Any], bytes]:
    (header_len,) = struct.unpack_from("<I", raw, 5)
    return json.loads(raw[9 : 9 + header_len]), raw[9 + header_len :]


#: Values a header mutation puts into an array spec or the metadata.
SPEC_VALUES: list[Any] = [
    -1, 0, 1, 2**31, 2**62, 2**70, -(2**70), 1.5, "3", None, [], [-1], [2**35, 2**35], [2**70], [0, 2**62],
    [1] * 40, "<f8", "|V8", "O", "<U10", "S3", "(2,2)f8", "<M8[ns]", ">c16", "|b1", "f16", "x" * 300, {"a": 1},
    [[1]], True,
]  # fmt: skip


@st.composite
def binary_records(draw: st.DrawFn, valid: bytes) -> bytes:
    """A valid binary message whose header fields (array specs, metadata) are set to hostile values."""
    header, body = _binary_parts(valid)
    for _ in range(draw(st.integers(0, 3))):
        where = draw(st.sampled_from(["spec", "meta", "top"]))
        arrays, meta = header.get("arrays"), header.get("meta")
        if where == "spec" and isinstance(arrays, list) and arrays and isinstance(arrays[0], dict):
            spec = arrays[draw(st.integers(0, len(arrays) - 1))]
            spec[draw(st.sampled_from(["name", "dtype", "shape", "offset", "nbytes", "extra"]))] = draw(
                st.sampled_from(SPEC_VALUES)
            )
        elif where == "meta" and isinstance(meta, dict):
            key = draw(st.sampled_from([*meta, "manifest", "plant", "version", "round", "phase"]))
            meta[key] = draw(st.sampled_from(HOSTILE + SPEC_VALUES))
        else:
            key = draw(st.sampled_from(["type", "meta", "arrays"]))
            twice = [arrays[0]] * 2 if isinstance(arrays, list) and arrays else 1  # an array given twice
            header[key] = draw(st.sampled_from([None, [], {}, "x", twice]))
    text = _text(header)
    if draw(st.integers(0, 3)) == 0:
        body = body[: draw(st.integers(0, len(body)))]
    length = len(text) if draw(st.integers(0, 5)) else draw(st.sampled_from([0, 1, 2**32 - 1, len(text) + 7]))
    raw = MAGIC + bytes([draw(st.sampled_from([1, 1, 1, 2]))]) + struct.pack("<I", length) + text + body
    return _mangle(draw, raw) if draw(st.integers(0, 3)) == 0 else raw


STATE = state_record(41, encode({"detector": {"x": [1.0, 2.0]}, "last_seq": 40}))


@st.composite
def state_records(draw: st.DrawFn) -> bytes:
    if draw(st.booleans()):
        return draw(json_records({"offset": 41, "state": {"detector": {"x": [1.0, 2.0]}, "last_seq": 40}}))
    return _mangle(draw, STATE)


COMMAND = {"site": SITE, "plant": "reactor", "action": "rollback", "version": 2, "id": "c1", "ts": 1.0}


def _command(raw: bytes) -> BaselineCommand:
    return BaselineCommand.decode(raw, SITE, COUNTS)


DECODERS: dict[str, tuple[st.SearchStrategy[Any], Callable[[Any], Any], type]] = {
    "sensor": (json_records(SENSOR), _sensor_or_refused, object),
    "flag": (json_records(FLAG), _flag, FlagMessage),
    "verdict": (json_records(VERDICT), _verdict, Verdict),
    "params": (binary_records(ARTIFACT), lambda raw: decode_published_artifact(raw)[1], object),
    "fleet": (binary_records(CONSENSUS), decode_consensus, ConsensusMessage),
    "state": (state_records(), parse_state_record, tuple),
    "command": (json_records(COMMAND), _command, BaselineCommand),
}


@pytest.mark.parametrize("name", list(DECODERS))
def test_every_decoder_returns_its_message_or_its_own_error(name):
    strategy, decode, accept = DECODERS[name]
    counts = _fuzz(strategy, decode, accept, FAST)
    assert counts["ok"] > 0 and counts["refused"] > 0, counts


@pytest.mark.slow
@pytest.mark.exhaustive
@pytest.mark.parametrize("name", list(DECODERS))
def test_every_decoder_returns_its_message_or_its_own_error_slow(name):
    """Issue 34 acceptance 2: 10,000 examples of each decoder (``make exhaustive``)."""
    strategy, decode, accept = DECODERS[name]
    counts = _fuzz(strategy, decode, accept, SLOW)
    print(f"\nfuzz {name}: {sum(counts.values())} examples, {counts['ok']} decoded, {counts['refused']} refused")
    assert sum(counts.values()) >= SLOW


# -- the cases that crashed the workers (issue 34) -----------------------------------------------------
@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        (b'{"site":"tep","plant":"feed","ts":1,"seq":1,"values":' + b"[" * 200_000 + b"]" * 200_000 + b"}", "too-deep"),
        (b"[" * 1_000_000, "too-deep"),
        (_text({**SENSOR, "site": "@MIB@"}), "wrong-site"),
        (b"x" * (1_048_577), "too-large"),
        (_text({**SENSOR, "seq": "@BIGINT@"}), "malformed-json"),
        (_text({**SENSOR, "seq": 2**60}), "bad-seq"),
    ],
)
def test_the_sensor_messages_that_killed_a_plant_worker_are_refused(raw, reason):
    with pytest.raises(MessageError) as err:
        decode_sensor(raw, SITE, COUNTS, now=NOW)
    assert err.value.reason == reason
    assert len(err.value.detail) < 300


@pytest.mark.parametrize(
    ("field", "value", "reason"),
    [
        ("eps", "abc", "bad-flag"),
        ("eps", [1], "bad-flag"),
        ("eps", -1, "bad-flag"),
        ("level_eps", {"a": 1}, "bad-flag"),
        ("zc", True, "bad-flag"),
        ("withheld", 1, "bad-flag"),
        ("level", 10**6, "bad-flag"),
        ("model_version", "@MIB@", "bad-field"),
        ("model_version", 3, "bad-field"),
        ("plant", "@DEEP@", "too-deep"),
    ],
)
def test_the_flags_that_killed_the_rca_worker_are_refused(field, value, reason):
    with pytest.raises(MessageError) as err:
        _flag(_text({**FLAG, field: value}))
    assert err.value.reason == reason


@pytest.mark.parametrize(
    ("spec", "fragment"),
    [
        ({"shape": [-1, 2]}, "shape"),
        ({"shape": [2**35, 2**35]}, "shape"),
        ({"shape": [2**70]}, "shape"),
        ({"dtype": "|V8"}, "dtype"),
        ({"dtype": "(2,2)f8"}, "dtype"),
        ({"dtype": "O"}, "dtype"),
        ({"offset": -5}, "offset"),
        ({"nbytes": 2**62}, "do not match"),
    ],
)
def test_the_params_records_that_killed_the_follower_are_refused(spec, fragment):
    header, body = _binary_parts(ARTIFACT)
    header["arrays"][0].update(spec)
    text = json.dumps(header).encode()
    raw = MAGIC + b"\x01" + struct.pack("<I", len(text)) + text + body
    with pytest.raises(FedrcaError, match=fragment):
        decode_published_artifact(raw)


def test_a_params_record_with_a_nested_header_is_refused():
    header, body = _binary_parts(ARTIFACT)
    deep = b'"metrics": {"x": ' + b"[" * 50_000 + b"]" * 50_000 + b", "
    text = json.dumps(header).encode().replace(b'"metrics": {', deep)
    raw = MAGIC + b"\x01" + struct.pack("<I", len(text)) + text + body
    with pytest.raises(FedrcaError, match="nests deeper"):
        decode_published_artifact(raw)


def test_arrays_pack_and_unpack_unchanged_within_the_bounds():
    arrays = {"a": np.arange(12.0).reshape(3, 4), "b": np.array([True, False]), "c": np.zeros((0, 5), dtype=np.int32)}
    raw = pack_arrays("k", {"n": [1, {"m": 2}]}, arrays)
    from fedrca.contracts.binary import unpack_arrays

    kind, meta, back = unpack_arrays(raw)
    assert kind == "k" and meta == {"n": [1, {"m": 2}]}
    assert all(np.array_equal(back[k], v) and back[k].dtype == v.dtype for k, v in arrays.items())
