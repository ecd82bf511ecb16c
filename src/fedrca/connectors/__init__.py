"""Transports: how data and messages move in and out of fedrca (no detection or RCA logic here).

* :mod:`~fedrca.connectors.kafka`: topic creation, the replay sink with back-pressure, topic readers
  (kafka-python);
* :mod:`~fedrca.connectors.replay`: a recorded file replayed as live sensor messages into a sink,
  paced in real time, x N or as fast as possible.

Imports the contracts, the configuration and the data parsers (:mod:`fedrca.datasets`).
"""
