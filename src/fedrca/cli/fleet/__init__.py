"""The fleet application shell: ``fedrca fleet`` (configuration, data sources, runner, model files).

The learning itself lives in the pure cores :mod:`fedrca.detectors.collabdict`,
:mod:`fedrca.detectors.consensus` and :mod:`fedrca.detectors.fleet`; the Kafka
transport in :mod:`fedrca.connectors.fleet_kafka`. See docs/fleet.md.
"""
