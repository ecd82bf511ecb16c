"""The batch codecs of the plant worker's hot path equal the per-message contracts exactly.

``decode_sensors`` must give, for any mix of good and bad messages, the same valid
messages and the same errors (reason and detail), in arrival order, as ``decode_sensor``
message by message; ``encode_flags`` must give byte-identical JSON to
``encode(flag.to_dict())``.
"""

from __future__ import annotations

import dataclasses
import json
import math

import numpy as np
import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fedrca.contracts import (
    FlagMessage,
    decode_flag,
    decode_flag_columns,
    decode_flags,
    decode_sensor,
    decode_sensors,
    encode,
    encode_flags,
)
from fedrca.exceptions import MessageError

COUNTS = {"feed": 3, "reactor": 2}
NOW = 1_700_000_000.0


def one_by_one(raws):
    valid, rejected = [], []
    for raw in raws:
        try:
            valid.append(decode_sensor(raw, "tep", COUNTS, now=NOW))
        except MessageError as err:
            rejected.append((raw, err))
    return valid, rejected


def assert_same(batch, single):
    (valid_b, rejected_b), (valid_s, rejected_s) = batch, single
    assert [(m.site, m.plant, m.ts, m.seq) for m in valid_b] == [(m.site, m.plant, m.ts, m.seq) for m in valid_s]
    for mb, ms in zip(valid_b, valid_s, strict=True):
        assert mb.values.dtype == np.float64
        assert np.array_equal(mb.values, ms.values, equal_nan=True)
        assert mb.quality.dtype == np.uint8
        assert np.array_equal(mb.quality, ms.quality)
        assert np.array_equal(mb.quality != 0, np.isnan(mb.values))
        assert type(mb.ts) is float
    assert [(raw, err.reason, err.detail) for raw, err in rejected_b] == [
        (raw, err.reason, err.detail) for raw, err in rejected_s
    ]


def good(plant="feed", seq=7, ts=1000.0, values=None):
    values = [1.0, 2.5, -3.0][: COUNTS[plant]] if values is None else values
    return json.dumps({"site": "tep", "plant": plant, "ts": ts, "seq": seq, "values": values}).encode()


BAD = [
    b"{not json",
    b"\xff\xfe",
    b"[1, 2]",
    b'"a string"',
    b"{}",
    json.dumps({"site": "tep", "plant": "feed", "ts": 1.0, "values": [1, 2, 3]}).encode(),
    good().replace(b'"tep"', b'"other"'),
    good().replace(b'"feed"', b'"boiler"'),
    good().replace(b'"feed"', b'["feed"]'),
    good(values=[1.0, 2.0]),
    good(values=[1.0, "x", 2.0]),
    good(values=[1.0, True, 2.0]),
    b'{"site":"tep","plant":"feed","ts":1.0,"seq":1,"values":null}',
    b'{"site":"tep","plant":"feed","ts":1.0,"seq":1,"values":[1.0,null,NaN]}',
    b'{"site":"tep","plant":"feed","ts":1.0,"seq":1,"values":[null,null,Infinity]}',
    b'{"site":"tep","plant":"feed","ts":1.0,"seq":1,"values":[null,1.0,2.0],"quality":[0,0]}',
    b'{"site":"tep","plant":"feed","ts":1.0,"seq":1,"values":[null,1.0,2.0],"quality":[4,0,0]}',
    b'{"site":"tep","plant":"feed","ts":1.0,"seq":1,"values":[null,1.0,2.0],"quality":[true,0,0]}',
    b'{"site":"tep","plant":"feed","ts":1.0,"seq":1,"values":[null,1.0,2.0],"quality":"bad"}',
    b'{"site":"tep","plant":"feed","ts":1.0,"seq":1,"values":[1.0,NaN,2.0]}',
    b'{"site":"tep","plant":"feed","ts":1.0,"seq":1,"values":[1.0,-Infinity,2.0]}',
    b'{"site":"tep","plant":"feed","ts":1.0,"seq":1,"values":[1.0,1e400,2.0]}',
    good(seq=-1),
    good(seq=1.5),
    good(seq=True),
    good(ts=-5),
    good(ts=NOW + 10 * 86400),
    good(ts="yesterday"),
    b'{"site":"tep","plant":"feed","ts":NaN,"seq":1,"values":[1.0,2.0,3.0]}',
    b'{"site":"tep","plant":"feed","ts":Infinity,"seq":1,"values":[1.0,2.0,3.0]}',
    HUGE_TS := b'{"site":"tep","plant":"feed","ts":1' + b"0" * 400 + b',"seq":1,"values":[1.0,2.0,3.0]}',
    HUGE_VALUE := b'{"site":"tep","plant":"feed","ts":1.0,"seq":1,"values":[1.0,1' + b"0" * 400 + b",3.0]}",
]
BAD += [good(seq=13) + b" x", b"\x00" + good()]
# beyond the detector's bound (the data files' too): refused, a null beside them or not
BAD += [good(values=[0.1, 1e151, -7]), good(values=[None, -1e300, 1.0]), good(seq=2**53 + 1)]
# nested deeper than a message, or larger than a record: refused before they are parsed
BAD += [good().replace(b"[1.0", b"[" * 5_000 + b"1.0"), b'{"site":"' + b"x" * (1 << 20) + b'"}']
#: Valid for json.loads but not plain UTF-8: the batch decoder's slow path must accept them too.
ODD = [b"\xef\xbb\xbf" + good(seq=11), good(seq=12).decode().encode("utf-16"), good(seq=14).decode()]
GOOD = [
    good(),
    good(plant="reactor", seq=8, ts=0, values=[4, -2]),
    good(seq=0, ts=NOW + 3600, values=[0.1, 1e150, -7]),
    good(values=[1.0, None, 2.0]),
    good(plant="reactor", values=[None, None]),
    b'{"site":"tep","plant":"feed","ts":1.0,"seq":1,"values":[null,1.0,2.0],"quality":[1,0,2]}',
]


