"""The row assembler (pure): as-of values on the sample clock, quality codes, seq from the clock, bounds."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fedrca.edge.rows import RowAssembler
from fedrca.edge.tags import Quality
from fedrca.exceptions import ConfigError

G, B, S, M = (int(q) for q in (Quality.GOOD, Quality.BAD, Quality.STALE, Quality.MISSING))


def test_as_of_value_and_each_quality():
    a = RowAssembler(4, period=1.0, staleness=3.0, grace=0.2)
    a.start(now=0.0)
    a.update(0, 1.0, G, 0.1, 0.15)
    a.update(0, 2.0, G, 0.9, 0.95)  # same interval: the later one holds at t=1
    a.update(1, 5.0, B, 0.5, 0.55)  # Bad: no value
    a.update(2, 7.0, G, 0.5, 0.55)
    rows = a.due(1.2)
    assert [r.seq for r in rows] == [0, 1]
    assert rows[0].quality.tolist() == [M, M, M, M]  # t=0: nothing yet
    assert rows[1].values[0] == 2.0 and rows[1].quality.tolist() == [G, B, G, M]
    assert math.isnan(rows[1].values[1])
    # column 2 hears nothing more: stale once t - 0.55 > 3
    rows = a.due(5.2)
    assert [r.seq for r in rows] == [2, 3, 4, 5]
    assert [r.quality[2] for r in rows] == [G, G, S, S]
    assert np.isnan(rows[-1].values[2])


def test_alive_keeps_an_unchanged_value_fresh():
    a = RowAssembler(1, period=1.0, staleness=2.0)
    a.start(now=0.0)
    a.update(0, 3.0, G, 0.5, 0.5)
    for t in range(1, 10):
        a.alive([0], float(t))
    rows = a.due(9.0)
    assert all(r.quality[0] == G and r.values[0] == 3.0 for r in rows[1:])


def test_a_value_stamped_in_the_future_counts_from_its_arrival():
    a = RowAssembler(1, period=1.0, staleness=5.0, grace=0.5)
    a.start(now=0.0)
    a.update(0, 1.0, G, source_ts=100.0, heard=0.7)  # the server's clock runs ahead
    (r0, r1) = a.due(1.5)
    assert r0.quality[0] == M and r1.values[0] == 1.0


def test_updates_out_of_order_within_grace_land_in_their_rows():
    a = RowAssembler(1, period=1.0, staleness=5.0, grace=0.9)
    a.start(now=0.0)
    a.update(0, 2.0, G, 1.5, 1.6)
    a.update(0, 1.0, G, 0.5, 1.7)  # older sample arrives after the newer one
    rows = a.due(2.0)
    assert [r.seq for r in rows] == [0, 1]
    assert rows[0].quality[0] == M and rows[1].values[0] == 1.0
    assert a.due(2.9)[0].values[0] == 2.0


def test_a_late_update_is_counted_and_holds_for_later_rows():
    a = RowAssembler(1, period=1.0, staleness=5.0, grace=0.1)
    a.start(now=0.0)
    a.update(0, 1.0, G, 0.0, 0.05)
    assert a.due(1.1)[-1].values[0] == 1.0
    a.update(0, 9.0, G, 0.5, 1.3)  # belongs to row 1, closed already
    assert a.late == 1
    assert a.due(2.1)[0].values[0] == 9.0


def test_seq_is_the_clock_and_resume_neither_repeats_nor_renumbers():
    a = RowAssembler(1, period=2.0, staleness=9.0, anchor=100.0)
    a.start(now=110.0)
    seqs = [r.seq for r in a.due(120.0)]
    assert seqs == [5, 6, 7, 8, 9, 10]
    assert [r.ts for r in a.due(122.0)] == [122.0]
    # a restart after a short downtime resumes after the last published seq: gap = downtime
    b = RowAssembler(1, period=2.0, staleness=9.0, anchor=100.0)
    assert b.start(now=127.0, after=11) == 2  # rows 12, 13 were not made
    assert [r.seq for r in b.due(130.0)] == [14, 15]
    # a restart faster than one sample: no gap, no repeat
    c = RowAssembler(1, period=2.0, staleness=9.0, anchor=100.0)
    assert c.start(now=121.0, after=11) == 0
    assert [r.seq for r in c.due(126.0)] == [12, 13]


def test_a_jump_of_the_clock_skips_rows_and_counts_them():
    a = RowAssembler(1, period=1.0, staleness=1.0, max_behind=10)
    a.start(now=0.0)
    rows = a.due(100.0)
    assert len(rows) == 10 and rows[-1].seq == 100 and a.skipped == 91


def test_bad_settings_are_config_errors():
    with pytest.raises(ConfigError, match="period"):
        RowAssembler(1, period=0.0, staleness=1.0)
    with pytest.raises(ConfigError, match="grace"):
        RowAssembler(1, period=1.0, staleness=1.0, grace=-1)


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(st.floats(0, 50, allow_nan=False), st.floats(-1e6, 1e6, allow_nan=False), st.sampled_from([G, B])),
        max_size=300,
    )
)
def test_memory_is_bounded_and_rows_are_the_as_of_values(updates):
    """Whatever arrives (in time order, all before the rows close), row k holds the latest update at or before t_k."""
    updates = sorted(updates, key=lambda u: u[0])
    a = RowAssembler(1, period=1.0, staleness=1e9, grace=0.0)
    a.start(now=0.0)
    for t, v, q in updates:
        a.update(0, v, q, t, t)
        assert len(a._entries[0]) <= 2 + 51  # one entry per interval at most
    rows = a.due(60.0)
    for r in rows:
        before = [u for u in updates if u[0] <= r.ts]
        if not before:
            assert r.quality[0] == M
        else:
            # the latest of the interval holds (ties: the last one given)
            t, v, q = before[-1]
            assert r.quality[0] == q
            if q == G:
                assert r.values[0] == v


@pytest.mark.exhaustive
@settings(max_examples=3000, deadline=None)
@given(
    st.lists(
        st.tuples(st.floats(0, 50, allow_nan=False), st.floats(-1e6, 1e6, allow_nan=False), st.sampled_from([G, B])),
        max_size=300,
    )
)
def test_memory_is_bounded_and_rows_are_the_as_of_values_exhaustive(updates):
    """make exhaustive: the property above over many more examples."""
    test_memory_is_bounded_and_rows_are_the_as_of_values.hypothesis.inner_test(updates)


_BATCH = st.lists(
    st.tuples(
        st.integers(0, 2),  # column
        st.one_of(st.floats(-1e6, 1e6, allow_nan=False), st.sampled_from([math.nan, math.inf, -math.inf])),
        st.sampled_from([G, B, S, M]),
        st.one_of(st.floats(0, 30, allow_nan=False), st.just(math.nan)),  # source time (NaN: none)
    ),
    max_size=40,
)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(_BATCH, st.floats(0, 30, allow_nan=False)), max_size=6), st.floats(0.1, 3.0))
def test_update_many_is_update_one_by_one(batches, period):
    """The batch path (the sources' hot path) keeps the same entries, counts and rows as one update at a time,
    whatever the values, qualities, times (late, out of order, NaN) and periods."""
    one, many = (RowAssembler(3, period=period, staleness=5.0, grace=0.1, anchor=0.3) for _ in range(2))
    one.start(now=4.0)
    many.start(now=4.0)
    for batch, heard in sorted(batches, key=lambda b: b[1]):
        for c, v, q, t in batch:
            one.update(c, v, q, t, heard)
        if batch:
            c, v, q, t = (np.array(x) for x in zip(*batch, strict=True))
            many.update_many(c.astype(np.intp), v.astype(float), q.astype(np.uint8), t.astype(float), heard)
        assert repr(many._entries) == repr(one._entries) and many._heard == one._heard
        assert (many.late, many.superseded) == (one.late, one.superseded)
    for a, b in zip(one.due(40.0), many.due(40.0), strict=True):
        assert (a.seq, a.ts, a.quality.tolist()) == (b.seq, b.ts, b.quality.tolist())
        np.testing.assert_array_equal(a.values, b.values)
