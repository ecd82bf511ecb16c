"""Causal-structure learning across sites that cannot pool their data (FedPC, P4; pure core).

The sites run conditional-independence tests on their own samples and send only
skeletons, variable-id sets and p-values; the server merges them into a CPDAG and
its DAG extension (:mod:`fedrca.causal.fedpc`). The CI tests
(:mod:`fedrca.causal.citests`), the PDAG algebra (v-structures, Meek's rules,
DAG extension, SHD / F1: :mod:`fedrca.causal.pdag`) and causal-learn's PC as the
reference (:mod:`fedrca.causal.baselines`, a test/bench dependency) live here.
No file I/O: ``fedrca graph`` (:mod:`fedrca.application.graph`) reads the sites' files and
turns the variable-level result into the RCA engine's plant graph. The RCA engine
does not need this package.
"""

from fedrca.causal.citests import CITest, DSeparation, FisherZ, GSquare
from fedrca.causal.fedpc import FedPCResult, FedPCServer, FedPCSite, aggregate_to_groups, fedpc

__all__ = [
    "CITest",
    "DSeparation",
    "FedPCResult",
    "FedPCServer",
    "FedPCSite",
    "FisherZ",
    "GSquare",
    "aggregate_to_groups",
    "fedpc",
]