def test_every_bad_shape_gets_the_same_error_as_one_by_one_in_order():
    others = BAD + ODD
    raws = [x for pair in zip(GOOD * len(others), others, strict=False) for x in pair]
    batch = decode_sensors(raws, "tep", COUNTS, now=NOW)
    assert_same(batch, one_by_one(raws))
    assert len(batch[1]) == len(BAD) and len(batch[0]) == len(others) + len(ODD)


def test_integers_beyond_the_float_range_are_dead_letters_not_crashes():
    _, rejected = decode_sensors([good(), HUGE_TS, HUGE_VALUE], "tep", COUNTS, now=NOW)
    assert [err.reason for _, err in rejected] == ["bad-timestamp", "non-finite"]


def test_nulls_decode_to_nan_and_missing_on_the_fast_path():
    raws = [good(seq=s, values=[None if s % 3 == 0 else s, s + 0.5, None if s % 5 == 0 else -s]) for s in range(30)]
    valid, rejected = decode_sensors(raws, "tep", COUNTS, now=NOW)
    assert rejected == []
    values = np.vstack([m.values for m in valid])
    assert np.array_equal(np.isnan(values[:, 0]), np.arange(30) % 3 == 0)
    assert np.array_equal(np.isnan(values[:, 2]), np.arange(30) % 5 == 0)
    assert {int(q) for m in valid for q in m.quality} == {0, 3}


def test_only_good_messages_decode_to_one_array_per_batch():
    raws = [good(seq=s, values=[s, s + 0.5, -s]) for s in range(50)]
    valid, rejected = decode_sensors(raws, "tep", COUNTS, now=NOW)
    assert rejected == []
    assert np.array_equal(np.vstack([m.values for m in valid]), [[s, s + 0.5, -s] for s in range(50)])
    assert decode_sensors([], "tep", COUNTS, now=NOW) == ([], [])


