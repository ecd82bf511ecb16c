"""OffsetGuard: the agents' input stays contiguous per partition, whatever the consumer delivers."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from fedrca.streams.delivery import OffsetGuard


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_contiguous_batches_are_kept_and_move_the_cursor():
    guard = OffsetGuard("t")
    a = guard.admit([(0, 0, 1), (1, 5, 1), (0, 1, 1)], None)
    assert a.keep == [0, 1, 2]
    assert a.cursor == {"0": 1, "1": 5}
    assert a.seeks == {} and a.dropped == 0


def test_redeliveries_at_or_below_the_cursor_are_dropped():
    guard = OffsetGuard("t")
    a = guard.admit([(0, 3, 1), (0, 4, 1), (0, 5, 1)], {"0": 4})
    assert a.keep == [2]
    assert a.cursor == {"0": 5}
    assert a.dropped == 2


def test_a_gap_asks_for_a_seek_and_waits_for_the_re_read():
    guard = OffsetGuard("t")
    a = guard.admit([(0, 8, 1), (0, 9, 1), (1, 3, 1)], {"0": 4, "1": 2})
    assert a.seeks == {0: 5}
    assert a.keep == [2], "the other partition goes on"
    assert a.cursor == {"0": 4, "1": 3}
    assert guard.rewinding == {0: 8}
    # events queued before the seek took effect, then the re-read from 5
    b = guard.admit([(0, 10, 1), (0, 5, 1), (0, 6, 1), (0, 7, 1), (0, 8, 1)], a.cursor)
    assert b.keep == [1, 2, 3, 4]
    assert b.cursor == {"0": 8, "1": 3}
    assert guard.rewinding == {}


def test_offsets_without_records_do_not_make_the_guard_seek_forever():
    # Transaction markers at 5..7: the re-read after the seek starts at 8 again.
    guard = OffsetGuard("t")
    a = guard.admit([(0, 8, 1)], {"0": 4})
    assert a.seeks == {0: 5}
    b = guard.admit([(0, 8, 1), (0, 9, 1)], a.cursor)
    assert b.keep == [0, 1] and b.seeks == {}
    assert b.cursor == {"0": 9}


def test_a_rebalance_or_a_timeout_ends_a_rewind():
    clock = Clock()
    guard = OffsetGuard("t", give_up_after=10.0, clock=clock)
    a = guard.admit([(0, 8, 1)], {"0": 4})
    # the next generation: another worker may own the partition now; plain rules apply again
    b = guard.admit([(0, 5, 2)], a.cursor)
    assert b.keep == [0] and guard.rewinding == {}

    c = guard.admit([(0, 20, 2)], b.cursor)
    assert c.seeks == {0: 6}
    clock.now = 5.0
    assert guard.admit([(0, 21, 2)], c.cursor).keep == []  # still waiting
    clock.now = 11.0  # records 6..19 cannot be read again (retention): go on
    d = guard.admit([(0, 22, 2)], c.cursor)
    assert d.keep == [0] and d.cursor == {"0": 22}


@settings(max_examples=200, deadline=None)
@given(
    n=st.integers(1, 60),
    skips=st.lists(st.tuples(st.integers(1, 59), st.integers(1, 10)), max_size=3),  # after the first record
    batch=st.integers(1, 7),
)
def test_every_offset_is_processed_exactly_once_despite_skips_and_redeliveries(n, skips, batch):
    """A simulated consumer that sometimes jumps ahead (skips) and honours seeks."""
    guard = OffsetGuard("t")
    cursor = None
    position, processed, pending_skips, delivered_last = 0, [], dict(skips), False
    for _ in range(10 * n + 100):
        if position >= n:
            break
        chunk = []
        while len(chunk) < batch and position < n:
            jump = pending_skips.pop(position, 0)
            position = min(n, position + jump)  # the consumer lost `jump` records
            if position < n:
                chunk.append((0, position, 1))
                position += 1
        delivered_last |= any(offset == n - 1 for _, offset, _ in chunk)
        a = guard.admit(chunk, cursor)
        processed += [chunk[i][1] for i in a.keep]
        cursor = a.cursor
        if 0 in a.seeks:
            position = a.seeks[0]
    assert processed == list(range(len(processed))), "in order, without a gap or a duplicate"
    if delivered_last:  # a skip is noticed at the next record; one running to the end is not
        assert len(processed) == n
