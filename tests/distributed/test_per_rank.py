"""Per-rank leaves in distributed checkpoints (issue 27, build 1 and 2): each rank's own RNG,
batches and marked state saved from every rank and restored to the same rank, bit for bit;
a change of world size re-seeds the generators with one warning, or names the leaf.

The fixture runs the issue's loop on 2 gloo ranks three times (rank_workers.py): 40
updates uninterrupted; the same killed by SIGKILL on every rank after a random update
between 21 and 39 (the issue's script stops at 25); a fresh start that resumes from the
newest checkpoint (step 20 or 30) to 40. The tests compare what each
rank held, and restore the 2-rank checkpoint on one process (2 -> 1).
"""

from __future__ import annotations

import json
import random
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from spawn import spawn  # noqa: E402

from globalstep import (  # noqa: E402
    Clock,
    CorruptCheckpointError,
    RestoreMismatchError,
)
from globalstep.checkpoint import (  # noqa: E402
    CheckpointManager,
    PerRank,
    WorldSizeError,
    WorldSizeWarning,
)
from globalstep.checkpoint._directory.reading import verify_checkpoint  # noqa: E402
from globalstep.checkpoint._manager import step_name  # noqa: E402
from globalstep.integrations.torch import RNGState  # noqa: E402
from globalstep.storage import LocalStorage  # noqa: E402

sys.path.insert(0, str(Path(__file__).parents[1] / "checkpoint"))
from ckpt_helpers import reseal  # noqa: E402

pytestmark = pytest.mark.slow

KILL_AT = random.Random().randint(21, 39)
"""The update after which every rank is killed; a new one each session (named on failure)."""


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """The uninterrupted run, the killed one, and its resumption, on 2 ranks."""
    out = tmp_path_factory.mktemp("per-rank")
    full = spawn("full", 2, out, module="rank_workers")
    spawn(f"kill-{KILL_AT}", 2, out, killed=(0, 1), module="rank_workers")
    resumed = spawn("resume", 2, out, module="rank_workers")
    return {"full": full, "resumed": resumed, "dir": out / "resumed", "out": out}


def test_every_rank_resumes_bit_exact(runs):
    """Killed after update KILL_AT and resumed from the step saved before, each rank ends
    at 40 holding exactly what the uninterrupted run held: parameters, Adam's moments, its
    dropout RNG (and Python's, NumPy's), its batch generator, its NumPy noise, its marked
    sum."""
    for rank in (0, 1):
        full, resumed = runs["full"][rank], runs["resumed"][rank]
        assert resumed["restored"] == KILL_AT // 10 * 10, f"killed after update {KILL_AT}"
        assert resumed["step"] == full["step"] == 40
        for key in ("params", "opt", "torch_rng", "python_rng", "numpy_rng", "data", "noise"):
            assert resumed[key] == full[key], f"rank {rank}: {key} (killed after {KILL_AT})"
        assert resumed["seen"] == full["seen"]


def test_the_ranks_state_really_differs(runs):
    """The ranks' own streams differ (so a restore of rank 0's on rank 1 would show);
    DDP keeps their parameters equal."""
    rank0, rank1 = runs["full"]
    for key in ("torch_rng", "data", "noise", "seen"):
        assert rank0[key] != rank1[key], key
    assert rank0["params"] == rank1["params"]


def test_state_json_records_every_rank_leaves(runs):
    """The writer records each rank's file of per-rank leaves; the main tree holds a
    per-rank node where each sits; replicated state is in the main arrays file once."""
    manager = CheckpointManager(runs["dir"], read_only=True)
    state = manager.metadata(40)
    section = state["per_rank"]
    assert section["world_size"] == 2
    assert [e["file"] for e in section["ranks"]] == [
        "per_rank/rank-00000.safetensors",
        "per_rank/rank-00001.safetensors",
    ]
    assert sorted(section["ranks"][1]["tree"]) == ["data", "noise", "rng", "seen"]
    assert state["tree"]["dict"]["rng"] == {"per_rank": "rng"}
    assert state["tree"]["dict"]["seen"] == {"per_rank": "seen"}
    assert (runs["dir"] / step_name(40) / "per_rank" / "rank-00001.safetensors").is_file()
    reader = manager.open(40)
    names = reader.keys()
    assert names
    assert not any(k.startswith(("rng", "data", "seen")) for k in names)
    reader.close()
    manager.verify(40)