#: Where JSON parsers may differ (the batch decoder's fast path parses with orjson, decode_sensor with json):
#: every one must decode exactly as one by one.
EDGES = [
    b'{"site":"tep","plant":"feed","ts":1.0,"seq":1,"values":[1,2,3],"values":[4,5,6]}',  # a key twice
    b'{"site":"tep","plant":"feed","seq":1,"ts":1.0,"seq":2,"values":[1,2,3]}',
    b'{"site":"tep","plant":"feed","ts":1.0,"seq":1,"values":[18446744073709551616,-18446744073709551617,3]}',
    b'{"site":"tep","plant":"feed","ts":1.0,"seq":18446744073709551616,"values":[1,2,3]}',
    b'{"site":"tep","plant":"feed","ts":9223372036854775808,"seq":1,"values":[1,2,3]}',
    b'{"site":"tep","plant":"feed","ts":1.0,"seq":1,"values":[-0,-0.0,1E2]}',
    b'{"site":"tep","plant":"feed","ts":1.0,"seq":1,"values":[1.5e-320,1e-400,0.1000000000000000055511151231257827]}',
    b'{"site":"tep","plant":"feed","ts":1.0,"seq":1,"values":[9007199254740993,2.2250738585072011e-308,1e308]}',
    b'{"site":"t\\u0065p","plant":"fe\\u0065d","ts":1.0,"seq":1,"values":[1,2,3]}',
    b'{"site":"tep","plant":"feed\\ud800","ts":1.0,"seq":1,"values":[1,2,3]}',
    b' \n{ "site" : "tep" , "plant" : "feed" , "ts" : 1.0 , "seq" : 1 , "values" : [ 1 , 2 , 3 ] }\t ',
    b'{"site":"tep","plant":"feed","ts":1.0,"seq":1,"values":[1,2,3],}',
    b'{"site":"tep","plant":"feed","ts":1.0,"seq":1,"values":[1,2,3]}\x00',
    b'{"site":"tep","plant":"feed","ts":1.0,"seq":01,"values":[1,2,3]}',
    b'{"site":"tep","plant":"feed","ts":1.,"seq":1,"values":[1,2,3]}',
    b"{'site':'tep','plant':'feed','ts':1.0,'seq':1,'values':[1,2,3]}",
]


def test_json_edges_decode_exactly_as_one_by_one():
    raws = [x for pair in zip(GOOD * len(EDGES), EDGES, strict=False) for x in pair]
    assert_same(decode_sensors(raws, "tep", COUNTS, now=NOW), one_by_one(raws))


numbers = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True), st.integers(-(10**20), 10**20), st.booleans(), st.none()
)
fields = st.fixed_dictionaries(
    {
        "site": st.sampled_from(["tep", "other"]),
        "plant": st.sampled_from(["feed", "reactor", "boiler"]),
        "ts": st.one_of(st.floats(-10.0, 2e9), st.integers(-10, 2 * 10**9), st.just(float("nan"))),
        "seq": st.one_of(st.integers(-2, 10**6), st.floats(0, 10)),
        "values": st.lists(numbers, min_size=0, max_size=4),
    },
    optional={"quality": st.one_of(st.lists(st.integers(-1, 4), max_size=4), st.booleans(), st.none())},
)


@settings(max_examples=200, deadline=None)
@given(st.lists(fields, max_size=12))
def test_random_batches_decode_exactly_as_one_by_one(messages):
    raws = [json.dumps(m).encode() for m in messages]
    assert_same(decode_sensors(raws, "tep", COUNTS, now=NOW), one_by_one(raws))


flags = st.builds(
    FlagMessage,
    site=st.text(max_size=8),
    plant=st.text(max_size=8),
    ts=st.one_of(st.floats(0, 1e12), st.integers(0, 10**12)),
    seq=st.integers(0, 10**12),
    zc=st.sampled_from([0, 1]),
    za=st.sampled_from([0, 1]),
    eps=st.one_of(st.just(math.inf), st.floats(0.01, 50), st.integers(1, 5)),
    model_version=st.text(max_size=12),
    withheld=st.booleans(),
    degraded=st.booleans(),
    sensor_fault=st.booleans(),
    level=st.one_of(st.none(), st.integers(0, 3), st.booleans()),
    level_eps=st.one_of(st.just(math.inf), st.floats(0.01, 50), st.integers(1, 5)),
)


@settings(max_examples=300, deadline=None)
@given(st.lists(flags, max_size=8))
def test_flag_encoding_is_byte_identical_to_the_contract(batch):
    assert encode_flags(batch) == [encode(f.to_dict()) for f in batch]


# -- the RCA worker's flag decoder ------------------------------------------------------------------
PLANTS = {"feed", "reactor"}


def flag_one_by_one(raws):
    out = []
    for raw in raws:
        try:
            out.append(decode_flag(raw, "tep", PLANTS, now=NOW))
        except MessageError as err:
            out.append(err)
    return out


