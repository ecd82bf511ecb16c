"""A recording :class:`~fedrca.edge.source.TagSink` and tags built in code, for the protocol sources' tests."""

from __future__ import annotations

import math
from collections.abc import Sequence

from fedrca.config.edge import TagAddress
from fedrca.edge.tags import Tag, TagUpdate


def tags(*addresses: TagAddress, source: str = "src") -> list[Tag]:
    """Tags 0..n-1 of plant ``p`` at ``addresses`` (column i named ``c<i>``)."""
    return [Tag(i, "p", i, f"c{i}", source, a, a.tag_class or source) for i, a in enumerate(addresses)]


class RecordingSink:
    """Keeps every update, keep-alive and refusal a source reports."""

    def __init__(self) -> None:
        self.all: list[tuple[int, float | None, int, float]] = []
        self.alive_calls: list[list[int]] = []
        self.refused: list[tuple[int | None, str, str]] = []

    def update(self, update: TagUpdate) -> None:
        self.all.append(tuple(update))  # type: ignore[arg-type]

    def update_many(
        self, tags: Sequence[int], values: Sequence[float], quality: Sequence[int], source_ts: Sequence[float]
    ) -> None:
        for tag, value, q, ts in zip(tags, values, quality, source_ts, strict=True):
            self.update(TagUpdate(tag, None if math.isnan(value) else value, q, ts))

    def alive(self, tags: Sequence[int]) -> None:
        self.alive_calls.append(list(tags))

    def rejected(self, tag: int | None, reason: str, detail: str) -> None:
        self.refused.append((tag, reason, detail))

    def of(self, tag: int) -> list[tuple[float | None, int]]:
        """(value, quality) of every update of ``tag``, in order."""
        return [(v, q) for t, v, q, _ in self.all if t == tag]

    def last(self, tag: int) -> tuple[float | None, int] | None:
        got = self.of(tag)
        return got[-1] if got else None
