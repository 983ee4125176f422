"""Pytest settings for the multi-process tests."""

# A child process the tests start; importing it would do nothing useful.
collect_ignore = ["workers.py", "spawn.py"]
