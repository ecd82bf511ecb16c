"""Data: every file parser, the one loader every command uses, and the papers' synthetic generators.

* :mod:`~fedrca.datasets.loader`: a data file in the site's configured format, split into plants
  (:func:`~fedrca.datasets.loader.load_frame`, :func:`~fedrca.datasets.loader.plant_frames`);
* :mod:`~fedrca.datasets.tep`: the Tennessee Eastman files and what is known of them (columns,
  fault onsets and roots, the flowsheet);
* :mod:`~fedrca.datasets.synthetic`: the generators of the papers (linear and nonlinear state
  space, with the true systems for oracles).

Imports only the configuration and the exceptions.
"""

from fedrca.datasets.synthetic import (
    AnomalyEvent,
    SyntheticData,
    chain_graph,
    linear_multiplant,
    nonlinear_network,
    nonlinear_two_plant,
    schedule_events,
)
from fedrca.datasets.tep import TEP_COLUMNS, TEP_FAULT_ONSET, TEP_FAULT_ROOTS, TEP_SAMPLE_SECONDS, load_tep

__all__ = [
    "TEP_COLUMNS",
    "TEP_FAULT_ONSET",
    "TEP_FAULT_ROOTS",
    "TEP_SAMPLE_SECONDS",
    "AnomalyEvent",
    "SyntheticData",
    "chain_graph",
    "linear_multiplant",
    "load_tep",
    "nonlinear_network",
    "nonlinear_two_plant",
    "schedule_events",
]
