"""Topic declarations of a site (names from the configuration's templates).

Values and keys are raw bytes on every topic: the pure cores validate the JSON
themselves, so a malformed message reaches the agent with its original bytes
and can be dead-lettered with a reason instead of being dropped by a codec.
"""

from __future__ import annotations

from dataclasses import dataclass

import faust

from fedrca.config import SiteConfig

__all__ = ["SiteTopics", "declare_topics"]


@dataclass(frozen=True)
class SiteTopics:
    """The site's topics: per-plant sensors, flags, verdicts, params (compacted), dead letters."""

    sensors: dict[str, faust.TopicT]
    flags: faust.TopicT
    verdicts: faust.TopicT
    params: faust.TopicT
    deadletter: faust.TopicT


def _raw_topic(app: faust.App, name: str, partitions: int, compacting: bool = False) -> faust.TopicT:
    return app.topic(
        name,
        partitions=partitions,
        key_type=bytes,
        value_type=bytes,
        key_serializer="raw",
        value_serializer="raw",
        compacting=compacting,
    )


def declare_topics(app: faust.App, config: SiteConfig, partitions: int) -> SiteTopics:
    """Declare every topic of the site on ``app``."""
    return SiteTopics(
        sensors={p: _raw_topic(app, config.topic("sensors", plant=p), partitions) for p in config.plant_names},
        flags=_raw_topic(app, config.topic("flags"), 1),
        verdicts=_raw_topic(app, config.topic("verdicts"), 1),
        params=_raw_topic(app, config.topic("params"), 1, compacting=True),
        deadletter=_raw_topic(app, config.topic("deadletter"), 1),
    )
