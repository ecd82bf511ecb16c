"""fedrca.training."""
