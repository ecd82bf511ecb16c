"""A Kafka consumer class that records when its offsets are asked, and how many partitions it held then
(``tests/streams/test_startup.py``, ``tests/streams/test_state_read.py``: offsets asked before a partition is
assigned do not wait behind a fetch in flight)."""

from __future__ import annotations

from typing import Any


def recording_offsets(base: type, asked: list[tuple[str, int]]) -> type:
    """A subclass of the consumer class ``base`` that appends ``(request, partitions assigned)`` to ``asked``
    for each ``beginning_offsets`` and ``end_offsets``."""

    class Recording(base):  # type: ignore[misc, valid-type]
        async def beginning_offsets(self, partitions: Any) -> Any:
            asked.append(("beginning", len(self.assignment())))
            return await super().beginning_offsets(partitions)

        async def end_offsets(self, partitions: Any) -> Any:
            asked.append(("end", len(self.assignment())))
            return await super().end_offsets(partitions)

    return Recording
