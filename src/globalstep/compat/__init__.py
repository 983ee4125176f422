"""Compatibility layers: the names, arguments and behaviour of other libraries."""