def same_flags(batch, single):
    assert len(batch) == len(single)
    for b, s in zip(batch, single, strict=True):
        if isinstance(s, MessageError):
            assert isinstance(b, MessageError) and (b.reason, b.detail) == (s.reason, s.detail)
        else:
            assert b == s and [type(getattr(b, f)) for f in ("ts", "eps", "level_eps")] == [float, float, float]


def flag_raw(**changes):
    doc = {"site": "tep", "plant": "feed", "ts": 540.0, "seq": 3, "zc": 1, "za": 0, "eps": None, "model_version": "v"}
    doc.update(changes)
    return json.dumps({k: v for k, v in doc.items() if v is not DROP}).encode()


DROP = object()
FLAG_CASES = [
    flag_raw(),
    flag_raw(level=2, level_eps=None),
    flag_raw(level=0, level_eps=1.5),
    flag_raw(level=None, level_eps=None),
    flag_raw(eps=2),
    flag_raw(eps="2.5"),
    flag_raw(withheld=True, zc=0, za=0),
    flag_raw(withheld=True),
    flag_raw(zc=True),
    flag_raw(zc=2),
    flag_raw(za=0.0),
    flag_raw(seq=True),
    flag_raw(seq=-1),
    flag_raw(ts=-1),
    flag_raw(ts=NOW + 2 * 86_400),
    flag_raw(level=-1, level_eps=None),
    flag_raw(level=True, level_eps=None),
    flag_raw(model_version=7),
    flag_raw(model_version=DROP),
    flag_raw(site="other"),
    flag_raw(plant="boiler"),
    flag_raw(extra=1),
    flag_raw(sensor_fault=True),
    flag_raw(sensor_fault=False, level=1, level_eps=None),
    flag_raw(sensor_fault=None),
    flag_raw(sensor_fault=1),
    flag_raw(sensor_fault=True, withheld=True, zc=0, za=0),
    flag_raw(sensor_fault=True, degraded=True, zc=0, za=0),
    b'{"site":"tep","plant":"feed","ts":1,"seq":1,"zc":1,"za":1,"eps":1' + b"0" * 30 + b',"model_version":"v"}',
    b'{"site":"tep","plant":"feed","ts":1,"seq":1' + b"0" * 30 + b',"zc":1,"za":1,"eps":null,"model_version":"v"}',
    b'{"site":"tep","plant":"feed","ts":NaN,"seq":1,"zc":1,"za":1,"eps":null,"model_version":"v"}',
    b'{"site":"tep","plant":"feed","ts":1,"seq":1,"zc":1,"za":1,"eps":NaN,"model_version":"v"}',
    b'{"site":"tep","plant":"feed","ts":1,"seq":1,"zc":1,"za":1,"eps":1' + b"0" * 400 + b',"model_version":"v"}',
    b'{"site":"tep","plant":"feed","plant":"reactor","ts":1,"seq":1,"zc":1,"za":1,"eps":null,"model_version":"v"}',
    b"[1]",
    b"{",
    b"\xef\xbb\xbf" + flag_raw(),
    flag_raw().decode().encode("utf-16"),
]


def test_every_flag_case_decodes_as_one_by_one():
    same_flags(decode_flags(FLAG_CASES, "tep", PLANTS, now=NOW), flag_one_by_one(FLAG_CASES))
    assert decode_flags([], "tep", PLANTS) == []


flag_docs = st.dictionaries(
    st.sampled_from(
        [
            *("site", "plant", "ts", "seq", "zc", "za", "eps", "model_version", "level", "level_eps"),
            *("withheld", "sensor_fault"),
        ]
    ),
    st.one_of(
        numbers,
        st.sampled_from(["tep", "feed", "reactor", "v", "1.5"]),
        st.integers(0, 3),
        st.integers(2**62, 2**70),
        st.booleans(),
    ),
).map(lambda extra: {**json.loads(flag_raw()), **extra})


@pytest.mark.exhaustive  # make test: test_flag_columns_equal_the_messages checks the same on the same documents
@settings(max_examples=300, deadline=None, derandomize=True, database=None)
@given(st.lists(flag_docs, max_size=10))
def test_random_flag_batches_decode_exactly_as_one_by_one(docs):
    raws = [json.dumps(d).encode() for d in docs]
    same_flags(decode_flags(raws, "tep", PLANTS, now=NOW), flag_one_by_one(raws))


