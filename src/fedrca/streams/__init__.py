"""The live system on Apache Kafka: the Faust application of a site and the runtimes its workers run.

* :mod:`~fedrca.streams.app` (the Faust app and its settings), :mod:`~fedrca.streams.topics`
  (topic declarations), :mod:`~fedrca.streams.agents` (thin agents: decode, call a runtime, emit);
* :mod:`~fedrca.streams.runtime`: :class:`~fedrca.streams.runtime.PlantRuntime` (the plant
  processors, parameter hot-reload) and :class:`~fedrca.streams.runtime.RCARuntime` (alignment
  and the RCA engine), both over the pure cores; the embedded runner
  (:mod:`~fedrca.streams.embedded`) runs both in one process without a broker;
* :mod:`~fedrca.streams.delivery`: the offset continuity that makes processing exactly-once;
* :mod:`~fedrca.streams.compat`: every override of a private Faust / aiokafka part, with
  version guards.

Imports the cores, the contracts, the transports and the exporter; nothing imports it but
the shell (:mod:`fedrca.cli`).
"""
