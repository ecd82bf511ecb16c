"""fedrca.connectors."""
