"""Checks that nominal (training) data can carry a detector, run where a plant's detector is fitted.

Thresholds come from nominal data only, so degenerate nominal data would silently
give a detector that alarms always or never. :func:`check_nominal` refuses, with
one line naming the file, the plant, the columns and the fix:

* fewer than :data:`~fedrca.config.MIN_NOMINAL_SAMPLES` rows (the same
  minimum ``fedrca train`` applies);
* cross-validation folds that leave a fold fewer rows than that minimum;
* values that are not finite, or so large (beyond :data:`MAX_ABS_VALUE`) that their
  squares overflow the covariance;
* constant columns (a sensor that never moves cannot be modelled; its standardized
  residual is undefined);
* with missing values allowed (``dataset.missing: allow``, docs/missing.md): a column
  missing in more than :data:`MAX_MISSING_SHARE` of the rows (one line naming it), and
  fewer than :data:`~fedrca.config.MIN_NOMINAL_SAMPLES` rows with every column present
  (the statistics' moments are estimated on those: complete-case).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from numpy.typing import NDArray

from fedrca.config.formats import MIN_NOMINAL_SAMPLES
from fedrca.datasets.table import cell
from fedrca.exceptions import DataError

__all__ = ["MAX_ABS_VALUE", "MAX_MISSING_SHARE", "MIN_NOMINAL_SAMPLES", "check_nominal"]

#: Largest magnitude accepted in nominal data: squares and their sums stay far from float64 overflow
#: (the sensors topic's bound too: fedrca.contracts.messages.MAX_ABS_VALUE, tests/contracts/test_messages.py).
MAX_ABS_VALUE = 1e150
#: Largest share of a nominal column that may be missing (a column missing more is mostly not measured).
MAX_MISSING_SHARE = 0.5


def _names(columns: Sequence[str], limit: int = 12) -> str:
    shown = ", ".join(cell(c) for c in columns[:limit])
    return shown + (f" and {len(columns) - limit} more" if len(columns) > limit else "")


def check_nominal(
    values: NDArray[np.float64],
    columns: Sequence[str],
    *,
    plant: str,
    source: str,
    folds: int | None = None,
    where: str = "sensors",
    missing: bool = False,
) -> None:
    """Raise :class:`DataError` unless ``values`` (T, D) can be a plant's nominal data.

    Parameters
    ----------
    values : the plant's nominal sensors (or inputs), one column per name in ``columns``
    plant : the plant's name, for the message
    source : the file (or description) the data came from
    folds : cross-validation folds of the plant's scoring (None: no cross-validation)
    where : ``sensors`` or ``inputs``, for the fix
    missing : NaN entries are missing values (``dataset.missing: allow``), checked as the module says

    Examples
    --------
    >>> import numpy as np
    >>> Y = np.random.default_rng(0).normal(size=(40, 2))
    >>> check_nominal(Y, ["a", "b"], plant="p", source="x.csv", folds=2)
    >>> Y[:, 1] = 3.0
    >>> try:
    ...     check_nominal(Y, ["a", "b"], plant="p", source="x.csv")
    ... except DataError as exc:
    ...     print(str(exc)[:69])
    x.csv: plant 'p': sensor column(s) b never change in the nominal data
    """
    Y = np.asarray(values, dtype=np.float64)
    T = len(Y)
    if T < MIN_NOMINAL_SAMPLES:
        raise DataError(
            f"{source}: plant '{plant}': {T} nominal samples, a detector needs at least {MIN_NOMINAL_SAMPLES}; "
            "give more nominal data"
        )
    if folds is not None and T // folds < MIN_NOMINAL_SAMPLES:
        best = T // MIN_NOMINAL_SAMPLES
        fix = f"set scoring.folds to at most {best}" if best >= 2 else "set scoring.calibration: in-sample"
        raise DataError(
            f"{source}: plant '{plant}': scoring.folds {folds} leaves {T // folds} nominal samples per fold, fewer "
            f"than {MIN_NOMINAL_SAMPLES}; {fix}, or give more nominal data"
        )
    if Y.ndim != 2 or Y.shape[1] == 0:
        return
    finite = np.isfinite(Y) | (missing & np.isnan(Y))
    if not finite.all():
        row, col = np.argwhere(~finite)[0]
        where_bad = f"row {row}, column {cell(columns[int(col)])}"
        raise DataError(f"{source}: plant '{plant}': non-finite value at {where_bad}; clean the file")
    if missing and np.isnan(Y).any():
        _check_gaps(Y, columns, plant, source, where)
        Y = np.where(np.isnan(Y), np.nanmean(Y, axis=0), Y)  # the remaining checks on the observed values
    huge = np.abs(Y).max(axis=0) > MAX_ABS_VALUE
    if huge.any():
        bad = [columns[int(j)] for j in np.flatnonzero(huge)]
        raise DataError(
            f"{source}: plant '{plant}': column(s) {_names(bad)} hold values beyond +-{MAX_ABS_VALUE:g}, which "
            "overflow the detector's statistics; rescale them (other units) or leave them out of the plant"
        )
    mean = Y.mean(axis=0)
    std = Y.std(axis=0)
    constant = (std == 0) | (std <= 1e-12 * np.abs(mean))
    if constant.any():
        bad = [columns[int(j)] for j in np.flatnonzero(constant)]
        fix = "its sensors list, or match.exclude" if where == "sensors" else "its inputs list"
        raise DataError(
            f"{source}: plant '{plant}': {where[:-1]} column(s) {_names(bad)} never change in the nominal data (a "
            f"detector cannot model a constant {where[:-1]}); leave them out of the plant ({fix})"
        )


def _check_gaps(Y: NDArray[np.float64], columns: Sequence[str], plant: str, source: str, where: str) -> None:
    """A column mostly missing, or too few complete rows to estimate the statistics' moments on."""
    share = np.isnan(Y).mean(axis=0)
    worst = int(np.argmax(share))
    fix = "its sensors list, or match.exclude" if where == "sensors" else "its inputs list"
    if share[worst] > MAX_MISSING_SHARE:
        raise DataError(
            f"{source}: plant '{plant}': column {cell(columns[worst])} is missing in {share[worst]:.0%} of the nominal "
            f"rows (at most {MAX_MISSING_SHARE:.0%}); leave it out of the plant ({fix}) or give nominal data where "
            "it is recorded"
        )
    complete = int((~np.isnan(Y).any(axis=1)).sum())
    if complete < MIN_NOMINAL_SAMPLES:
        raise DataError(
            f"{source}: plant '{plant}': {complete} nominal rows have every {where[:-1]} present, the statistics need "
            f"at least {MIN_NOMINAL_SAMPLES}; column {cell(columns[worst])} has the most gaps ({share[worst]:.0%}): "
            f"leave it out of the plant ({fix}) or give more nominal data"
        )