def test_ckpt_show_and_verify_name_the_per_rank_leaves(runs, capsys):
    """``globalstep ckpt show`` lists each per-rank leaf as such; ``ckpt verify`` passes."""
    from globalstep._cli import main

    assert main(["ckpt", "show", str(runs["dir"]), "--step", "40"]) == 0
    shown = capsys.readouterr().out
    assert "  rng: per-rank (each rank's own file)" in shown
    assert "  seen: per-rank (each rank's own file)" in shown
    assert main(["ckpt", "verify", str(runs["dir"])]) == 0


def _template() -> dict:
    """The per-rank part of the workers' state tree, and the clock (no model: partial)."""
    return {
        "clock": Clock(),
        "rng": RNGState(cuda=False),
        "data": torch.Generator(),
        "noise": np.random.default_rng(0),
        "seen": PerRank(np.zeros(1)),
    }


@pytest.mark.parametrize("rank", [0, 1])
def test_same_world_size_gives_each_rank_its_own(runs, rank, monkeypatch):
    """Restored as rank r of 2, the leaves are rank r's own of step 40, bit for bit."""
    from rank_workers import digest

    manager = CheckpointManager(runs["dir"], read_only=True)
    monkeypatch.setattr(manager._reading, "_ranks", lambda: (rank, 2))
    template = _template()
    tree, report = manager.restore(template, step=40, partial=True)
    assert sorted(report.unexpected) == ["model", "opt"]
    expected = runs["resumed"][rank]
    assert digest(template["data"].get_state().numpy()) == expected["data"]
    assert json.dumps(template["noise"].bit_generator.state) == expected["noise"]
    assert tree["seen"] is template["seen"]
    assert template["seen"].value.tolist() == expected["seen"]
    assert template["clock"].step == 40


def test_two_ranks_to_one_reseeds_the_generators_with_one_warning(runs):
    """Restored on one process (2 -> 1): the generators are re-seeded deterministically
    (the same seeds on every such restore, unlike either old rank's), one WorldSizeWarning
    names them; a leaf with load_state_from_ranks receives every old rank's state."""
    from rank_workers import digest

    class Total:
        globalstep_per_rank = True

        def __init__(self):
            self.calls = []

        def state_dict(self):
            return {"sum": np.zeros(1)}

        def load_state_dict(self, state):
            raise AssertionError("a remapped leaf is not loaded from one rank")

        def load_state_from_ranks(self, states, *, rank, world_size, step):
            self.calls.append(([s.tolist() for s in states], rank, world_size, step))

    seen = []
    for _ in range(2):
        template = {**_template(), "seen": PerRank(Total())}
        manager = CheckpointManager(runs["dir"], read_only=True)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            manager.restore(template, step=40, partial=True)
        assert [type(w.message) for w in caught] == [WorldSizeWarning]
        assert caught[0].filename == __file__  # pointing at the restore call
        message = str(caught[0].message)
        assert "saved on 2 ranks and is restored on 1 rank (2 -> 1)" in message
        assert "exactness cannot hold across a change of world size" in message
        assert "rng, data, noise" in message
        assert template["clock"].step == 40
        calls = template["seen"].value.calls
        assert calls == [([r["seen"] for r in runs["resumed"]], 0, 1, 40)]
        seen.append(
            (
                digest(template["data"].get_state().numpy()),
                json.dumps(template["noise"].bit_generator.state),
                digest(torch.get_rng_state().numpy()),
            )
        )
    assert seen[0] == seen[1]
    for old in runs["resumed"]:
        assert seen[0][0] != old["data"]
        assert seen[0][1] != old["noise"]
        assert seen[0][2] != old["torch_rng"]


