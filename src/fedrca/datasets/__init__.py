"""Data: every file parser (TEP, HAI, SWaT, generic CSV), the one loader, the papers' synthetic generators.

Every command reads its files through :func:`load_dataset` (one entry point, so
all commands accept the same files; :mod:`.loader` also splits a file into plants
and checks nominal data); each format has its module (:mod:`.tep`, :mod:`.hai`,
:mod:`.swat`, :mod:`.generic`) on top of a shared bounded text reader
(:mod:`.text`, :mod:`.table`, :mod:`.excel`). A bad file gives one
:class:`~fedrca.exceptions.DataError` line naming the file, the line or column
and the fix. Layouts: docs/datasets.md. :mod:`.synthetic` holds the generators of
the papers (linear and nonlinear state space, with the true systems for oracles).

Imports only the configuration and the exceptions.
"""

from fedrca.datasets.dataset import Dataset
from fedrca.datasets.generic import load_csv
from fedrca.datasets.hai import HAI_LABEL_COLUMNS, load_hai
from fedrca.datasets.loader import DatasetOptions, load_dataset
from fedrca.datasets.swat import load_swat, swat_stage
from fedrca.datasets.synthetic import (
    AnomalyEvent,
    SyntheticData,
    chain_graph,
    linear_multiplant,
    nonlinear_network,
    nonlinear_two_plant,
    schedule_events,
)
from fedrca.datasets.tep import (
    TEP_COLUMNS,
    TEP_FAULT_ONSET,
    TEP_FAULT_ROOTS,
    TEP_SAMPLE_SECONDS,
    load_tep,
    load_tep_dataset,
)

__all__ = [
    "HAI_LABEL_COLUMNS",
    "TEP_COLUMNS",
    "TEP_FAULT_ONSET",
    "TEP_FAULT_ROOTS",
    "TEP_SAMPLE_SECONDS",
    "AnomalyEvent",
    "Dataset",
    "DatasetOptions",
    "SyntheticData",
    "chain_graph",
    "linear_multiplant",
    "load_csv",
    "load_dataset",
    "load_hai",
    "load_swat",
    "load_tep",
    "load_tep_dataset",
    "nonlinear_network",
    "nonlinear_two_plant",
    "schedule_events",
    "swat_stage",
]
