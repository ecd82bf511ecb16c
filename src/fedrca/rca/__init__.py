"""Root cause analysis over published flags: look-up table, multi-plant engine, graph, metrics (pure cores).

The RCA side sees only each plant's published (randomized-response) flag pair
``(Z_c, Z_a)`` per sample and the interdependency graph; never raw data or
states. Start with :func:`build_engine` (streaming engine for a site) or
:func:`fedrca.rca.table.lookup` (the two-plant table).
"""

from fedrca.rca.engine import RCAEngine, build_engine, engine_for, resolve_graph
from fedrca.rca.graph import InterdependencyGraph
from fedrca.rca.table import OUTCOMES, TableDecision, lookup

__all__ = [
    "OUTCOMES",
    "InterdependencyGraph",
    "RCAEngine",
    "TableDecision",
    "build_engine",
    "engine_for",
    "lookup",
    "resolve_graph",
]
