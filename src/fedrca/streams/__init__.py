"""The live system on Apache Kafka: the worker a site runs and the runtimes inside it.

* :mod:`~fedrca.streams.app`: the Faust app that hosts a worker (lifecycle, signals, probes)
  and its settings; :mod:`~fedrca.streams.agents`: thin agents (decode, call a runtime, emit)
  and the parameter follower;
* :mod:`~fedrca.streams.loop`: the exactly-once consume-process-produce loop: a batch's
  outputs, the state record and the input offset in one Kafka transaction per partition;
* :mod:`~fedrca.streams.runtime`: :class:`~fedrca.streams.runtime.PlantRuntime` (the plant
  processors of :mod:`~fedrca.streams.processor`, parameter hot-reload) and
  :class:`~fedrca.streams.runtime.RCARuntime` (:mod:`~fedrca.streams.aligner` and
  :mod:`~fedrca.streams.rca_stage` over the RCA engine), both over the pure cores; the embedded
  runner (:mod:`~fedrca.streams.embedded`) runs both in one process without a broker;
* :mod:`~fedrca.streams.compat`: every override of a private Faust / aiokafka part, with
  version guards.

Imports the cores, the contracts, the transports, the exporter and :mod:`fedrca.privacy`
(never :mod:`fedrca.training`); the application (:mod:`fedrca.application`) and the shell
import it.
"""
