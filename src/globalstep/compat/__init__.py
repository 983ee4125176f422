"""Compatibility layers: the peers' own names, arguments and defaults."""
