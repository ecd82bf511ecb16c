"""Every Kafka name a site's workers use: topics, consumer groups, transactional ids.

One place, so the workers, the topic set-up (:func:`fedrca.connectors.kafka.ensure_site_topics`)
and the deployment generator (``tools/sync-k8s.py``: topics, users and ACLs) agree.

=====================================  ===========  =========  ============================================
topic                                  partitions   cleanup    who writes / reads
=====================================  ===========  =========  ============================================
``<site>.sensors.<plant>``             1            delete     the plant's source / its processor
``<site>.flags``                       1            delete     every processor (transactions) / the RCA
``<site>.verdicts``                    1            delete     the RCA (transactions) / operators
``<site>.params``                      1            compact    ``publish-params`` / processors, the RCA
``<site>.deadletter.<plant>``          1            delete     the plant's processor (raw bytes: private)
``<site>.deadletter``                  1            delete     the RCA (flags, artifacts: no raw value)
``<site>.state.<plant>``               1            compact    the plant's processor (its detector state)
``<site>.state.rca``                   1            compact    the RCA
``<site>.history.<plant>``             1            compact    the plant's processor (its rows, baselines;
                                                               only with ``drift.enabled``: plant-private)
``<site>.control``                     1            compact    ``fedrca baseline`` / the plant processors
                                                               (operator commands; ``drift.enabled``)
=====================================  ===========  =========  ============================================

A plant's sensor topic has one partition: its stream is ordered by sample and keyed
by the plant, and the plant is the unit of parallelism (a worker carries any number
of plants; more workers in the group share the plants).

Examples
--------
>>> from fedrca.config import load_config
>>> names = SiteNames(load_config("config/tep.yaml"))
>>> names.processor_group(["reactor"]), names.transactional_id("tep.sensors.reactor", 0)
('fedrca-tep-plants-reactor', 'fedrca-tep-plants-reactor-0')
>>> names.processor_group(names.config.plant_names), names.rca_transactional_id(0)
('fedrca-tep-plants', 'fedrca-tep-rca-0')
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from fedrca.config import SiteConfig
from fedrca.exceptions import ConfigError

__all__ = ["COMPACTED", "SiteNames", "topic_specs"]


@dataclass(frozen=True)
class SiteNames:
    """The names of one site."""

    config: SiteConfig

    @property
    def site(self) -> str:
        """The site name."""
        return self.config.site

    def sensors(self, plant: str) -> str:
        """``<site>.sensors.<plant>``."""
        return self.config.topic("sensors", plant=plant)

    def plant_of(self, sensors_topic: str) -> str:
        """The plant whose sensor topic this is."""
        for plant in self.config.plant_names:
            if self.sensors(plant) == sensors_topic:
                return plant
        raise ConfigError(f"{sensors_topic} is not a sensor topic of site '{self.site}'")

    def plant_deadletter(self, plant: str) -> str:
        """The plant's own dead-letter topic (its dead letters hold raw values)."""
        return self.config.topic("plant_deadletter", plant=plant)

    def state(self, plant: str) -> str:
        """The plant processor's compacted state topic."""
        return self.config.topic("state", plant=plant)

    def history(self, plant: str) -> str:
        """The plant processor's compacted history topic (its rows and baselines: plant-private)."""
        return self.config.topic("history", plant=plant)

    @property
    def control(self) -> str:
        """The operators' commands to the plants' re-baselining loops."""
        return self.config.topic("control")

    def processor_group(self, plants: Sequence[str]) -> str:
        """Consumer group of the processors of ``plants``: ``fedrca-<site>-plants`` for all of them,
        ``fedrca-<site>-plants-<p1>-<p2>`` for a subset (one group per deployment unit)."""
        if sorted(plants) == sorted(self.config.plant_names):
            return f"fedrca-{self.site}-plants"
        return f"fedrca-{self.site}-plants-" + "-".join(sorted(plants))

    def transactional_id(self, sensors_topic: str, partition: int) -> str:
        """The fixed transactional id of a plant's input partition: ``fedrca-<site>-plants-<plant>-<p>``."""
        return f"fedrca-{self.site}-plants-{self.plant_of(sensors_topic)}-{partition}"

    def plant_topics(self, plants: Sequence[str]) -> list[str]:
        """The topics a processor of ``plants`` reads or writes."""
        own = [name for p in plants for name in (self.sensors(p), self.plant_deadletter(p), self.state(p))]
        if self.config.drift.enabled:
            own += [self.history(p) for p in plants] + [self.control]
        return [*own, self.config.topic("flags"), self.config.topic("params")]

    def rca_topics(self) -> list[str]:
        """The topics the RCA worker reads or writes."""
        c = self.config
        return [c.topic("flags"), c.topic("verdicts"), c.topic("deadletter"), c.topic("rca_state"), c.topic("params")]

    @property
    def rca_group(self) -> str:
        """Consumer group of the RCA worker."""
        return f"fedrca-{self.site}-rca"

    def rca_transactional_id(self, partition: int) -> str:
        """The fixed transactional id of the RCA's input partition."""
        return f"fedrca-{self.site}-rca-{partition}"


#: How fedrca creates its compacted topics (state, history, params, control). A worker that takes a
#: partition over reads its history topic whole (and its state topic's newest records), and Kafka
#: compacts closed segments only: with the broker's defaults a segment closes at 1 GiB or after 7 days,
#: so a plant's state and history grew by hundreds of MB an hour at 1,000 msgs/s, never compacted, and a
#: take-over read longer than the session timeout (the member expired in its own take-over, again and
#: again: docs/streams.md, "Compacted topics"). A segment closes at 16 MiB or after a minute here, and
#: the cleaner takes a topic once a tenth of it is superseded.
COMPACTED: dict[str, str] = {
    "cleanup.policy": "compact",
    "segment.bytes": str(16 * 1024 * 1024),
    "segment.ms": str(60_000),
    "min.cleanable.dirty.ratio": "0.1",
}


def topic_specs(config: SiteConfig, replication: int = 1) -> dict[str, dict[str, Any]]:
    """Every topic of the site and how it is created (kafka-python ``create_topics`` dict form).

    Examples
    --------
    >>> from fedrca.config import load_config
    >>> specs = topic_specs(load_config("config/tep.yaml"))
    >>> specs["tep.sensors.reactor"]["num_partitions"], specs["tep.state.reactor"]["configs"]["segment.ms"]
    (1, '60000')
    """
    names = SiteNames(config)
    compact = dict(COMPACTED)
    specs: dict[str, dict[str, Any]] = {}
    for plant in config.plant_names:
        specs[names.sensors(plant)] = {}
        specs[names.plant_deadletter(plant)] = {}
        specs[names.state(plant)] = {"configs": compact}
        if config.drift.enabled:
            specs[names.history(plant)] = {"configs": compact}
    if config.drift.enabled:
        specs[names.control] = {"configs": compact}
    for kind in ("flags", "verdicts", "deadletter"):
        specs[config.topic(kind)] = {}
    specs[config.topic("params")] = {"configs": compact}
    specs[config.topic("rca_state")] = {"configs": compact}
    return {name: {"num_partitions": 1, "replication_factor": replication, **spec} for name, spec in specs.items()}
