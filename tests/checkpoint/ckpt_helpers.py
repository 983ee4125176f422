"""Helpers shared by the checkpoint tests (a plain module, so its name is unique)."""

import json
import os
import pathlib

import numpy as np

from globalstep.checkpoint import checksum_of

SRC = str(pathlib.Path(__file__).resolve().parents[2] / "src")


def subprocess_env():
    """The environment for a child Python that must import this checkout's globalstep."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (SRC, env.get("PYTHONPATH")) if p)
    return env


def make_state(seed=0):
    """A small state tree with arrays of several dtypes and a few plain leaves."""
    rng = np.random.default_rng(seed)
    return {
        "model": {
            "w": rng.normal(size=(4, 3)).astype(np.float32),
            "b": rng.normal(size=3),
            "mask": rng.random(5) > 0.5,
        },
        "opt": [rng.integers(0, 100, size=6, dtype=np.int64), (np.float32(seed), "adam")],
        "lr": 0.1 * seed,
        "note": None,
    }


def assert_tree_equal(a, b):
    """Asserts two state trees hold equal leaves, array dtypes included."""
    assert type(a) is type(b), (type(a), type(b))
    if isinstance(a, dict):
        assert list(a) == list(b)
        for key in a:
            assert_tree_equal(a[key], b[key])
    elif isinstance(a, list | tuple):
        assert len(a) == len(b)
        for x, y in zip(a, b, strict=True):
            assert_tree_equal(x, y)
    elif isinstance(a, np.ndarray | np.generic):
        assert a.dtype == b.dtype
        assert np.shape(a) == np.shape(b)
        np.testing.assert_array_equal(a, b)
    else:
        assert a == b


def state_for_step(step):
    """A deterministic state for a step, a few hundred KiB to a few MiB in size."""
    rng = np.random.default_rng(step)
    size = int(rng.integers(1 << 15, 1 << 19))
    return {
        "step": step,
        "w": rng.random(size, dtype=np.float32),
        "layers": [rng.integers(0, 9, size=(size // 64, 8), dtype=np.int64), float(step)],
    }


def reseal(checkpoint, *, arrays=None, state=None):
    """Replaces files of a checkpoint and rewrites the checksums that cover them."""
    doc = json.loads((checkpoint / "state.json").read_bytes())
    if arrays is not None:
        (checkpoint / "arrays.safetensors").write_bytes(arrays)
        doc["files"]["arrays.safetensors"] = {"size": len(arrays), "xxh3_64": checksum_of(arrays)}
    data = json.dumps(doc).encode() if state is None else state
    (checkpoint / "state.json").write_bytes(data)
    marker = json.dumps(
        {"format": 1, "state.json": {"size": len(data), "xxh3_64": checksum_of(data)}}
    ).encode()
    (checkpoint / "COMMITTED").write_bytes(marker + f"\nxxh3_64 {checksum_of(marker)}\n".encode())
