"""fedrca.rca."""
