"""The fleet application shell: ``fedrca fleet`` (configuration, data sources, runner, model files).

The learning itself lives in the pure cores :mod:`fedrca.fleet.collabdict`,
:mod:`fedrca.fleet.consensus` and :mod:`fedrca.fleet.model`; the Kafka
transport in :mod:`fedrca.connectors.fleet_kafka`. See docs/fleet.md.
"""
