"""The contract every protocol client of ``fedrca edge`` implements, and what it reports to.

A source (OPC UA, MQTT, Sparkplug B, Modbus TCP) owns one connection and the tags read
through it. :meth:`TagSource.run` connects, subscribes or polls, and calls its
:class:`TagSink` for every value; it never returns while the process runs: it reconnects by
itself (counted in :attr:`SourceCounters.reconnects`) and raises only
:class:`~fedrca.exceptions.ConfigError` for what no retry can fix, found when it first
connects (a node the server does not have, credentials the server refuses): the process
then stops with that one line.

Hostile input (a value of the wrong type, NaN, a malformed payload, a flood) is never an
exception: the source reports it with :meth:`TagSink.rejected` (one log line per tag and
reason, a metric) and, when it concerns a tag, an update of quality BAD.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

from fedrca.edge.tags import Tag, TagUpdate

__all__ = ["SourceCounters", "TagSink", "TagSource"]


class TagSink(Protocol):
    """Where a source reports (the edge runtime; a list in tests)."""

    def update(self, update: TagUpdate) -> None:
        """One value of one tag (called from the event loop's thread, never blocks)."""

    def update_many(
        self, tags: Sequence[int], values: Sequence[float], quality: Sequence[int], source_ts: Sequence[float]
    ) -> None:
        """Values of several tags that arrived together, as parallel sequences (a value NaN when there
        is none): the same as :meth:`update` on each in order, one call per notification or batch of
        messages instead of one per value (the hot path of a subscription)."""

    def alive(self, tags: Sequence[int]) -> None:
        """The connection vouches now that the last values of ``tags`` still hold.

        A report-by-exception source calls it on every keep-alive or publish of the
        subscription serving ``tags``; a polling source need not (each poll is an update).
        """

    def rejected(self, tag: int | None, reason: str, detail: str) -> None:
        """Input refused (``reason``: a short kebab-case word for the metric label, e.g.
        ``wrong-type``; ``detail``: what, for the log line). ``tag`` None: not one tag's."""


@dataclass
class SourceCounters:
    """What a source did, for the metrics and the status line (monotone counts)."""

    updates: int = 0
    rejected: int = 0
    reconnects: int = 0
    connected: bool = False
    last_error: str = ""
    #: updates superseded by a newer one of the same tag before they were read (a flood conflated: an MQTT
    #: JSON source past its queue's soft bound)
    conflated: int = 0
    #: reason -> count of refused inputs
    reasons: dict[str, int] = field(default_factory=dict)


class TagSource(Protocol):
    """One protocol connection and its tags.

    Attributes
    ----------
    name : the source's name in ``edge.sources``
    kind : its protocol (``opcua``, ``mqtt``, ``sparkplug``, ``modbus``)
    counters : what it did so far
    """

    name: str
    kind: str
    counters: SourceCounters

    @property
    def tags(self) -> Sequence[Tag]:
        """The tags read through this source."""
        ...

    async def run(self, sink: TagSink) -> None:
        """Read the tags into ``sink`` until cancelled (reconnecting by itself).

        Raises
        ------
        ConfigError
            For what no retry fixes, found at the first connection: one line naming the
            tag(s) or the credentials.
        """
        ...
