"""Tests for globalstep.checkpoint.format: the file format, the commit protocol, and faults."""

import contextlib
import errno
import itertools
import json
import math
import os
import pathlib
import random
import re
import struct
import subprocess
import sys
import threading
import time

import numpy as np
import pytest
from ckpt_helpers import assert_tree_equal, make_state, reseal, state_for_step, subprocess_env
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from safetensors import safe_open
from safetensors.numpy import load_file

import globalstep.storage as storage_module
import globalstep.storage._local as local_storage
from globalstep import (
    CheckpointError,
    CheckpointExistsError,
    CorruptCheckpointError,
    GlobalStepError,
)
from globalstep.checkpoint import CheckpointManager, checksum_of
from globalstep.checkpoint import commit_checkpoint as commit
from globalstep.checkpoint._files import arrays as arrays_module
from globalstep.checkpoint._files import commit as commit_protocol
from globalstep.checkpoint._files import fastio
from globalstep.checkpoint._files.arrays import read_arrays
from globalstep.checkpoint._files.commit import committed_names
from globalstep.checkpoint._files.document import ARRAYS_FILE, load_state

HERE = pathlib.Path(__file__).parent
STEP1 = "step-000000000001"


def saved(directory, state=None, step=1):
    """Saves one checkpoint and returns its directory."""
    with CheckpointManager(directory) as manager:
        manager.save(step, make_state(step) if state is None else state)
    return directory / f"step-{step:012d}"


def restore_all_ways(directory):
    """Restores the newest checkpoint plainly, lazily and against a template."""
    with CheckpointManager(directory, read_only=True) as manager:
        manager.restore()
        manager.restore(make_state(1), partial=True)
        with manager.open() as reader:
            for key in reader:
                reader[key]


# ------------------------------------------------------------------ the format itself


def test_safetensors_package_reads_our_file(tmp_path):
    """safetensors' load_file and safe_open read exactly the arrays we wrote."""
    state = {"a": np.arange(12, dtype=np.float32).reshape(3, 4)[:, ::2], "b": np.int64(5)}
    state["c"] = np.zeros((0, 2), np.float16)
    state["d"] = np.arange(5, dtype=">i4")
    path = saved(tmp_path, state) / "arrays.safetensors"
    loaded = load_file(str(path))
    np.testing.assert_array_equal(loaded["a"], state["a"])
    np.testing.assert_array_equal(loaded["d"], state["d"])
    assert loaded["b"].shape == ()
    assert loaded["c"].shape == (0, 2)
    with safe_open(str(path), framework="numpy") as f:
        assert f.metadata() == {"format": "globalstep", "version": "1"}
        np.testing.assert_array_equal(f.get_tensor("a"), state["a"])


def test_torch_reads_bfloat16_from_our_file(tmp_path):
    """safetensors' torch reader sees our bfloat16 arrays as torch.bfloat16."""
    torch = pytest.importorskip("torch")
    import ml_dtypes

    path = saved(tmp_path, {"h": np.arange(4).astype(ml_dtypes.bfloat16)}) / "arrays.safetensors"
    with safe_open(str(path), framework="pt") as f:
        tensor = f.get_tensor("h")
    assert tensor.dtype == torch.bfloat16
    assert tensor.tolist() == [0, 1, 2, 3]


def test_header_is_eight_byte_aligned(tmp_path):
    """The data section starts at a multiple of 8 bytes, as safetensors writes it."""
    data = (saved(tmp_path) / "arrays.safetensors").read_bytes()
    (length,) = struct.unpack("<Q", data[:8])
    assert (8 + length) % 8 == 0


def test_header_is_what_json_dumps_writes():
    """The header, joined from one piece per array, is byte for byte the compact
    json.dumps of the header dict (as earlier versions wrote it): odd keys, raw-byte
    dtypes, 0-d and empty arrays, ordered by alignment and then name."""
    arrays = {
        'q"u\\ot\u00e9/\u4e2d': np.zeros((2, 3), ">i4"),
        "a": np.zeros(3, np.float64),
        "z": np.zeros((), np.int8),
        "rec": np.zeros(2, [("x", "<f4"), ("y", "<i2")]),
        "e": np.zeros((0, 4), np.float16),
        "c": np.zeros(2, np.complex128),
    }
    order = sorted(arrays, key=lambda k: (-arrays[k].dtype.alignment, k))
    header = {"__metadata__": {"format": "globalstep", "version": "1"}}
    offset = 0
    for key in order:
        code, raw, _ = arrays_module._dtype_info(arrays[key].dtype)
        nbytes = arrays[key].nbytes
        shape = [nbytes] if raw else list(arrays[key].shape)
        header[key] = {"dtype": code, "shape": shape, "data_offsets": [offset, offset + nbytes]}
        offset += nbytes
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    assert arrays_module._header(arrays) == (struct.pack("<Q", len(text)) + text, order)


def test_state_json_holds_format_clocks_metrics_and_checksums(tmp_path):
    """state.json records the format, step, time, metrics, tree and file checksums."""
    with CheckpointManager(tmp_path) as manager:
        manager.save(4, {"w": np.ones(2)}, metrics={"loss": 0.25})
    doc = json.loads((tmp_path / "step-000000000004" / "state.json").read_text())
    assert doc["format"] == 1
    assert doc["step"] == 4
    assert doc["metrics"] == {"loss": 0.25}
    assert doc["tree"]["dict"]["w"]["array"] == "w"
    assert doc["created_unix"] > 0
    size = (tmp_path / "step-000000000004" / "arrays.safetensors").stat().st_size
    assert doc["files"]["arrays.safetensors"]["size"] == size


def test_non_contiguous_arrays_are_written_in_chunks(tmp_path, monkeypatch):
    """Arrays larger than a chunk stream in several writes and read back whole."""
    monkeypatch.setattr(fastio, "CHUNK_BYTES", 40)
    state = {"t": np.arange(300, dtype=np.float64).reshape(30, 10).T, "c": np.arange(100.0)}
    with CheckpointManager(tmp_path) as manager:
        manager.save(1, state)
        assert_tree_equal(manager.restore(), state)


