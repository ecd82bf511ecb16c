"""fedrca: federated, privacy-preserving root cause analysis for interdependent plants."""

from fedrca.exceptions import FedrcaError

__version__ = "0.1.0"
__all__ = ["FedrcaError", "__version__"]