def test_two_ranks_to_one_names_a_leaf_it_cannot_remap(runs):
    """A marked array saved on 2 ranks, restored on 1, raises WorldSizeError naming the
    leaf, N, M and the fix, before anything is restored."""
    template = _template()
    before = template["data"].get_state().clone()
    manager = CheckpointManager(runs["dir"], read_only=True)
    with pytest.raises(
        WorldSizeError,
        match=r"per-rank leaf 'seen' \(ndarray\) of checkpoint step 40 was saved on 2 ranks "
        r"and is restored on 1 rank: .*Restore on 2 ranks, .*load_state_from_ranks.*partial=True",
    ) as caught:
        manager.restore(template, step=40, partial=True)
    assert isinstance(caught.value, RestoreMismatchError)
    assert (caught.value.key, caught.value.saved_world_size, caught.value.world_size) == (
        "seen",
        2,
        1,
    )
    assert torch.equal(template["data"].get_state(), before)
    assert template["clock"].step == 0
    # The fix it names: the leaf left out of the template, with partial=True.
    del template["seen"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", WorldSizeWarning)
        _, report = manager.restore(template, step=40, partial=True)
    assert "seen" in report.unexpected
    assert template["clock"].step == 40


def test_two_ranks_to_one_without_a_template_lists_every_rank(runs):
    """Without a template each per-rank leaf comes back as every old rank's value."""
    tree = CheckpointManager(runs["dir"], read_only=True).restore(step=40)
    assert [s.tolist() for s in tree["seen"]] == [r["seen"] for r in runs["resumed"]]
    assert all(isinstance(g, torch.Generator) for g in tree["data"])
    assert len(tree["rng"]) == 2


def test_a_damaged_rank_file_is_named(runs, tmp_path, monkeypatch):
    """A flipped byte in rank 1's file fails verify and rank 1's restore, naming the file."""
    import shutil

    copy = tmp_path / "copy"
    shutil.copytree(runs["dir"], copy)
    path = copy / step_name(40) / "per_rank" / "rank-00001.safetensors"
    data = bytearray(path.read_bytes())
    data[-1] ^= 0xFF
    path.write_bytes(bytes(data))
    manager = CheckpointManager(copy, read_only=True)
    with pytest.raises(CorruptCheckpointError, match=r"per_rank/rank-00001\.safetensors"):
        manager.verify(40)
    with pytest.raises(CorruptCheckpointError, match=r"per_rank/rank-00001\.safetensors"):
        verify_checkpoint(LocalStorage(str(copy)), step_name(40))
    monkeypatch.setattr(manager._reading, "_ranks", lambda: (1, 2))
    with pytest.raises(CorruptCheckpointError, match=r"per_rank/rank-00001\.safetensors"):
        manager.restore(_template(), step=40, partial=True)


def test_a_malformed_per_rank_section_is_corruption(runs, tmp_path):
    """A per-rank section whose ranks do not match its world size (state.json rewritten
    and resealed) is named as corruption."""
    import shutil

    copy = tmp_path / "copy"
    shutil.copytree(runs["dir"], copy)
    checkpoint = copy / step_name(40)
    doc = json.loads((checkpoint / "state.json").read_text())
    doc["per_rank"]["world_size"] = 3
    reseal(checkpoint, state=json.dumps(doc).encode())
    manager = CheckpointManager(copy, read_only=True)
    with pytest.raises(CorruptCheckpointError, match="malformed per-rank section"):
        manager.restore(_template(), step=40, partial=True)


def test_ranks_with_other_per_rank_leaves_fail_the_save(runs):
    """Rank 1 with a per-rank leaf the writer lacks fails the save on both ranks, as does
    rank 1 with per-rank leaves where the writer has none; nothing is committed."""
    for rank in runs["resumed"]:
        more, alone, steps = rank["mismatch"]
        assert "rank 1's per-rank leaves ['extra', 'mine'] are not the writer's ['mine']" in more
        assert "rank(s) [1] saved per-rank leaves where the writer (rank 0) has none" in alone
        assert "nothing was committed" in more
        assert "nothing was committed" in alone
        assert steps == "[]"


@pytest.mark.parametrize("rank", [0, 1])
def test_same_world_size_without_a_template_gives_the_rank_its_own(runs, rank, monkeypatch):
    """Without a template, rank r of 2 gets rank r's per-rank leaves as values."""
    from rank_workers import digest

    manager = CheckpointManager(runs["dir"], read_only=True)
    monkeypatch.setattr(manager._reading, "_ranks", lambda: (rank, 2))
    tree = manager.restore(step=40)
    assert tree["seen"].tolist() == runs["resumed"][rank]["seen"]
    assert isinstance(tree["data"], torch.Generator)
    assert digest(tree["data"].get_state().numpy()) == runs["resumed"][rank]["data"]


def test_a_malformed_per_rank_entry_is_corruption(runs, tmp_path):
    """A rank's entry naming a file outside its place (state.json rewritten and resealed)
    is corruption, named before any file is opened."""
    import shutil

    copy = tmp_path / "copy"
    shutil.copytree(runs["dir"], copy)
    checkpoint = copy / step_name(40)
    doc = json.loads((checkpoint / "state.json").read_text())
    doc["per_rank"]["ranks"][1]["file"] = "../../elsewhere.safetensors"
    reseal(checkpoint, state=json.dumps(doc).encode())
    manager = CheckpointManager(copy, read_only=True)
    with pytest.raises(CorruptCheckpointError, match="malformed per-rank entry of rank 1"):
        manager.verify(40)


@pytest.mark.parametrize("rank", [0, 1])
def test_an_async_save_keeps_each_rank_value_at_the_save(runs, rank, monkeypatch):
    """With async_save, each rank's per-rank array is copied before save returns: changed
    right after, the checkpoint still holds the value at the save, the rank's own."""
    manager = CheckpointManager(runs["out"] / "async", read_only=True)
    monkeypatch.setattr(manager._reading, "_ranks", lambda: (rank, 2))
    template = {"w": np.zeros(2), "seen": PerRank(np.zeros(3))}
    manager.restore(template)
    assert template["seen"].value.tolist() == runs["resumed"][rank]["async"] == [10.0 * rank] * 3


def test_two_ranks_to_three_give_each_new_rank_its_own_stream(runs, monkeypatch):
    """Restored as each rank of 3 (2 -> 3): every new rank's generators are re-seeded to a
    stream of its own, none an old rank's, the same on a second restore."""
    from rank_workers import digest

    def restore_as(rank):
        manager = CheckpointManager(runs["dir"], read_only=True)
        monkeypatch.setattr(manager._reading, "_ranks", lambda: (rank, 3))
        template = {"clock": Clock(), "data": torch.Generator(), "noise": np.random.default_rng()}
        with pytest.warns(WorldSizeWarning, match=r"restored on 3 ranks \(2 -> 3\)"):
            manager.restore(template, step=40, partial=True)
        return digest(template["data"].get_state().numpy()), template["noise"].random()

    streams = [restore_as(rank) for rank in range(3)]
    assert len({s[0] for s in streams}) == len({s[1] for s in streams}) == 3
    assert restore_as(2) == streams[2]
    assert not {s[0] for s in streams} & {r["data"] for r in runs["resumed"]}


def test_a_read_only_distributed_manager_restores_the_rank_own(runs):
    """A read-only manager with distributed=True (an evaluator on every rank) restores
    each rank's own per-rank leaves: the group says which rank it is."""
    for rank in runs["resumed"]:
        assert rank["read_only"] == rank["data"]
    assert runs["resumed"][0]["read_only"] != runs["resumed"][1]["read_only"]


@pytest.fixture(scope="module")
def run_runs(tmp_path_factory):
    """The same loop through Run: uninterrupted, killed after a random update, resumed."""
    out = tmp_path_factory.mktemp("per-rank-run")
    kill = random.Random().randint(11, 29)
    full = spawn("run-full", 2, out, module="rank_workers")
    spawn(f"run-kill-{kill}", 2, out, killed=(0, 1), module="rank_workers")
    return {
        "full": full,
        "resumed": spawn("run-resume", 2, out, module="rank_workers"),
        "kill": kill,
    }


def test_the_loop_through_run_resumes_bit_exact_on_every_rank(run_runs):
    """Through Run (which opens its manager distributed on several ranks), each rank's own
    RNG, generators and marked sum resume bit for bit, as do the shared parameters."""
    kill = run_runs["kill"]
    for rank in (0, 1):
        full, resumed = run_runs["full"][rank], run_runs["resumed"][rank]
        assert resumed["restored"] == kill // 10 * 10, f"killed after update {kill}"
        assert resumed["step"] == full["step"] == 30
        for key in ("params", "opt", "torch_rng", "python_rng", "numpy_rng", "data", "noise"):
            assert resumed[key] == full[key], f"rank {rank}: {key} (killed after {kill})"
        assert resumed["seen"] == full["seen"]
    assert run_runs["full"][0]["data"] != run_runs["full"][1]["data"]
