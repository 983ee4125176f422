"""Pytest settings for the integration tests."""

# A training script the exact-resume test runs in subprocesses; importing it would train.
collect_ignore = ["torch_resume_loop.py"]
