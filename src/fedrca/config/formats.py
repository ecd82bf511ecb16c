"""Facts of the data formats a configuration relies on: fixed column layouts and the nominal-data minimum."""

from __future__ import annotations

__all__ = ["KNOWN_COLUMNS", "MIN_NOMINAL_SAMPLES", "TEP_COLUMNS"]

#: Tennessee Eastman columns in file order: 41 measurements then 11 manipulated variables.
TEP_COLUMNS: tuple[str, ...] = tuple([f"XMEAS({i})" for i in range(1, 42)] + [f"XMV({i})" for i in range(1, 12)])

#: Formats whose columns are fixed, and their columns.
KNOWN_COLUMNS: dict[str, tuple[str, ...]] = {"tep": TEP_COLUMNS}

#: Fewest nominal samples a plant is fitted on, one minimum for ``detect``/``replay``/``evaluate`` and ``train``:
#: the federated client drops ``training.warm_up`` (10) samples of filter transient and needs 8 more
#: (fedrca.training.client.prepare_client_data); thresholds from fewer samples are noise.
MIN_NOMINAL_SAMPLES = 18
