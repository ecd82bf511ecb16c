"""Every override of a private part of Faust or aiokafka, in one place, with version guards.

fedrca's workers need two behaviours Faust does not offer through its public API (see
each class): a configurable fetch wait, and no commit of an event no agent processed.
Both subclass Faust internals, so they are tied to the versions they were written and
tested against: :data:`SUPPORTED` is checked at import and a different version is
refused with one clear line (the upper pins in ``pyproject.toml`` keep installs inside it).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from importlib.metadata import version
from typing import Any

import faust
from faust.transport.drivers import aiokafka as faust_aiokafka

from fedrca.exceptions import ConfigError

__all__ = ["FETCH_MAX_WAIT", "SUPPORTED", "FedrcaApp", "check_versions"]

log = logging.getLogger("fedrca.streams")

#: Longest time (seconds) the broker may hold a worker's fetch request open while none of
#: the fetched partitions has new data (Kafka ``fetch.max.wait.ms``; Faust fixes it at 1.5 s).
FETCH_MAX_WAIT = 0.05

#: Distribution -> (lowest, first unsupported) version of the private APIs overridden here.
SUPPORTED: dict[str, tuple[tuple[int, ...], tuple[int, ...]]] = {
    "faust-streaming": ((0, 15, 2), (0, 16)),
    "aiokafka": ((0, 12), (0, 15)),
}


def _parse(text: str) -> tuple[int, ...]:
    parts = []
    for piece in text.split("."):
        digits = "".join(ch for ch in piece if ch.isdigit())
        if not digits:
            break
        parts.append(int(digits))
    return tuple(parts)


def check_versions(installed: Mapping[str, str] | None = None) -> None:
    """Refuse Faust / aiokafka versions whose private parts fedrca has not been checked against.

    Raises
    ------
    ConfigError
        Naming the distribution, its version and the supported range.

    Examples
    --------
    >>> check_versions({"faust-streaming": "0.15.3", "aiokafka": "0.14.0"})
    >>> check_versions({"faust-streaming": "0.17.0", "aiokafka": "0.14.0"})  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    fedrca.exceptions.ConfigError: faust-streaming 0.17.0 is not supported ... (>= 0.15.2, < 0.16); ...
    """
    for dist, (low, high) in SUPPORTED.items():
        text = (installed or {}).get(dist) if installed is not None else version(dist)
        if text is None:
            continue
        found = _parse(text)
        if not low <= found < high:
            lo, hi = ".".join(map(str, low)), ".".join(map(str, high))
            raise ConfigError(
                f"{dist} {text} is not supported by fedrca.streams.compat (>= {lo}, < {hi}); "
                f"install a supported version: pip install '{dist}>={lo},<{hi}'"
            )


check_versions()


class _ConsumerThread(faust_aiokafka.AIOKafkaConsumerThread):
    """Faust's aiokafka consumer thread with a configurable ``fetch_max_wait_ms``.

    Why it matters: aiokafka keeps one fetch per broker in flight and leaves out the
    partitions whose fetched records the worker has not taken yet. When an agent is busy
    for more than aiokafka's prefetch backoff (0.1 s), the next fetch covers only idle
    partitions (a sensor partition without a plant, Faust's leader topic), and the broker
    holds it for the whole max wait while the busy partitions' new messages wait behind
    it. With Faust's 1.5 s that added up to 1.5 s to every message of a loaded worker
    (measured with ``bench/bench_streams.py``); the short wait bounds the stall.
    """

    def _create_worker_consumer(self, transport: Any) -> Any:
        consumer = super()._create_worker_consumer(transport)
        wait = getattr(self.app, "fedrca_fetch_max_wait", FETCH_MAX_WAIT)
        consumer._fetch_max_wait_ms = int(wait * 1000)  # read by the fetcher when the consumer starts
        return consumer

    async def seek_to_committed(self) -> Mapping[Any, int]:
        return await self.call_thread(self._seek_to_committed)

    async def _seek_to_committed(self) -> Mapping[Any, int]:
        """Seek every stream partition to its committed offset, including a partition without one.

        After a rebalance Faust drops the events it had buffered but not processed and seeks
        back to the committed offsets; aiokafka seeks only to committed offsets above 0, so a
        partition of a new group kept the position its fetcher had reached and the dropped
        events were never delivered again (seen as a lost first flag once fetches got fast).
        Such a partition goes back to its beginning (``consumer_auto_offset_reset="earliest"``);
        changelog partitions are left to Faust's table recovery.
        """
        consumer = self._ensure_consumer()
        committed = await consumer.seek_to_committed()
        if self.app.conf.consumer_auto_offset_reset == "earliest":
            changelogs = self.app.tables.changelog_topics
            fresh = [tp for tp, offset in committed.items() if not offset and tp.topic not in changelogs]
            if fresh:
                for tp in fresh:
                    position = await consumer.position(tp)
                    if position:
                        log.info("rewinding %s (no committed offset) from %s to its beginning", tp, position)
                await consumer.seek_to_beginning(*fresh)
        return dict(committed)


class _Consumer(faust_aiokafka.Consumer):
    """Faust's aiokafka consumer that never commits an event no agent processed.

    While a rebalance is in progress (flow control suspended, or the event fetched in an
    older generation) Faust's streams skip the events they receive and *acknowledge* them
    "so the lag does not grow"; their offsets then get committed and the events are never
    delivered again: a lost sensor reading, hence a lost flag, seen in the kill -9 test
    once fetches got fast. Such acknowledgements are refused here: the event is let go
    (nothing waits for it) but its offset stays uncommitted, so it is delivered again
    after the rebalance and the cores drop it if it was processed after all.
    """

    def _new_consumer_thread(self) -> faust_aiokafka.AIOKafkaConsumerThread:
        return _ConsumerThread(self, loop=self.loop, beacon=self.beacon)

    def ack(self, message: Any) -> bool:
        app = self.app
        if message.generation_id != app.consumer_generation_id or not app.flow_control.is_active():
            message.acked = True
            self._unacked_messages.discard(message)
            return False
        return bool(super().ack(message))


class _Transport(faust_aiokafka.Transport):
    Consumer = _Consumer


class FedrcaApp(faust.App):
    """faust.App whose Kafka transport uses :class:`_ConsumerThread`."""

    fedrca_fetch_max_wait: float = FETCH_MAX_WAIT

    def _new_transport(self) -> Any:
        if self.conf.broker_consumer[0].scheme in ("kafka", "aiokafka"):
            return _Transport(self.conf.broker_consumer, self)
        return super()._new_transport()
