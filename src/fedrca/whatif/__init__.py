"""What-if queries on the learned global model (P3); see docs/whatif.md."""

from fedrca.whatif.query import *  # noqa: F403
