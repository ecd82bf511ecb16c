"""Data sets: synthetic generators from the papers and the TEP benchmark loader."""

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
