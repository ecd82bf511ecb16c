"""Helpers of the edge tests: a list sink, a site with an OPC UA source, waiting on conditions."""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Callable
from typing import Any

from fedrca.config import parse_config
from fedrca.edge.opcua_server import SIM_NAMESPACE
from fedrca.edge.tags import TagUpdate

#: Fast timings for tests: changes every 50 ms, health checked every 200 ms.
FAST = {"publishing_interval": 0.05, "watchdog_interval": 0.2, "reconnect_max_delay": 0.5, "request_timeout": 2.0}


class ListSink:
    """A TagSink keeping everything (the runtime's role in the source tests)."""

    def __init__(self) -> None:
        self.updates: list[TagUpdate] = []
        self.alive_calls = 0
        self.rejections: list[tuple[int | None, str, str]] = []

    def update(self, update: TagUpdate) -> None:
        self.updates.append(update)

    def update_many(self, tags: Any, values: Any, quality: Any, source_ts: Any) -> None:
        for tag, value, q, ts in zip(tags, values, quality, source_ts, strict=True):
            self.update(TagUpdate(tag, None if math.isnan(value) else value, q, ts))

    def alive(self, tags: Any) -> None:
        self.alive_calls += 1

    def rejected(self, tag: int | None, reason: str, detail: str) -> None:
        self.rejections.append((tag, reason, detail))

    def last(self, tag: int) -> TagUpdate | None:
        for u in reversed(self.updates):
            if u.tag == tag:
                return u
        return None


def site(url: str, columns: list[str], tags: dict[str, Any] | None = None, **source: Any):
    """A one-plant site whose columns are the server's tags (``s=<column>`` in the simulator's namespace)."""
    return parse_config(
        {
            "site": "s",
            "dataset": {"sample_seconds": 0.2},
            "plants": [{"name": "p", "sensors": columns}],
            "edge": {
                "staleness_seconds": 1.0,
                "grace_seconds": 0.1,
                "sources": {"plc": {"kind": "opcua", "url": url, "namespace": SIM_NAMESPACE, **FAST, **source}},
                "plants": {"p": {"tags": tags or {}, "template": "s={column}"}},
            },
        }
    )


async def wait_for(condition: Callable[[], bool], timeout: float = 10.0, what: str = "condition") -> float:
    """Poll ``condition`` until true; returns the seconds it took (AssertionError after ``timeout``)."""
    start = time.monotonic()
    while not condition():
        if time.monotonic() - start > timeout:
            raise AssertionError(f"{what} not reached within {timeout} s")
        await asyncio.sleep(0.02)
    return time.monotonic() - start
