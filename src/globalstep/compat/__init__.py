"""Compatibility layers: the peers\x27 names, argument names and defaults."""