# -- the RCA worker's columnar flag decoder: a whole batch of plain flags at once, or None --------
def typed(message):
    """A flag's fields with their types (1 == 1.0 == True for ==; not for the contract)."""
    return [(type(v), v) for v in dataclasses.astuple(message)]


def same_columns(raws):
    """decode_flag_columns of ``raws`` equals decode_flags' messages field by field and type by type when it
    takes the batch; it takes it exactly when every message is a valid plain one that orjson parses (no
    withheld or degraded field: those take the message path, as a BOM or UTF-16 does; a sensor-fault bit is
    taken)."""
    columns = decode_flag_columns(raws, "tep", PLANTS, now=NOW)
    messages = decode_flags(raws, "tep", PLANTS, now=NOW)
    plain = all(isinstance(m, FlagMessage) for m in messages) and all(keys(raw) in PLAIN_SHAPES for raw in raws)
    assert (columns is not None) == plain
    if columns is not None:
        assert len(columns) == len(raws)
        assert [typed(m) for m in columns.messages()] == [typed(m) for m in messages]
    return columns


def keys(raw):
    try:
        return set(orjson.loads(raw))
    except orjson.JSONDecodeError:
        return None


PLAIN_KEYS = {"site", "plant", "ts", "seq", "zc", "za", "eps", "model_version"}
PLAIN_SHAPES = tuple(
    PLAIN_KEYS | levels | sensor for levels in (set(), {"level", "level_eps"}) for sensor in (set(), {"sensor_fault"})
)
GOOD_FLAGS = [flag_raw(), flag_raw(level=2, level_eps=None), flag_raw(level=None, level_eps=0.5), flag_raw(eps=2)]


def test_flag_columns_take_only_batches_of_valid_plain_flags():
    assert same_columns(GOOD_FLAGS) is not None
    assert same_columns([]) is not None
    # every case alone and after the good ones: one bad or not plain message sends the batch to decode_flags
    for case in FLAG_CASES:
        same_columns([case])
        same_columns([*GOOD_FLAGS, case])
    for other in (flag_raw(withheld=False), flag_raw(degraded=True, zc=0, za=0), flag_raw(eps=-1)):
        assert same_columns([*GOOD_FLAGS, other]) is None
    for other in (flag_raw(sensor_fault=None), flag_raw(sensor_fault=0), flag_raw(sensor_fault=True, withheld=False)):
        assert same_columns([*GOOD_FLAGS, other]) is None


def test_flag_columns_carry_the_sensor_fault_bits_in_one_order_or_many():
    """A batch of one field order (transposed at once) and the same batch with the fields of one message in
    another order give the same columns; a sensor-fault bit, true or false, is taken, absent is false."""
    batch = [flag_raw(sensor_fault=True), flag_raw(seq=4), flag_raw(seq=5, sensor_fault=False), flag_raw(seq=6)]
    one_order = [flag_raw(sensor_fault=s, seq=k) for k, s in enumerate([True, False, False, True])]
    reordered = json.dumps(dict(reversed(json.loads(batch[1]).items()))).encode()
    for raws in (batch, [batch[0], reordered, *batch[2:]], one_order):
        columns = same_columns(raws)
        assert columns is not None
        assert columns.sensor_fault == tuple(json.loads(raw).get("sensor_fault", False) for raw in raws)
    assert same_columns([flag_raw(sensor_fault=False), flag_raw()]).sensor_fault is None  # no bit set


@settings(max_examples=150, deadline=None, derandomize=True, database=None)
@given(st.lists(flag_docs, max_size=10), st.lists(st.integers(0, 9), max_size=4))
def test_flag_columns_equal_the_messages(docs, valid):
    """The random documents decode as one by one (decode_flags), and the columns equal the messages, on
    mostly valid batches (the columns' path) with the documents mixed in."""
    raws = [json.dumps(d).encode() for d in docs]
    same_flags(decode_flags(raws, "tep", PLANTS, now=NOW), flag_one_by_one(raws))
    plain = [
        flag_raw(seq=k, plant="reactor" if k % 2 else "feed", level=k % 3, level_eps=None, sensor_fault=k % 4 == 0)
        for k in valid
    ]
    same_columns(plain + raws)
    same_columns(plain)