def test_a_non_contiguous_row_larger_than_a_chunk_is_converted_in_parts(monkeypatch):
    """Converting a non-contiguous array never makes a copy larger than one chunk."""
    monkeypatch.setattr(fastio, "CHUNK_BYTES", 40)
    array = np.arange(300, dtype=np.float64).reshape(30, 10).T
    chunks = [bytes(c) for c in arrays_module._chunks(array)]
    assert max(len(c) for c in chunks) <= 40
    assert b"".join(chunks) == array.tobytes()


# ------------------------------------------------------------------ corruption


@pytest.mark.parametrize("name", ["arrays.safetensors", "state.json", "COMMITTED"])
@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(where=st.floats(0, 1, exclude_max=True), bit=st.integers(0, 7))
def test_flipped_byte_is_detected_and_named(tmp_path_factory, name, where, bit):
    """Flipping any bit of any file is detected, and the error names that file."""
    checkpoint = saved(tmp_path_factory.mktemp("flip"))
    path = checkpoint / name
    data = bytearray(path.read_bytes())
    data[int(where * len(data))] ^= 1 << bit
    path.write_bytes(bytes(data))
    with CheckpointManager(checkpoint.parent, read_only=True) as manager:
        with pytest.raises(CorruptCheckpointError, match=name.replace(".", r"\.")) as info:
            manager.restore()
        assert str(info.value.path).endswith(name)
        with pytest.raises(CorruptCheckpointError, match=name.replace(".", r"\.")):
            manager.verify()


@pytest.mark.parametrize("name", ["arrays.safetensors", "state.json", "COMMITTED"])
def test_truncated_file_is_detected(tmp_path, name):
    """A truncated file is corruption named by its file."""
    path = saved(tmp_path) / name
    path.write_bytes(path.read_bytes()[:-9])
    with (
        CheckpointManager(tmp_path, read_only=True) as manager,
        pytest.raises(CorruptCheckpointError, match=name.replace(".", r"\.")),
    ):
        manager.restore()


@pytest.mark.parametrize("name", ["arrays.safetensors", "state.json"])
def test_missing_file_is_detected(tmp_path, name):
    """A committed checkpoint that lost a file is corruption, not absence."""
    (saved(tmp_path) / name).unlink()
    with (
        CheckpointManager(tmp_path, read_only=True) as manager,
        pytest.raises(CorruptCheckpointError, match=rf"{name.replace('.', '[.]')} is missing"),
    ):
        manager.restore()


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda children: (
        st.lists(children, max_size=4)
        | st.dictionaries(
            st.sampled_from(
                [
                    "format",
                    "tree",
                    "files",
                    "dict",
                    "list",
                    "tuple",
                    "array",
                    "dtype",
                    "shape",
                    "value",
                    "float",
                    "stateful",
                    "numpy_scalar",
                    "arrays.safetensors",
                    "size",
                    "xxh3_64",
                    "ml_dtypes",
                    "step",
                    "metrics",
                    "a",
                    "b",
                ]
            ),
            children,
            max_size=5,
        )
    ),
    max_leaves=30,
)


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(document=json_values, keep_files=st.booleans())
def test_fuzzed_state_json_raises_only_globalstep_errors(tmp_path_factory, document, keep_files):
    """Any JSON in state.json, with valid checksums, fails only with GlobalStepError."""
    checkpoint = saved(tmp_path_factory.mktemp("fuzz"))
    if keep_files and isinstance(document, dict):
        original = json.loads((checkpoint / "state.json").read_bytes())
        document = {**original, **document, "files": original["files"]}
    reseal(checkpoint, state=json.dumps(document).encode())
    with contextlib.suppress(GlobalStepError):
        restore_all_ways(checkpoint.parent)


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    header=st.dictionaries(
        st.sampled_from(["model/w", "model/b", "opt/0", "x", "__metadata__"]),
        st.fixed_dictionaries(
            {
                "dtype": st.sampled_from(["F32", "F64", "I64", "BOOL", "U8", "XX", 3]),
                "shape": st.lists(st.integers(-2, 6), max_size=3) | st.text(max_size=2),
                "data_offsets": st.lists(st.integers(-4, 200), min_size=0, max_size=3),
            }
        )
        | json_values,
        max_size=5,
    ),
    padding=st.binary(max_size=64),
    raw_length=st.none() | st.integers(0, 2**64 - 1),
)
def test_fuzzed_safetensors_header_raises_only_globalstep_errors(
    tmp_path_factory, header, padding, raw_length
):
    """Any safetensors header, with valid checksums, fails only with GlobalStepError."""
    checkpoint = saved(tmp_path_factory.mktemp("fuzz"))
    text = json.dumps(header).encode()
    length = len(text) if raw_length is None else raw_length
    reseal(checkpoint, arrays=struct.pack("<Q", length) + text + padding)
    with contextlib.suppress(GlobalStepError):
        restore_all_ways(checkpoint.parent)


# ------------------------------------------------------------------ injected I/O errors


class FailingOs:
    """The os module, with one function replaced by one that raises ENOSPC."""

    def __init__(self, name):
        self._name = name

    def __getattr__(self, attribute):
        if attribute == self._name:

            def fail(*args, **kwargs):
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

            return fail
        return getattr(os, attribute)


@pytest.mark.parametrize("function", ["write", "fsync", "rename"])
def test_injected_enospc_keeps_earlier_checkpoints(tmp_path, monkeypatch, function):
    """ENOSPC from write, fsync or rename raises a clear error and changes nothing visible."""
    with CheckpointManager(tmp_path, max_to_keep=2) as manager:
        manager.save(1, make_state(1))
        manager.save(2, make_state(2))
        monkeypatch.setattr(local_storage, "os", FailingOs(function))
        with pytest.raises(CheckpointError, match=r"saving step-000000000003 failed .*No space"):
            manager.save(3, make_state(3))
        monkeypatch.undo()
        assert manager.steps() == [1, 2]
        assert_tree_equal(manager.restore(step=1), make_state(1))
        assert_tree_equal(manager.restore(), make_state(2))
        manager.verify(1)
    assert not [n for n in os.listdir(tmp_path) if n.startswith(".tmp-")]


