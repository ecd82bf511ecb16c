"""Topic declarations of a site (names from the configuration's templates)."""

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


def declare_topics(app: faust.App, config: SiteConfig, partitions: int) -> SiteTopics:
    """Declare every topic of the site on ``app`` (raw bytes values; JSON is decoded by the cores)."""
    raw = {"value_type": bytes, "key_type": bytes, "value_serializer": "raw", "key_serializer": "raw"}
    return SiteTopics(
        sensors={
            p: app.topic(config.topic("sensors", plant=p), partitions=partitions, **raw) for p in config.plant_names
        },
        flags=app.topic(config.topic("flags"), partitions=1, **raw),
        verdicts=app.topic(config.topic("verdicts"), partitions=1, **raw),
        params=app.topic(config.topic("params"), partitions=1, compacting=True, **raw),
        deadletter=app.topic(config.topic("deadletter"), partitions=1, **raw),
    )
