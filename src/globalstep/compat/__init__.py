"""Compatibility layers: the peers' names, argument names and defaults, exactly."""
