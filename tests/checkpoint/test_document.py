"""state.json through its one typed Document: the bytes on disk are those of c08446f.

``tests/data/state-json-c08446f/`` holds the state.json files that c08446f (the release
before the Document) wrote for the calls of :func:`write_checkpoints`, with the time
pinned (``tests/checkpoint/state_json_writer.py`` wrote them on c08446f).
"""

from __future__ import annotations

import json
import pathlib

import numpy as np
import pytest
from ckpt_helpers import reseal
from state_json_writer import write_checkpoints

from globalstep import CorruptCheckpointError
from globalstep.checkpoint import CheckpointManager, load_state
from globalstep.checkpoint._files.document import Document
from globalstep.storage import LocalStorage

DATA = pathlib.Path(__file__).parent.parent / "data"
GOLDEN = DATA / "state-json-c08446f"


def _state_files(root: pathlib.Path) -> dict[str, bytes]:
    return {
        p.relative_to(root).as_posix(): p.read_bytes()
        for p in sorted(root.rglob("state.json"))
        if not any(part.startswith(".") for part in p.relative_to(root).parts)
    }


def test_state_json_bytes_are_c08446f_s(tmp_path):
    """Every state.json written through the Document is byte for byte the one c08446f
    wrote for the same calls: same keys, same order, same separators, same floats."""
    write_checkpoints(tmp_path)
    written, golden = _state_files(tmp_path), _state_files(GOLDEN)
    assert sorted(written) == sorted(golden)
    assert len(golden) >= 6
    for name, data in golden.items():
        assert written[name] == data, name


def _all_state_json() -> list[pathlib.Path]:
    return sorted(GOLDEN.rglob("state.json")) + sorted((DATA / "main-5d95193").rglob("state.json"))


@pytest.mark.parametrize("path", _all_state_json(), ids=lambda p: str(p.relative_to(DATA)))
def test_document_reads_and_rewrites_every_state_json(path):
    """Decoding a state.json (c08446f's, and 5d95193's) and encoding it again gives its
    bytes back; the typed fields are the top-level keys."""
    data = path.read_bytes()
    document = Document.from_json(data)
    assert document.to_json() == data
    raw = json.loads(data)
    assert document.tree == raw["tree"]
    assert document.files == raw["files"]
    assert document.clocks == raw["clocks"]
    assert document.step == raw.get("step")
    assert document.to_dict() == raw
    assert list(document) == list(raw)


def test_unknown_keys_of_a_newer_version_are_kept_in_place():
    """A key this version does not know is kept where it was, and written back as read."""
    raw = {"format": 1, "step": 3, "future": {"x": [1, 2]}, "tree": None, "files": {}}
    data = json.dumps(raw, separators=(",", ":")).encode()
    document = Document.from_json(data)
    assert document.extra == {"future": {"x": [1, 2]}}
    assert document["future"] == {"x": [1, 2]}
    assert document.to_json() == data


def test_a_new_document_is_written_in_its_writer_s_order():
    """A manager's document and a compat.tf one keep the order each wrote before."""
    manager = Document(step=2, created_unix=1.5, metrics={}, clocks=[], tree=None, files={})
    assert list(manager.to_dict()) == [
        "format",
        "step",
        "created_unix",
        "metrics",
        "clocks",
        "tree",
        "manager",
        "previous_step",
        "files",
    ]
    manager.timeline = {"resumed_from": 1, "abandoned": [2]}
    manager.sharded = {"world_size": 2, "tensors": {}}
    assert list(manager.to_dict())[-3:] == ["timeline", "sharded", "files"]
    tf = Document.of_tf(created_unix=1.5, tree=None, clocks=[])
    assert list(tf.replace(files={}).to_dict()) == [
        "format",
        "created_unix",
        "tree",
        "clocks",
        "files",
    ]


def test_a_mapping_committed_is_written_as_before(tmp_path):
    """format.commit still takes the rest of state.json as a mapping: written with
    ``format`` first and ``files`` last, its keys in their order, a None kept."""
    from globalstep.checkpoint._files.commit import commit
    from globalstep.storage import open_storage

    rest = {"tree": None, "timeline": None, "zeta": [1.5], "step": 4}
    commit(open_storage(str(tmp_path)), "x", {"w": np.ones(2)}, rest)
    data = (tmp_path / "x" / "state.json").read_bytes()
    files = json.loads(data)["files"]
    assert data == json.dumps({"format": 1, **rest, "files": files}, separators=(",", ":")).encode()


@pytest.mark.parametrize(
    ("change", "said"),
    [
        ({"files": None}, "lacks the checksum of arrays.safetensors"),
        ({"files": {}}, "lacks the checksum of arrays.safetensors"),
        ({"tree": "drop"}, "lacks the state tree"),
        ({"format": 2}, "is not a globalstep checkpoint file of format 1"),
    ],
)
def test_a_state_json_without_its_parts_is_corrupt(tmp_path, change, said):
    """A state.json (resealed, so its checksums pass) without its array checksums, its
    tree or of another format is refused as corrupt, naming the file."""
    with CheckpointManager(tmp_path) as manager:
        manager.save(1, {"w": np.ones(2)})
    checkpoint = tmp_path / "step-000000000001"
    raw = json.loads((checkpoint / "state.json").read_bytes())
    for key, value in change.items():
        if value == "drop":
            del raw[key]
        else:
            raw[key] = value
    reseal(checkpoint, state=json.dumps(raw).encode())
    with pytest.raises(CorruptCheckpointError, match=said):
        load_state(LocalStorage(str(tmp_path)), "step-000000000001")
