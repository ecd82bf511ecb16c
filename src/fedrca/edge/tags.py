"""Tag updates, the quality codes, and the tag map of one edge process.

A protocol client turns what its server says into :class:`TagUpdate` values: which tag
(its index in the process's :class:`TagMap`), the value in the column's unit (``None``
when there is none), a quality code and the time the value holds from. The row
assembler (:mod:`fedrca.edge.rows`) turns them into rows.

Quality codes are the sensor contract's (:class:`fedrca.contracts.Quality`, the ``quality``
list of a sensor message): 0 good, 1 bad (the device or protocol reported Bad), 2 stale (no
fresh update within the bound), 3 missing (never received, or no value).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import NamedTuple

from fedrca.config import SiteConfig
from fedrca.config.edge import ResolvedTag, TagAddress, resolve_tags
from fedrca.contracts import Quality
from fedrca.exceptions import ConfigError

__all__ = ["Quality", "Tag", "TagMap", "TagUpdate", "to_float"]


class TagUpdate(NamedTuple):
    """One value of one tag as a protocol client saw it (immutable).

    Attributes
    ----------
    tag : int
        The tag's index in the process's :class:`TagMap` (``TagMap.tags[tag]``).
    value : float or None
        In the column's unit (scale and offset applied); None when there is no value.
        A value that is not a finite number travels as None with a non-good quality.
    quality : int
        A :class:`Quality` code (GOOD for a usable value).
    source_ts : float
        Seconds since the epoch the value holds from (the device's, the server's or the
        arrival time, per the source's ``timestamps`` setting).
    """

    tag: int
    value: float | None
    quality: int
    source_ts: float


def to_float(raw: object) -> float | None:
    """A protocol value as a finite float, or None (strings, NaN, inf, arrays, bools are no value).

    A bool is a valid number for a digital tag (0/1): it converts. An int beyond the float
    range is no value.

    Examples
    --------
    >>> to_float(3), to_float(2.5), to_float(True), to_float("7"), to_float(float("nan")), to_float(None)
    (3.0, 2.5, 1.0, None, None, None)
    """
    if isinstance(raw, bool):
        return float(raw)
    if isinstance(raw, int | float):
        try:
            value = float(raw)
        except OverflowError:
            return None
        return value if math.isfinite(value) else None
    return None


@dataclass(frozen=True)
class Tag:
    """One tag of an edge process: which plant column it fills and where it is read.

    ``index`` is its position in :attr:`TagMap.tags` (what :class:`TagUpdate` carries).
    """

    index: int
    plant: str
    column: int
    name: str
    source: str
    address: TagAddress
    tag_class: str

    def scaled(self, raw: float) -> float:
        """``raw * scale + offset`` (the column's unit)."""
        a = self.address
        return raw * a.scale + a.offset if (a.scale != 1.0 or a.offset != 0.0) else raw

    def describe(self) -> str:
        """``plant/column (address)`` for log lines."""
        return f"{self.plant}/{self.name} ({self.address.describe()})"


class TagMap:
    """The tags of one edge process: every sensor column of its plants, in plant then column order.

    Parameters
    ----------
    config : the site (its ``edge:`` section and its plants)
    plants : the plants this process serves (a group)

    Raises
    ------
    ConfigError
        When the site has no ``edge:`` section or a plant has no tag map.
    """

    def __init__(self, config: SiteConfig, plants: Sequence[str]) -> None:
        edge = config.edge
        if edge is None:
            raise ConfigError(
                "the site has no edge: section; add edge.sources and edge.plants (docs/connectors.md)",
                source=config.source,
                key="edge",
            )
        if not plants:
            raise ConfigError("an edge process serves at least one plant", key="--plant")
        self.site = config.site
        self.settings = edge
        self.plants: list[str] = list(plants)
        self.width: dict[str, int] = {}
        tags: list[Tag] = []
        for plant in self.plants:
            sensors = config.plant(plant).sensors
            resolved: list[ResolvedTag] = resolve_tags(edge, plant, sensors, config.site, config.source)
            self.width[plant] = len(sensors)
            for r in resolved:
                tags.append(Tag(len(tags), plant, r.column, r.name, r.source, r.address, r.tag_class))
        self.tags: tuple[Tag, ...] = tuple(tags)

    def __len__(self) -> int:
        return len(self.tags)

    def of_source(self, source: str) -> list[Tag]:
        """The tags read from ``source``."""
        return [t for t in self.tags if t.source == source]

    def of_plant(self, plant: str) -> list[Tag]:
        """The tags of ``plant`` in column order."""
        return [t for t in self.tags if t.plant == plant]

    def sources(self) -> list[str]:
        """The sources this process connects to, in order of first use."""
        return list(dict.fromkeys(t.source for t in self.tags))

    def classes(self, plant: str) -> list[str]:
        """The tag classes of ``plant``, in order of first use."""
        return list(dict.fromkeys(t.tag_class for t in self.of_plant(plant)))

    def indices(self, tags: Iterable[Tag]) -> list[int]:
        """The indices of ``tags``."""
        return [t.index for t in tags]
