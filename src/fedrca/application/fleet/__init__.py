"""The fleet application (``fedrca fleet``): configuration, data sources, runner, model files, Kafka driver.

The learning itself lives in the pure cores :mod:`fedrca.fleet.collabdict`,
:mod:`fedrca.fleet.consensus` and :mod:`fedrca.fleet.model`; the command is
:mod:`fedrca.cli.fleet`. See docs/fleet.md.
"""