def test_injected_enospc_on_force_keeps_the_old_checkpoint(tmp_path, monkeypatch):
    """A failed forced replacement leaves the replaced checkpoint as it was."""
    with CheckpointManager(tmp_path) as manager:
        manager.save(1, make_state(1))
        monkeypatch.setattr(local_storage, "os", FailingOs("write"))
        with pytest.raises(CheckpointError, match="No space"):
            manager.save(1, make_state(2), force=True)
        monkeypatch.undo()
        assert_tree_equal(manager.restore(), make_state(1))


def test_real_efbig_from_rlimit_fsize(tmp_path):
    """A real EFBIG (RLIMIT_FSIZE) fails the save clearly and keeps earlier checkpoints."""
    code = f"""
import resource, signal, numpy as np
from globalstep import CheckpointError
from globalstep.checkpoint import CheckpointManager, fastio
from globalstep.checkpoint import arrays as arrays_module
from globalstep.checkpoint._files import commit as commit_protocol
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
with CheckpointManager({str(tmp_path)!r}) as manager:
    manager.save(1, {{"w": np.ones(1000)}})
    resource.setrlimit(resource.RLIMIT_FSIZE, (1 << 20, 1 << 20))
    try:
        manager.save(2, {{"w": np.ones(1 << 19)}})
    except CheckpointError as err:
        print("error:", err)
    print("steps:", manager.steps(), manager.restore()["w"].sum())
"""
    out = subprocess.run(
        [sys.executable, "-c", code],
        env=subprocess_env(),
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert "error: saving step-000000000002 failed" in out
    assert "File too large" in out
    assert "steps: [1] 1000.0" in out
    assert not [n for n in os.listdir(tmp_path) if n.startswith(".tmp-")]


# ------------------------------------------------------------------ SIGKILL at random moments


@pytest.mark.slow
def test_sigkill_at_random_moments_never_breaks_the_newest(tmp_path):
    """After each of >= 50 SIGKILLs mid-loop, the newest checkpoint restores exactly."""
    kills = int(os.environ.get("GLOBALSTEP_SIGKILLS", "50"))
    rng = random.Random(20261129)
    directory = tmp_path / "run"
    script = str(HERE / "save_loop.py")
    newest_seen = mid_save = 0
    for _ in range(kills):
        child = subprocess.Popen(
            [sys.executable, script, str(directory)], stdout=subprocess.PIPE, env=subprocess_env()
        )
        assert child.stdout.readline() == b"ready\n"
        time.sleep(rng.uniform(0.0, 0.2))
        child.kill()
        child.wait()
        child.stdout.close()
        with CheckpointManager(directory, read_only=True) as manager:
            steps = manager.steps()
            if steps:
                assert_tree_equal(manager.restore(), state_for_step(steps[-1]))
                newest_seen = steps[-1]
        names = os.listdir(directory)
        mid_save += any(n.startswith((".tmp-", ".trash-")) for n in names)
        visible = [n for n in names if n.startswith("step-")]
        assert all((directory / n / "COMMITTED").exists() for n in visible)
    assert newest_seen >= kills // 2
    # The kills did land inside saves and deletions, not only between them.
    assert mid_save >= kills // 5, mid_save


def test_arrays_over_4_gib_get_64_bit_offsets_and_bounded_chunks():
    """A 5 GiB array (a zero-stride view, never materialised) streams in bounded chunks."""
    huge = np.broadcast_to(np.zeros(1, np.uint8), (5 << 30,))
    small = np.ones(3, np.float64)
    prefix, order = arrays_module._header({"huge": huge, "small": small})
    header = json.loads(prefix[8:])
    assert order == ["small", "huge"]
    assert header["huge"]["data_offsets"] == [24, 24 + (5 << 30)]
    chunks = arrays_module._chunks(huge)
    first, second = next(chunks), next(chunks)
    assert len(first) <= fastio.CHUNK_BYTES
    assert len(second) <= fastio.CHUNK_BYTES
    assert arrays_module.parse_header(prefix[8:], 24 + (5 << 30), "x")[1][3] == 24 + (5 << 30)


# ------------------------------------------------------------------ each corruption, named


def restore_error(checkpoint):
    """Restores the checkpoint's directory and returns the CorruptCheckpointError raised."""
    with (
        CheckpointManager(checkpoint.parent, read_only=True) as manager,
        pytest.raises(CorruptCheckpointError) as info,
    ):
        manager.restore()
    return str(info.value)


def edited_state(checkpoint, edit):
    """state.json after ``edit(document)``, as bytes."""
    doc = json.loads((checkpoint / "state.json").read_bytes())
    edit(doc)
    return json.dumps(doc).encode()


@pytest.mark.parametrize(
    ("edit", "match"),
    [
        (lambda doc: doc.pop("tree"), "lacks the state tree"),
        (lambda doc: doc["files"].pop("arrays.safetensors"), "lacks the checksum of arrays"),
        (lambda doc: doc.update(files=[]), "lacks the checksum of arrays"),
        (lambda doc: doc.update(format=2), "is not a globalstep checkpoint file of format 1"),
    ],
)
def test_sealed_but_incomplete_state_json_is_named(tmp_path, edit, match):
    """A state.json with valid checksums that lacks a required part is named as corrupt."""
    checkpoint = saved(tmp_path)
    reseal(checkpoint, state=edited_state(checkpoint, edit))
    assert re.search(match, restore_error(checkpoint))
    assert "state.json" in restore_error(checkpoint)


def test_sealed_state_json_that_is_not_json_is_named(tmp_path):
    """Garbage with valid checksums in state.json is 'not valid JSON', naming the file."""
    checkpoint = saved(tmp_path)
    reseal(checkpoint, state=b"{not json")
    assert re.search(r"state\.json is not valid JSON", restore_error(checkpoint))


def test_marker_without_state_checksum_is_named(tmp_path):
    """A sealed marker that lacks the checksum of state.json is corrupt, naming the marker."""
    checkpoint = saved(tmp_path)
    marker = json.dumps({"format": 1}).encode()
    (checkpoint / "COMMITTED").write_bytes(marker + f"\nxxh3_64 {checksum_of(marker)}\n".encode())
    assert re.search(r"COMMITTED lacks the checksum of state\.json", restore_error(checkpoint))


def header_file(header, data=b""):
    """A safetensors file with ``header`` (a dict) and ``data``."""
    text = json.dumps(header).encode()
    return struct.pack("<Q", len(text)) + text + data


@pytest.mark.parametrize(
    ("arrays", "match"),
    [
        (header_file([1, 2]), "the safetensors header is not an object"),
        (
            header_file(
                {
                    "a": {"dtype": "U8", "shape": [2], "data_offsets": [0, 2]},
                    "b": {"dtype": "U8", "shape": [2], "data_offsets": [4, 6]},
                },
                b"\0" * 6,
            ),
            "tensor data is not contiguous",
        ),
    ],
)
def test_sealed_but_malformed_arrays_file_is_named(tmp_path, arrays, match):
    """An arrays file with valid checksums but a malformed header is named as corrupt."""
    checkpoint = saved(tmp_path)
    reseal(checkpoint, arrays=arrays)
    message = restore_error(checkpoint)
    assert re.search(match, message)
    assert "arrays.safetensors" in message


@pytest.mark.parametrize(
    ("node", "match"),
    [
        ({"shape": [-1]}, "bad shape for 'w'"),
        ({"shape": [3]}, "tensor 'w' does not match state.json"),
        ({"dtype": "<i8"}, "tensor 'w' does not match state.json"),
    ],
)
def test_state_json_disagreeing_with_the_header_is_named(tmp_path, node, match):
    """An array node of state.json that the safetensors header contradicts is corrupt."""
    checkpoint = saved(tmp_path, {"w": np.zeros(2, np.float64)})
    reseal(
        checkpoint,
        state=edited_state(checkpoint, lambda doc: doc["tree"]["dict"]["w"].update(node)),
    )
    with CheckpointManager(tmp_path, read_only=True) as manager:
        with pytest.raises(CorruptCheckpointError, match=match):
            manager.verify()
        with manager.open() as reader, pytest.raises(CorruptCheckpointError, match=match):
            reader["w"]


def test_commit_refuses_a_committed_name_without_force(tmp_path):
    """commit() itself refuses to replace a committed checkpoint unless forced."""
    storage = storage_module.open_storage(tmp_path)
    commit(storage, STEP1, {"w": np.zeros(1)}, {"tree": None})
    with pytest.raises(CheckpointExistsError, match=f"checkpoint {STEP1} exists .*force=True"):
        commit(storage, STEP1, {"w": np.ones(1)}, {"tree": None})
    commit(storage, STEP1, {"w": np.ones(1)}, {"tree": None}, force=True)


def test_big_endian_and_0d_arrays_round_trip(tmp_path):
    """Non-native byte order, 0-d included, is stored little-endian and restored by value."""
    state = {"s": np.array(7.5, ">f8"), "v": np.arange(3, dtype=">i4")[::-1]}
    with CheckpointManager(tmp_path) as manager:
        manager.save(1, state)
        restored = manager.restore()
    assert restored["s"] == 7.5
    assert restored["s"].shape == ()
    assert restored["v"].tolist() == [2, 1, 0]


def test_a_file_that_ends_early_while_read_is_truncated():
    """A read that meets the end of the file early (it shrank after its size was taken)."""
    import io

    with pytest.raises(CorruptCheckpointError, match=r"x\.safetensors is truncated"):
        fastio.read_exactly(io.BytesIO(b"ab"), memoryview(bytearray(4)), "x.safetensors")


class NoExchangeStorage(storage_module.LocalStorage):
    """Local storage without renameat2, whose ``fail_at``-th rename fails."""

    def __init__(self, root, fail_at=None):
        super().__init__(root)
        self.renames = 0
        self.fail_at = fail_at

    def exchange(self, src, dst):
        return storage_module.Storage.exchange(self, src, dst)

    def rename(self, src, dst):
        self.renames += 1
        if self.renames == self.fail_at:
            raise OSError(errno.EIO, os.strerror(errno.EIO), dst)
        super().rename(src, dst)


def save_w(storage, value, **kwargs):
    """Commits {"w": [value, value]} as step 1 through ``storage``."""
    from globalstep.checkpoint import flatten_tree as flatten

    flat = flatten({"w": np.full(2, value)})
    commit(storage, STEP1, flat.arrays, {"tree": flat.structure}, **kwargs)


def test_forced_replacement_without_exchange_uses_two_renames(tmp_path):
    """Where directories cannot be swapped, a forced save replaces through a trash rename."""
    storage = NoExchangeStorage(str(tmp_path))
    save_w(storage, 0.0)
    save_w(storage, 1.0, force=True)
    state = load_state(storage, STEP1)
    assert read_arrays(storage, STEP1, state)["w"].tolist() == [1.0, 1.0]
    assert os.listdir(tmp_path) == [STEP1]


def test_failed_second_rename_puts_the_replaced_checkpoint_back(tmp_path):
    """If the new checkpoint cannot be renamed in, the replaced one is renamed back."""
    storage = NoExchangeStorage(str(tmp_path))
    save_w(storage, 0.0)
    storage.renames, storage.fail_at = 0, 2
    with pytest.raises(CheckpointError, match="Input/output error"):
        save_w(storage, 1.0, force=True)
    assert committed_names(storage) == [STEP1]
    state = load_state(storage, STEP1)
    assert read_arrays(storage, STEP1, state)["w"].tolist() == [0.0, 0.0]


# ------------------------------------------------------------------ the data path


def mixed_state():
    """Small arrays of many kinds around two large ones, to cross every batch boundary."""
    rng = np.random.default_rng(5)
    state = {f"p{i:02d}": rng.random(int(rng.integers(0, 40)), dtype=np.float32) for i in range(30)}
    state["big"] = rng.random(300)
    state["wide"] = rng.integers(0, 9, size=(7, 50), dtype=np.int32)
    state["strided"] = np.arange(40.0)[::3]
    state["swapped"] = np.arange(6, dtype=">i4")
    state["scalar"] = np.array(2.5)
    state["empty"] = np.zeros((0, 3), np.int16)
    return state


def assert_same_values(restored, state):
    """Every array restored equals the saved one by value and shape (byte order aside)."""
    assert sorted(restored) == sorted(state)
    for key, array in state.items():
        assert np.shape(restored[key]) == np.shape(array), key
        assert np.asarray(restored[key]).tolist() == np.asarray(array).tolist(), key


@pytest.fixture
def tiny_batches(monkeypatch):
    """Shrinks chunks and batches so that a small state crosses every batch boundary."""
    monkeypatch.setattr(fastio, "CHUNK_BYTES", 256)
    monkeypatch.setattr(fastio, "GATHER_BYTES", 64)
    monkeypatch.setattr(fastio, "GATHER_COUNT", 3)
    monkeypatch.setattr(fastio, "BATCH_BYTES", 100)


def test_small_and_large_arrays_round_trip_through_batches(tmp_path, tiny_batches):
    """Gathered small arrays and chunked large ones restore exactly, with and without a template."""
    state = mixed_state()
    with CheckpointManager(tmp_path) as manager:
        manager.save(1, state)
        assert_same_values(manager.restore(), state)
        template = {k: np.zeros(np.shape(v), np.asarray(v).dtype) for k, v in state.items()}
        assert_same_values(manager.restore(template), state)
        assert template["big"].tolist() == state["big"].tolist()
        manager.verify(1)
    loaded = load_file(str(tmp_path / STEP1 / "arrays.safetensors"))
    assert loaded["big"].tolist() == state["big"].tolist()


class CountingOs:
    """The os module, counting calls of ``write`` and ``writev``."""

    def __init__(self):
        self.writes = 0

    def __getattr__(self, attribute):
        function = getattr(os, attribute)
        if attribute not in ("write", "writev"):
            return function

        def counted(*args, **kwargs):
            self.writes += 1
            return function(*args, **kwargs)

        return counted


def test_many_small_arrays_go_out_in_few_writes(tmp_path, monkeypatch):
    """2,000 small arrays go out 64 to a vectored write, not one call each."""
    counting = CountingOs()
    monkeypatch.setattr(local_storage, "os", counting)
    state = {f"a{i:04d}": np.full(3, i, np.float32) for i in range(2000)}
    with CheckpointManager(tmp_path) as manager:
        manager.save(1, state)
    monkeypatch.undo()
    # The header, 32 writev of 64 arrays, state.json, the marker and the summary index.
    assert counting.writes == 1 + math.ceil(2000 / fastio.GATHER_COUNT) + 3
    with CheckpointManager(tmp_path, read_only=True) as manager:
        assert_tree_equal(manager.restore(), state)


class ShortWritevOs:
    """The os module whose writev writes at most 5 bytes per call."""

    def __getattr__(self, attribute):
        if attribute == "writev":
            return lambda fd, buffers: os.write(fd, memoryview(buffers[0]).cast("B")[:5])
        return getattr(os, attribute)


def test_short_vectored_writes_resume(tmp_path, monkeypatch, tiny_batches):
    """writev that writes only part of the buffers is resumed where it stopped."""
    state = mixed_state()
    monkeypatch.setattr(local_storage, "os", ShortWritevOs())
    with CheckpointManager(tmp_path) as manager:
        manager.save(1, state)
        monkeypatch.undo()
        manager.verify(1)
        assert_same_values(manager.restore(), state)


def test_injected_enospc_in_a_vectored_write_keeps_earlier_checkpoints(tmp_path, monkeypatch):
    """ENOSPC from writev raises a clear error and leaves the earlier checkpoint."""
    state = {f"a{i}": np.full(3, i, np.float32) for i in range(10)}
    with CheckpointManager(tmp_path) as manager:
        manager.save(1, state)
        monkeypatch.setattr(local_storage, "os", FailingOs("writev"))
        with pytest.raises(CheckpointError, match=r"saving step-000000000002 failed .*No space"):
            manager.save(2, state)
        monkeypatch.undo()
        assert manager.steps() == [1]
        manager.verify(1)
    assert not [n for n in os.listdir(tmp_path) if n.startswith(".tmp-")]


class ShortOs:
    """The os module whose readv fills at most 5 bytes per call."""

    def __getattr__(self, attribute):
        if attribute == "readv":

            def readv(fd, buffers):
                view = memoryview(buffers[0]).cast("B")  # an array or a byte buffer
                data = os.read(fd, min(5, len(view)))
                view[: len(data)] = data
                return len(data)

            return readv
        return getattr(os, attribute)


def test_short_vectored_reads_resume(tmp_path, monkeypatch, tiny_batches):
    """readv that fills only part of the buffers is resumed where it stopped."""
    state = mixed_state()
    with CheckpointManager(tmp_path) as manager:
        manager.save(1, state)
        template = {k: np.zeros(np.shape(v), np.asarray(v).dtype) for k, v in state.items()}
        monkeypatch.setattr(fastio, "os", ShortOs())
        assert_same_values(manager.restore(template), state)


def test_a_vectored_read_that_meets_the_end_early_is_truncation(tmp_path):
    """readv returning 0 before the buffers are full names the file as truncated."""
    path = tmp_path / "x.safetensors"
    path.write_bytes(b"abc")
    fd = os.open(path, os.O_RDONLY)
    try:
        views = [memoryview(bytearray(2)), np.zeros(1, np.float32)]
        with pytest.raises(CorruptCheckpointError, match=r"x\.safetensors is truncated"):
            fastio._readv_exactly(fd, views, [2, 4], "x.safetensors")
        assert bytes(views[0]) == b"ab"
        assert views[1].view(np.uint8).tolist() == [ord("c"), 0, 0, 0]
    finally:
        os.close(fd)


@pytest.mark.skipif(local_storage._SYNC_FILE_RANGE is None, reason="no sync_file_range")
def test_writeback_starts_while_the_file_is_written(tmp_path, monkeypatch):
    """The kernel is asked to write back each piece as it is written, in order, no gap."""
    ranges = []
    real = local_storage._SYNC_FILE_RANGE
    monkeypatch.setattr(local_storage, "_WRITEBACK_BYTES", 1000)
    monkeypatch.setattr(
        local_storage,
        "_SYNC_FILE_RANGE",
        lambda fd, offset, n, flags: (
            ranges.append((offset, n, flags)) or real(fd, offset, n, flags)
        ),
    )
    monkeypatch.setattr(fastio, "CHUNK_BYTES", 4096)
    monkeypatch.setattr(fastio, "GATHER_BYTES", 1024)
    with CheckpointManager(tmp_path) as manager:
        manager.save(1, {"w": np.arange(5000.0)})
    assert len(ranges) >= 9
    assert all(flags == local_storage._SYNC_FILE_RANGE_WRITE for _, _, flags in ranges)
    assert all(a + n == b for (a, n, _), (b, _, _) in itertools.pairwise(ranges))
    assert ranges[0][0] == 0


class SpyingOs:
    """The os module, recording the offsets the background reader reads at and the advice
    given; ``reached`` is set once it has read at ``until``."""

    def __init__(self, until=None):
        self.advised = []
        self.offsets = []
        self.until = until
        self.reached = threading.Event()

    def __getattr__(self, attribute):
        if attribute == "posix_fadvise":
            return lambda fd, o, n, a: (
                self.advised.append((o, n, a)) or os.posix_fadvise(fd, o, n, a)
            )
        if attribute == "preadv":
            return self._preadv
        return getattr(os, attribute)

    def _preadv(self, fd, buffers, offset):
        self.offsets.append(offset)
        if offset == self.until:
            self.reached.set()
        return os.preadv(fd, buffers, offset)


def reader_threads():
    return [t for t in threading.enumerate() if t.name == "globalstep-read-ahead"]


def test_restore_reads_the_file_ahead_in_order(tmp_path, monkeypatch):
    """A local restore reads its array file ahead in a background thread, in order from
    the start (each call through one small buffer, over and over), advises sequential
    reading, and leaves no thread behind."""
    state = {"w": np.arange(5000.0), "v": np.arange(300, dtype=np.int16)}
    with CheckpointManager(tmp_path) as manager:
        manager.save(1, state)
    spy = SpyingOs()
    monkeypatch.setattr(fastio, "os", spy)
    close = fastio.ReadAhead.close
    # The thread is let read to the end of the file before it is stopped.
    monkeypatch.setattr(fastio.ReadAhead, "close", lambda self: self._thread.join() or close(self))
    monkeypatch.setattr(fastio, "_AHEAD_MIN_BYTES", 0)
    monkeypatch.setattr(fastio, "_AHEAD_CALL", 4096)
    monkeypatch.setattr(fastio, "_AHEAD_SCRATCH", 1024)
    monkeypatch.setattr(fastio, "CHUNK_BYTES", 4096)
    monkeypatch.setattr(fastio, "GATHER_BYTES", 1024)
    with CheckpointManager(tmp_path, read_only=True) as manager:
        for read in (manager.restore, lambda: manager.verify(1)):
            spy.offsets = []
            read()
            size = (tmp_path / STEP1 / ARRAYS_FILE).stat().st_size
            assert spy.offsets == [*range(0, size, 4096), size]  # in order, to the end
            assert not reader_threads()
        assert_tree_equal(manager.restore(), state)
    assert {a for _, _, a in spy.advised} == {os.POSIX_FADV_SEQUENTIAL}


def test_read_ahead_stays_within_its_window(tmp_path, monkeypatch):
    """The background reader reads no further than its window past the restore's position,
    and moves on when told the restore has read further."""
    path = tmp_path / "data"
    path.write_bytes(bytes(64 * 1024))
    spy = SpyingOs(until=3 * 1024)
    monkeypatch.setattr(fastio, "os", spy)
    monkeypatch.setattr(fastio, "_AHEAD_CALL", 1024)
    monkeypatch.setattr(fastio, "_AHEAD_BYTES", 4 * 1024)
    ahead = fastio.ReadAhead(str(path))
    assert spy.reached.wait(60)
    ahead.close()
    assert spy.offsets == [0, 1024, 2048, 3072]
    spy.until, spy.offsets = 40 * 1024, []
    spy.reached.clear()
    ahead = fastio.ReadAhead(str(path))
    ahead.advance(37 * 1024)
    assert spy.reached.wait(60)
    ahead.close()
    assert max(spy.offsets) == 40 * 1024
    assert not reader_threads()


def test_read_ahead_of_a_missing_file_ends_quietly(tmp_path):
    """A background reader whose file is missing ends at once; the restore reports it."""
    ahead = fastio.ReadAhead(str(tmp_path / "missing"))
    ahead.close()
    assert not reader_threads()


@pytest.mark.parametrize("damage", ["truncate", "flip"])
def test_damaged_file_read_ahead_is_still_reported(tmp_path, monkeypatch, damage):
    """With the background reader running, a truncated or flipped array file still fails
    with the error that names it, and the reader thread is gone."""
    checkpoint = saved(tmp_path)
    arrays = checkpoint / ARRAYS_FILE
    data = bytearray(arrays.read_bytes())
    if damage == "truncate":
        arrays.write_bytes(data[:-100])
        match = "truncated"
    else:
        data[-5] ^= 0x40
        arrays.write_bytes(data)
        match = "fails its checksum"
    monkeypatch.setattr(fastio, "_AHEAD_MIN_BYTES", 0)
    monkeypatch.setattr(fastio, "_AHEAD_CALL", 64)
    with CheckpointManager(tmp_path, read_only=True) as manager:
        with pytest.raises(CorruptCheckpointError, match=match):
            manager.restore()
        with pytest.raises(CorruptCheckpointError, match=match):
            manager.verify(1)
    assert not reader_threads()


def test_state_json_written_indented_by_earlier_versions_still_reads(tmp_path):
    """A state.json in the indented layout earlier versions wrote restores as before."""
    checkpoint = saved(tmp_path)
    doc = json.loads((checkpoint / "state.json").read_bytes())
    reseal(checkpoint, state=json.dumps(doc, indent=1).encode())
    with CheckpointManager(tmp_path, read_only=True) as manager:
        assert_tree_equal(manager.restore(), make_state(1))
        manager.verify(1)


def test_small_arrays_restored_without_template_are_aligned_and_writable(tmp_path):
    """Small arrays read in one run are aligned, writable, C-contiguous and independent."""
    state = {"a": np.arange(3, dtype=np.int8), "b": np.arange(5.0), "c": np.ones(2, np.int32)}
    with CheckpointManager(tmp_path) as manager:
        manager.save(1, state)
        restored = manager.restore()
    for key, array in restored.items():
        assert array.flags.aligned, key
        assert array.flags.writeable, key
        assert array.flags.c_contiguous, key
    restored["b"][:] = -1.0
    assert restored["a"].tolist() == [0, 1, 2]
    assert restored["c"].tolist() == [1, 1]


class _ShardHooks:
    """Commit hooks writing one shard file, as a rank of a distributed save would."""

    def __init__(self, payload: bytes) -> None:
        self.payload = payload

    def started(self, staging):
        pass

    def finishing(self, staging, document):
        storage = storage_module.open_storage("memory://forced-shards")
        storage.makedirs(f"{staging}/sharded")
        storage.write_bytes(f"{staging}/sharded/rank-00000.bin", self.payload)


def test_forced_replace_without_rename_carries_the_shards():
    """On a store without rename a forced replacement copies the sharded/ files too."""
    storage = storage_module.open_storage("memory://forced-shards")
    commit(storage, STEP1, {"w": np.zeros(1)}, {"tree": None}, hooks=_ShardHooks(b"old"))
    commit(storage, STEP1, {"w": np.ones(1)}, {"tree": None}, force=True, hooks=_ShardHooks(b"new"))
    assert storage.read_bytes(storage.join(STEP1, "sharded", "rank-00000.bin")) == b"new"
    assert committed_names(storage) == [STEP1]


def prefault_threads():
    return [t for t in threading.enumerate() if t.name == "globalstep-prefault"]


class SpyingMadvise:
    """Stands in for libc's madvise: records each call, then answers ``result``."""

    def __init__(self, result=0):
        self.calls = []
        self.result = result

    def __call__(self, address, length, advice):
        self.calls.append((address, length, advice))
        return self.result


@pytest.fixture
def small_prefault(monkeypatch, tiny_batches):
    """A prefault thread for any state, with one call per 128 bytes."""
    monkeypatch.setattr(fastio, "_PREFAULT_MIN_BYTES", 0)
    monkeypatch.setattr(fastio, "_PREFAULT_CALL", 128)


def finished_prefaults(monkeypatch):
    """The prefault threads of the restores that follow, each let finish before it is
    stopped (so that what it did can be checked)."""
    workers = []
    close = fastio._Prefault.close

    def finish(self):
        self._thread.join()
        workers.append(self)
        close(self)

    monkeypatch.setattr(fastio._Prefault, "close", finish)
    return workers


def test_new_buffers_are_faulted_in_ahead_whole_and_in_order(tmp_path, monkeypatch, small_prefault):
    """A restore's new buffers (a large array's, a run's) are faulted in whole, in file
    order, from the start of their first page, with MADV_POPULATE_WRITE; the restore
    returns the saved values and leaves no thread behind."""
    state = {"big": np.arange(300.0), "run": {"a": np.arange(6.0), "b": np.ones(5, np.int32)}}
    with CheckpointManager(tmp_path) as manager:
        manager.save(1, state)
    spy = SpyingMadvise()
    monkeypatch.setattr(fastio, "_PREFAULT", spy)
    workers = finished_prefaults(monkeypatch)
    with CheckpointManager(tmp_path, read_only=True) as manager:
        restored = manager.restore()
    assert_tree_equal(restored, state)
    (worker,) = workers
    buffers = worker._buffers
    assert [b.nbytes for b in buffers] == [2400, 68]  # "big", then the run of the other two
    assert restored["big"].base is buffers[0] or restored["big"] is buffers[0]
    page = os.sysconf("SC_PAGE_SIZE")
    calls = list(spy.calls)
    for buffer in buffers:  # each buffer's calls in turn: contiguous, start to end
        start = buffer.__array_interface__["data"][0]
        end = start + buffer.nbytes
        position = start - start % page
        while position < end:
            address, length, _ = calls.pop(0)
            assert address == position
            assert 0 < length <= 128
            position += length
        assert position == end
    assert not calls
    assert {advice for *_, advice in spy.calls} == {fastio._MADV_POPULATE_WRITE}
    assert not prefault_threads()


def test_a_refused_prefault_stops_and_the_restore_goes_on(tmp_path, monkeypatch, small_prefault):
    """Where the kernel refuses MADV_POPULATE_WRITE (before Linux 5.14), the thread stops
    after its first call and the restore fills the buffers as before."""
    state = {"big": np.arange(300.0), "also": np.arange(200.0)}
    with CheckpointManager(tmp_path) as manager:
        manager.save(1, state)
    spy = SpyingMadvise(result=-1)
    monkeypatch.setattr(fastio, "_PREFAULT", spy)
    workers = finished_prefaults(monkeypatch)
    with CheckpointManager(tmp_path, read_only=True) as manager:
        assert_tree_equal(manager.restore(), state)
    assert len(workers) == 1
    assert len(spy.calls) == 1
    assert not prefault_threads()


def test_the_real_prefault_keeps_the_values(tmp_path, monkeypatch, small_prefault):
    """With libc's own madvise (where there is one), a restore and a restore into a
    template with misfits return the saved values; populating never writes a byte."""
    state = mixed_state()
    with CheckpointManager(tmp_path) as manager:
        manager.save(1, state)
    workers = finished_prefaults(monkeypatch)
    with CheckpointManager(tmp_path, read_only=True) as manager:
        assert_same_values(manager.restore(), state)
        template = {k: np.zeros(np.shape(v), np.asarray(v).dtype) for k, v in state.items()}
        template["big"] = template["big"][::-1]  # not C-contiguous: read into a new array
        assert_same_values(manager.restore(template), state)
    if fastio._PREFAULT is not None:
        assert len(workers) == 2
    assert not prefault_threads()


def test_small_or_template_filled_restores_start_no_prefault(tmp_path, monkeypatch):
    """No thread where the new buffers are small, or where the template takes every array,
    or where the system has no madvise."""
    state = {"w": np.arange(300.0)}
    with CheckpointManager(tmp_path) as manager:
        manager.save(1, state)
    spy = SpyingMadvise()
    monkeypatch.setattr(fastio, "_PREFAULT", spy)
    with CheckpointManager(tmp_path, read_only=True) as manager:
        manager.restore()  # 2,400 bytes: below _PREFAULT_MIN_BYTES
        monkeypatch.setattr(fastio, "_PREFAULT_MIN_BYTES", 0)
        manager.restore({"w": np.zeros(300)})  # read into the template's own array
        assert spy.calls == []
        monkeypatch.setattr(fastio, "_PREFAULT", None)
        assert_tree_equal(manager.restore(), state)
    assert not prefault_threads()


def test_damaged_file_with_a_prefault_is_still_reported(tmp_path, monkeypatch, small_prefault):
    """A flipped array file fails with the error that names it while the prefault thread
    runs, and the thread is gone afterwards."""
    checkpoint = saved(tmp_path)
    arrays = checkpoint / ARRAYS_FILE
    data = bytearray(arrays.read_bytes())
    data[-5] ^= 0x40
    arrays.write_bytes(data)
    spy = SpyingMadvise()
    monkeypatch.setattr(fastio, "_PREFAULT", spy)
    workers = finished_prefaults(monkeypatch)
    with (
        CheckpointManager(tmp_path, read_only=True) as manager,
        pytest.raises(CorruptCheckpointError, match="fails its checksum"),
    ):
        manager.restore()
    assert workers
    assert spy.calls
    assert not prefault_threads()


# ------------------------------------------------------------------ the commit protocol objects


class FsyncSpy:
    """Records the order of a storage's removals, renames and directory fsyncs."""

    def __init__(self, storage, events):
        self.storage = storage
        self.events = events

    def __getattr__(self, attribute):
        function = getattr(self.storage, attribute)
        if attribute not in ("rename", "fsync_dir", "remove_file", "remove_tree"):
            return function

        def recorded(*args):
            self.events.append((attribute, *(a.rsplit("/", 1)[-1] for a in args)))
            return function(*args)

        return recorded


def test_the_protocol_is_chosen_once_by_the_storage(tmp_path):
    """A local directory commits by rename, an object store by marker; both publish the
    same files, and each names what it left behind while it ran."""
    local = commit_protocol.protocol_for(storage_module.open_storage(tmp_path))
    remote = commit_protocol.protocol_for(storage_module.open_storage("memory://protocol-choice"))
    assert (type(local), local.in_place) == (commit_protocol.RenameCommit, False)
    assert (type(remote), remote.in_place) == (commit_protocol.MarkerCommit, True)
    for protocol in (local, remote):
        assert not protocol.is_committed(STEP1)
        protocol.commit(STEP1, {"w": np.ones(2)}, {"tree": None})
        assert protocol.is_committed(STEP1)
        assert protocol.committed_names() == [STEP1]
        assert sorted(protocol.storage.listdir(protocol.storage.join(STEP1))) == [
            "COMMITTED",
            "arrays.safetensors",
            "state.json",
        ]
        assert protocol.is_temporary(".tmp-x")
        assert protocol.is_temporary(".trash-x")
        assert not protocol.is_temporary(STEP1)
        assert protocol.stale_prefixes == (".tmp-", ".trash-")


def test_a_local_removal_renames_aside_and_fsyncs_the_parent(tmp_path):
    """Removing a local checkpoint renames it aside, fsyncs the parent directory (so that a
    crash cannot bring it back), then removes it; nothing is left."""
    storage = storage_module.open_storage(tmp_path)
    commit_protocol.protocol_for(storage).commit(STEP1, {"w": np.ones(2)}, {"tree": None})
    events = []
    protocol = commit_protocol.RenameCommit(FsyncSpy(storage, events))
    protocol.remove(STEP1)
    (rename, fsync, remove) = events
    assert rename[:2] == ("rename", STEP1)
    assert rename[2].startswith(f".trash-{STEP1}-")
    assert fsync == ("fsync_dir", tmp_path.name)
    assert remove == ("remove_tree", rename[2])
    assert os.listdir(tmp_path) == []


def test_an_object_store_removal_takes_the_marker_first():
    """Removing a checkpoint where rename is not atomic removes its marker before its files."""
    storage = storage_module.open_storage("memory://protocol-remove")
    commit_protocol.protocol_for(storage).commit(STEP1, {"w": np.ones(2)}, {"tree": None})
    events = []
    commit_protocol.MarkerCommit(FsyncSpy(storage, events)).remove(STEP1)
    assert events == [("remove_file", "COMMITTED"), ("remove_tree", STEP1)]
    assert storage.listdir(storage.root) == []


@pytest.mark.parametrize("url", [None, "memory://protocol-stale"])
def test_leftovers_are_what_the_protocol_says(tmp_path, url):
    """Temporary directories are leftovers everywhere; an unmarked step directory is one
    only where saves write in place (an object store): locally it is left alone."""
    storage = storage_module.open_storage(url or tmp_path)
    protocol = commit_protocol.protocol_for(storage)
    protocol.commit(STEP1, {"w": np.ones(2)}, {"tree": None})
    for name in (".tmp-step-000000000002-ab", ".trash-step-000000000003-cd", "step-000000000004"):
        storage.makedirs(storage.join(name))
        storage.write_bytes(storage.join(name, "state.json"), b"{}")
    removed = protocol.remove_stale()
    expected = {".tmp-step-000000000002-ab", ".trash-step-000000000003-cd"}
    if protocol.in_place:
        expected.add("step-000000000004")
    assert set(removed) == expected
    assert set(storage.listdir(storage.root)) - {STEP1} == {"step-000000000004"} - expected
    assert protocol.committed_names() == [STEP1]
