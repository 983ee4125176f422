"""The package version, read by hatchling and by ``globalstep --version``."""

__version__ = "0.1.0"
