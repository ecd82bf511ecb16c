"""Column layouts fixed by a dataset format (what a configuration may name without a data file)."""

from __future__ import annotations

__all__ = ["KNOWN_COLUMNS", "TEP_COLUMNS"]

#: Tennessee Eastman columns in file order: 41 measurements then 11 manipulated variables.
TEP_COLUMNS: tuple[str, ...] = tuple([f"XMEAS({i})" for i in range(1, 42)] + [f"XMV({i})" for i in range(1, 12)])

#: Formats whose columns are fixed, and their columns.
KNOWN_COLUMNS: dict[str, tuple[str, ...]] = {"tep": TEP_COLUMNS}
