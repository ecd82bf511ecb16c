"""``fedrca edge``: a plant's tags read from its industrial protocols and published as its sensor rows.

A transport-level package (docs/architecture.md), beside the streaming runtime:

* :mod:`~fedrca.edge.tags`: :class:`TagUpdate` (one value of one tag, as a protocol client
  saw it), :class:`TagMap` (the process's tags from the site configuration's ``edge:``
  section) and the quality codes (the sensor contract's, :class:`fedrca.contracts.Quality`);
* :mod:`~fedrca.edge.rows`: :class:`RowAssembler`, the pure row assembler on the plant's
  sample clock (updates in, rows out; ``seq`` from the clock; staleness; no I/O);
* :mod:`~fedrca.edge.source`: the :class:`TagSource` protocol every protocol client
  implements, the :class:`TagSink` it reports to, and its counters;
* :mod:`~fedrca.edge.opcua`: the OPC UA client (asyncua);
* :mod:`~fedrca.edge.mqtt`: the MQTT clients (JSON per tag, Sparkplug B) on
  :mod:`~fedrca.edge.mqtt_client` (aiomqtt with a read path that hands PUBLISH packets over
  in bulk);
* :mod:`~fedrca.edge.publisher`: the Kafka side (bounded outage buffer, the last published
  ``seq`` read back at start);
* :mod:`~fedrca.edge.runtime`: the process: sources -> assembler -> publisher, metrics.
"""

from fedrca.edge.rows import Row, RowAssembler
from fedrca.edge.source import SourceCounters, TagSink, TagSource
from fedrca.edge.tags import Quality, Tag, TagMap, TagUpdate

__all__ = [
    "Quality",
    "Row",
    "RowAssembler",
    "SourceCounters",
    "Tag",
    "TagMap",
    "TagSink",
    "TagSource",
    "TagUpdate",
]
