"""Fixtures shared by the test packages.

The only conftest.py under tests/: test directories have no ``__init__.py``, so a second
one here would clash with this one as a module named ``conftest`` under
``--doctest-modules``. The repository root's conftest.py holds the collection rules for
tests/ and src/ alike (a module that needs a missing extra skips).
"""

import logging

import pytest

# Scripts the tests run in subprocesses, not test modules: importing them would train, or
# import torch for nothing.
collect_ignore = [
    "checkpoint/dist_worker.py",
    "compat_tf_loop.py",
    "distributed/sampler_workers.py",
    "distributed/spawn.py",
    "distributed/workers.py",
    "distributed/restart_workers.py",
    "distributed/torchrun_loop.py",
    "integrations/tf_resume_loop.py",
    "integrations/torch_resume_loop.py",
    "integrations/torch_standalone_loop.py",
    "integrations/keras_deferred_check.py",
    "integrations/tf_seed_program.py",
    "summary/wandb_loop.py",
]


@pytest.fixture
def ckpt_dir(tmp_path):
    """A fresh checkpoint directory."""
    return tmp_path / "ckpt"


@pytest.fixture(scope="session")
def s3_server():
    """A local S3-protocol server (moto's server mode) on 127.0.0.1, for the whole session.

    Skips where moto's server or s3fs is not installed (``pip install 'globalstep[dev]'``).
    """
    pytest.importorskip("moto.server", reason="moto[server] is not installed")
    pytest.importorskip("s3fs", reason="s3fs is not installed")
    from s3_server import S3Server

    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    server = S3Server()
    yield server
    server.stop()


@pytest.fixture
def s3_faults(s3_server):
    """The server's fault injector, cleared after the test."""
    yield s3_server.faults
    s3_server.faults.clear()
