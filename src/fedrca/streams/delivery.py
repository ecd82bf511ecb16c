"""Offset continuity of an agent's input: events the consumer skipped are fetched again.

Why it exists: during a consumer-group rebalance Faust drops the events it had
fetched but not yet handed to an agent and seeks back to the committed offsets.
When that seek does not take effect (a fetch already in flight returns later
records), Faust sees the jump in offsets, takes it for a compaction or
transaction-marker gap, marks the missing offsets as done and delivers the next
records: the skipped sensor readings were never processed and their flags
never published (observed in ``tests/streams/test_kafka_pipeline.py`` after a
``kill -9``: 139 rows of two plants missing).

The agents therefore keep, in their changelog-backed state, the last offset
they processed per partition (the *cursor*). :class:`OffsetGuard` compares every
batch with it: an event at or below the cursor was processed already (a
redelivery) and is dropped; an event beyond ``cursor + 1`` means records were
skipped, so the guard asks for a seek back to ``cursor + 1`` and drops the
partition's events until the re-read arrives. The state is the authority, so a
restart after Faust committed past such a gap heals the same way.

The re-read is recognised by its offset: events still queued from before the
seek continue *above* the offset that revealed the gap, while the re-read starts
at or below it. The first re-read event is accepted whatever its offset (offsets
without records, such as transaction markers, cannot be read again), and a
rewind is abandoned, with an error in the log, after a rebalance (another
worker may own the partition now) or after :attr:`OffsetGuard.give_up_after`
seconds (records deleted by retention cannot be read again either).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

__all__ = ["Admission", "OffsetGuard"]

log = logging.getLogger("fedrca.streams")


@dataclass
class Admission:
    """What to do with one batch.

    Attributes
    ----------
    keep : indices (into the batch) of the events to process, in batch order
    cursor : the cursor after processing them (partition as a string -> offset); JSON-friendly
    seeks : partition -> offset to seek the consumer to (a gap was found)
    dropped : number of events not kept (redeliveries, events queued before a seek)
    """

    keep: list[int]
    cursor: dict[str, int]
    seeks: dict[int, int] = field(default_factory=dict)
    dropped: int = 0


@dataclass
class _Rewind:
    trigger: int  # offset of the event that revealed the gap
    generation: int | None  # consumer generation when the seek was asked for
    since: float  # clock() when the seek was asked for


class OffsetGuard:
    """Keeps an agent's input contiguous per partition (see the module docstring).

    Parameters
    ----------
    name : what the guard protects, for the log (e.g. the topic)
    give_up_after : seconds after which an unanswered rewind is abandoned
    clock : monotonic clock (seconds); injectable for tests

    Examples
    --------
    >>> guard = OffsetGuard("sensors")
    >>> a = guard.admit([(0, 10, 1), (0, 11, 1)], {"0": 9})
    >>> a.keep, a.cursor, a.seeks
    ([0, 1], {'0': 11}, {})
    >>> a = guard.admit([(0, 15, 1), (0, 16, 1)], a.cursor)  # 12..14 were skipped
    >>> a.keep, a.seeks
    ([], {0: 12})
    >>> a = guard.admit([(0, 17, 1), (0, 12, 1), (0, 13, 1)], a.cursor)  # 17 was queued before the seek
    >>> a.keep, a.cursor
    ([1, 2], {'0': 13})
    """

    def __init__(self, name: str, give_up_after: float = 30.0, clock: Callable[[], float] = time.monotonic) -> None:
        self.name = name
        self.give_up_after = give_up_after
        self._clock = clock
        self._rewinds: dict[int, _Rewind] = {}

    @property
    def rewinding(self) -> dict[int, int]:
        """Partition -> offset that revealed the gap, for the partitions waiting for a re-read."""
        return {p: r.trigger for p, r in self._rewinds.items()}

    def admit(self, positions: Sequence[tuple[int, int, int | None]], cursor: Mapping[str, int] | None) -> Admission:
        """Decide which events of a batch to process.

        Parameters
        ----------
        positions : per event (partition, offset, consumer generation it was fetched in), batch order
        cursor : the last processed offset per partition (as saved in the state; None before any)
        """
        current = dict(cursor or {})
        keep: list[int] = []
        seeks: dict[int, int] = {}
        for i, (partition, offset, generation) in enumerate(positions):
            key = str(partition)
            rewind = self._rewinds.get(partition)
            if rewind is not None:
                expired = self._clock() - rewind.since > self.give_up_after
                if generation != rewind.generation or expired:
                    del self._rewinds[partition]
                    if expired:
                        log.error(
                            "%s partition %d: offsets %d..%d could not be read again within %.0f s "
                            "(deleted by retention?); continuing at %d",
                            self.name,
                            partition,
                            current.get(key, -1) + 1,
                            rewind.trigger - 1,
                            self.give_up_after,
                            offset,
                        )
                        current[key] = offset - 1
                elif offset > rewind.trigger:
                    continue  # queued before the seek
                else:
                    del self._rewinds[partition]
                    # the re-read starts at the first record there is: offsets below it have none
                    current[key] = max(current.get(key, -1), offset - 1)
            last = current.get(key)
            if last is not None and offset <= last:
                continue  # processed already
            if last is not None and offset > last + 1:
                log.warning(
                    "%s partition %d: offsets %d..%d were skipped by the consumer; reading them again",
                    self.name,
                    partition,
                    last + 1,
                    offset - 1,
                )
                self._rewinds[partition] = _Rewind(offset, generation, self._clock())
                seeks[partition] = last + 1
                continue
            keep.append(i)
            current[key] = offset
        return Admission(keep, current, seeks, len(positions) - len(keep))
