"""Reference PC (causal-learn) for FedPC's comparisons: pooled data, each site alone.

causal-learn is a test / benchmark dependency (the ``dev`` extra), never needed
by fedrca itself: it is imported when a function here is called, and its absence
is a clear :class:`fedrca.exceptions.ModelError`.
"""

from __future__ import annotations

import contextlib
import io
from typing import Literal

import numpy as np
from numpy.typing import ArrayLike, NDArray

from fedrca.exceptions import ModelError

__all__ = ["causallearn_pc", "pdag_from_causallearn"]

BoolArray = NDArray[np.bool_]


def pdag_from_causallearn(graph: ArrayLike) -> BoolArray:
    """fedrca's PDAG matrix from causal-learn's endpoint matrix.

    causal-learn: ``g[j, i] = 1, g[i, j] = -1`` is i -> j; ``-1, -1`` is i - j
    (``1, 1``, a bidirected edge, is read as undirected).
    """
    g = np.asarray(graph)
    tail = g == -1
    head = g == 1
    # i -> j: tail at i (g[i, j] = -1), head at j (g[j, i] = 1)
    directed = tail & head.T
    undirected = (tail & tail.T) | (head & head.T)
    return np.asarray(directed | undirected, dtype=bool)


def causallearn_pc(
    data: ArrayLike, alpha: float = 0.01, test: Literal["fisher-z", "g-square"] = "fisher-z"
) -> BoolArray:
    """causal-learn's PC (stable skeleton, its default collider rule) on one data set, as a fedrca PDAG (p, p)."""
    try:
        from causallearn.search.ConstraintBased.PC import pc
    except ModuleNotFoundError as exc:
        raise ModelError(
            f"the reference PC needs causal-learn ({exc}); install the dev extra: pip install -e '.[dev]'"
        ) from None
    indep = {"fisher-z": "fisherz", "g-square": "gsq"}[test]
    with contextlib.redirect_stdout(io.StringIO()):
        cg = pc(np.asarray(data), alpha, indep, stable=True, show_progress=False)
    return pdag_from_causallearn(cg.G.graph)
