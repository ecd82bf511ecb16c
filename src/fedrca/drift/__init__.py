"""Re-baselining on live data: drift absorbed, faults not (pure core, no I/O; docs/drift.md).

Plants drift: seasons, fouling, catalyst ageing, recalibrated instruments, new operating
points. Each plant keeps its own recent history (:mod:`fedrca.drift.history`) and, on a
schedule counted in samples, re-fits what its scores are measured against from the rows
that are far from any alarm (:mod:`fedrca.drift.guard`), moving the baseline a bounded
step (:mod:`fedrca.drift.baseline`); :class:`BaselineKeeper` (:mod:`fedrca.drift.keeper`)
is that loop around one plant's detector, with versioned baselines, pin and rollback.
The cross-plant part's refresh is a federated training round whose releases the plant's
whole-life ledger counts (``drift.federated``: ``fedrca train --previous``,
:func:`fedrca.training.federated.lifetime_of`).

The streaming runtime (:mod:`fedrca.streams`) drives a keeper per plant and persists its
history and baselines in the plant-private ``<site>.history.<plant>`` topic; ``fedrca
replay`` drives the same keepers in one process, so both refresh at the same rows.
"""

from fedrca.drift.baseline import (
    FamilyStep,
    MomentStep,
    limit_family,
    limit_moments,
    refit_family,
    refit_residual,
    transfer_memory,
)
from fedrca.drift.guard import alarm_limit, ongoing_alarm, usable_rows
from fedrca.drift.history import CHUNK_ROWS, RowHistory, history_bytes
from fedrca.drift.keeper import (
    OUTCOMES,
    Baseline,
    BaselineKeeper,
    KeeperSettings,
    RefreshReport,
    baseline_record_bytes,
)

__all__ = [
    "CHUNK_ROWS",
    "OUTCOMES",
    "Baseline",
    "BaselineKeeper",
    "FamilyStep",
    "KeeperSettings",
    "MomentStep",
    "RefreshReport",
    "RowHistory",
    "alarm_limit",
    "baseline_record_bytes",
    "history_bytes",
    "limit_family",
    "limit_moments",
    "ongoing_alarm",
    "refit_family",
    "refit_residual",
    "transfer_memory",
    "usable_rows",
]
