"""fedrca.streams."""
