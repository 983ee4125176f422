"""Distributed checkpoints: sharded saves that commit all-or-nothing, restored at any world size."""

from __future__ import annotations

import json
import os
import queue
import random
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
dist = pytest.importorskip("torch.distributed")

from globalstep import (  # noqa: E402
    CheckpointError,
    Clock,
    ConfigError,
    CorruptCheckpointError,
)
from globalstep.checkpoint import CheckpointManager, DistributedOptions  # noqa: E402

WORKER = Path(__file__).with_name("dist_worker.py")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class _Zygote:
    """Starts ranks by forking one process that imported torch once (see dist_worker.py)."""

    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.proc = subprocess.Popen(
            [sys.executable, str(WORKER), "zygote"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            bufsize=1,
        )
        self.pids: queue.Queue[int] = queue.Queue()
        self.codes: dict[int, int] = {}
        self.changed = threading.Condition()
        self.ready = threading.Event()
        self.count = 0
        threading.Thread(target=self._read, daemon=True).start()
        if not self.ready.wait(180):
            self.proc.kill()
            raise AssertionError("the zygote did not start")

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            word, *rest = line.split()
            if word == "READY":
                self.ready.set()
            elif word == "PID":
                self.pids.put(int(rest[0]))
            elif word == "EXIT":
                with self.changed:
                    self.codes[int(rest[0])] = int(rest[1])
                    self.changed.notify_all()

    def launch(self, mode: str, world: int, directory: Path, *extra: str, env=None) -> list:
        """Starts ``world`` ranks; returns [(pid, output file)]."""
        port = str(_free_port())
        ranks = []
        for r in range(world):
            self.count += 1
            out = self.tmp / f"{mode}-{self.count}-rank{r}.log"
            request = {
                "argv": [mode, str(r), str(world), port, str(directory), *extra],
                "env": env or {},
                "out": str(out),
            }
            assert self.proc.stdin is not None
            self.proc.stdin.write(json.dumps(request) + "\n")
            self.proc.stdin.flush()
            ranks.append((self.pids.get(timeout=60), out))
        return ranks

    def finish(self, ranks: list, timeout: float = 60.0) -> list[tuple[int, str]]:
        """Waits for the ranks (SIGKILLing all of them past ``timeout``); (code, output)."""
        deadline = time.monotonic() + timeout
        with self.changed:
            while not all(pid in self.codes for pid, _ in ranks):
                left = deadline - time.monotonic()
                if left <= 0:
                    for pid, _ in ranks:
                        if pid not in self.codes:
                            os.kill(pid, signal.SIGKILL)
                    deadline = time.monotonic() + 30
                self.changed.wait(max(0.01, min(left, 1.0)))
        return [(self.codes[pid], out.read_text()) for pid, out in ranks]

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        if self.proc.stdout is not None:
            self.proc.stdout.close()


@pytest.fixture(scope="module")
def zygote(tmp_path_factory):
    """A process that forks ranks with torch already imported."""
    process = _Zygote(tmp_path_factory.mktemp("ranks"))
    yield process
    process.close()


@pytest.fixture
def one_rank():
    """A torch.distributed group of one rank in this process (gloo, in-memory store)."""
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    yield
    dist.destroy_process_group()


def _fsdp_model():
    from torch.distributed.fsdp import fully_shard

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 6), torch.nn.Linear(6, 2))
    fully_shard(model)
    return model


# ----------------------------------------------------------------- options and misuse


def test_options_refuse_a_negative_writer_rank():
    """A negative writer rank is refused, naming the parameter."""
    with pytest.raises(ConfigError, match="`writer_rank` must be an int >= 0; got writer_rank=-1"):
        DistributedOptions(writer_rank=-1)


def test_options_refuse_a_zero_timeout():
    """A timeout that is not a positive number of seconds is refused."""
    with pytest.raises(ConfigError, match="`timeout_seconds` must be a finite number"):
        DistributedOptions(timeout_seconds=0)


def test_distributed_refuses_anything_but_bool_or_options(tmp_path):
    """``distributed`` takes a bool or DistributedOptions, nothing else."""
    with pytest.raises(ConfigError, match="`distributed` must be a bool or a DistributedOptions"):
        CheckpointManager(tmp_path, distributed="yes")


def test_distributed_needs_an_initialised_group(tmp_path):
    """Without torch.distributed initialised, a distributed manager says what to call."""
    assert not dist.is_initialized()
    with pytest.raises(ConfigError, match="init_process_group"):
        CheckpointManager(tmp_path, distributed=True)


def test_writer_rank_outside_the_group_is_refused(tmp_path, one_rank):
    """A writer rank beyond the group's size is refused, naming the valid ranks."""
    with pytest.raises(ConfigError, match=r"must be a rank of the group \(0..0\)"):
        CheckpointManager(tmp_path, distributed=DistributedOptions(writer_rank=1))


def test_plain_manager_refuses_sharded_state(tmp_path, one_rank):
    """A manager without distributed=True refuses DTensors, saying what to change."""
    model = _fsdp_model()
    with (
        CheckpointManager(tmp_path) as manager,
        pytest.raises(ConfigError, match="distributed=True"),
    ):
        manager.save(1, {"model": model})
    assert CheckpointManager(tmp_path, read_only=True).steps() == []


# ----------------------------------------------------------------- one rank, in process


def test_sharded_checkpoint_restores_into_a_plain_module(tmp_path, one_rank):
    """A sharded checkpoint restores into a plain module with the same values, no DTensor."""
    model = _fsdp_model()
    with CheckpointManager(tmp_path, distributed=True) as manager:
        manager.save(3, {"model": model})
    expected = {k: v.full_tensor() for k, v in model.state_dict().items()}
    plain = torch.nn.Sequential(torch.nn.Linear(4, 6), torch.nn.Linear(6, 2))
    CheckpointManager(tmp_path, read_only=True).restore({"model": plain})
    assert all(torch.equal(plain.state_dict()[k], v) for k, v in expected.items())


def test_sharded_checkpoint_restores_without_template(tmp_path, one_rank):
    """Without a template a sharded tensor comes back whole, as a plain tensor."""
    model = _fsdp_model()
    with CheckpointManager(tmp_path, distributed=True) as manager:
        manager.save(3, {"model": model})
    tree = CheckpointManager(tmp_path, read_only=True).restore()
    weight = tree["model"]["0.weight"]
    assert type(weight) is torch.Tensor
    assert torch.equal(weight, model.state_dict()["0.weight"].full_tensor())


def test_sharded_chunk_damage_is_named(tmp_path, one_rank):
    """A flipped byte in a rank's chunk file fails verify() naming that file."""
    model = _fsdp_model()
    with CheckpointManager(tmp_path, distributed=True) as manager:
        manager.save(3, {"model": model})
    chunk = tmp_path / "step-000000000003" / "sharded" / "rank-00000.bin"
    data = bytearray(chunk.read_bytes())
    data[5] ^= 0xFF
    chunk.write_bytes(bytes(data))
    reader = CheckpointManager(tmp_path, read_only=True)
    with pytest.raises(CorruptCheckpointError, match=r"rank-00000\.bin fails its checksum"):
        reader.verify()


def test_sharded_checkpoint_holds_no_pickle(tmp_path, one_rank):
    """A sharded checkpoint holds no DCP .metadata pickle: only JSON, safetensors and raw chunks."""
    model = _fsdp_model()
    with CheckpointManager(tmp_path, distributed=True) as manager:
        manager.save(3, {"model": model})
    names = sorted(p.name for p in (tmp_path / "step-000000000003").rglob("*") if p.is_file())
    assert names == ["COMMITTED", "arrays.safetensors", "rank-00000.bin", "state.json"]


def test_hostile_chunk_file_name_is_refused(tmp_path, one_rank):
    """A chunk naming a file outside the checkpoint (state.json rewritten and resealed) is
    refused as corrupt before anything is read."""
    from ckpt_helpers import reseal

    model = _fsdp_model()
    with CheckpointManager(tmp_path, distributed=True) as manager:
        manager.save(3, {"model": model})
    checkpoint = tmp_path / "step-000000000003"
    doc = json.loads((checkpoint / "state.json").read_bytes())
    doc["sharded"]["tensors"]["model/0.weight"]["chunks"][0]["file"] = "../../../etc/passwd"
    reseal(checkpoint, state=json.dumps(doc).encode())
    with pytest.raises(CorruptCheckpointError, match="malformed chunk"):
        CheckpointManager(tmp_path, read_only=True).restore()


def test_ckpt_show_lists_sharded_tensors(tmp_path, one_rank, capsys):
    """``globalstep ckpt show`` lists a sharded tensor with its global shape."""
    from globalstep._cli import main

    model = _fsdp_model()
    with CheckpointManager(tmp_path, distributed=True) as manager:
        manager.save(3, {"model": model})
    assert main(["ckpt", "show", str(tmp_path)]) == 0
    assert "  model/0.weight: float32 (6, 4) sharded" in capsys.readouterr().out


def test_summaries_count_the_sharded_bytes(tmp_path, one_rank):
    """A checkpoint's size in ``ckpt ls`` includes its ranks' chunk files."""
    model = _fsdp_model()
    with CheckpointManager(tmp_path, distributed=True) as manager:
        manager.save(3, {"model": model})
        hinted = manager.summaries()[0].size_bytes  # from the writer's summary index
    (tmp_path / ".summaries.jsonl").unlink()
    read = CheckpointManager(tmp_path, read_only=True).summaries()[0].size_bytes
    chunks = (tmp_path / "step-000000000003" / "sharded" / "rank-00000.bin").stat().st_size
    arrays = (tmp_path / "step-000000000003" / "arrays.safetensors").stat().st_size
    assert hinted == read == chunks + arrays


def test_partial_dtensor_is_refused(tmp_path, one_rank):
    """A DTensor pending a reduction (Partial placement) is refused, saying what to do."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import DTensor, Partial

    mesh = init_device_mesh("cpu", (1,))
    pending = DTensor.from_local(torch.ones(2), mesh, [Partial()])
    with (
        CheckpointManager(tmp_path, distributed=True) as manager,
        pytest.raises(ConfigError, match="must be sharded or replicated, not partial"),
    ):
        manager.save(1, {"grad": pending})
    assert manager.steps() == []


def test_writer_failure_is_an_error_on_the_writer(tmp_path, one_rank):
    """A save of an existing step fails on the writer as before, and leaves the old one."""
    model = _fsdp_model()
    with CheckpointManager(tmp_path, distributed=True) as manager:
        manager.save(3, {"model": model})
        with pytest.raises(CheckpointError, match="exists"):
            manager.save(3, {"model": model})
        assert manager.steps() == [3]


# ----------------------------------------------------------------- several processes


@pytest.mark.slow
def test_four_rank_checkpoint_restores_on_two_and_on_one(tmp_path, zygote):
    """A checkpoint saved by 4 FSDP2 ranks (async) restores on 2 ranks and in one plain process."""
    from safetensors.torch import load_file

    directory = tmp_path / "ckpt"
    saved = zygote.finish(zygote.launch("fsdp-save", 4, directory))
    assert all(code == 0 for code, _ in saved), saved
    restored = zygote.finish(zygote.launch("fsdp-restore", 2, directory))
    assert all(code == 0 and "RESTORED-OK" in text for code, text in restored), restored
    reference = load_file(tmp_path / "ref-2.st")
    plain = torch.nn.Sequential(torch.nn.Linear(6, 16), torch.nn.ReLU(), torch.nn.Linear(16, 3))
    clock = Clock()
    CheckpointManager(directory, read_only=True).restore(
        {"model": plain, "clock": clock, "optim": None}, partial=True
    )
    assert clock.step == 2
    for key, value in plain.state_dict().items():
        assert torch.equal(value, reference[f"model/{key}"]), key


@pytest.mark.slow
@pytest.mark.parametrize(
    ("fault", "victim", "asynchronous", "expected"),
    [
        ("raise", 1, "0", "rank 1 failed: CheckpointError: writing rank 1's shards failed"),
        ("raise", 1, "1", "rank 1 failed: CheckpointError: writing rank 1's shards failed"),
        ("exists", 0, "0", "the writer (rank 0) failed: CheckpointExistsError"),
    ],
)
def test_a_failing_rank_fails_the_save_everywhere_at_once(
    tmp_path, zygote, fault, victim, asynchronous, expected
):
    """A rank whose part of a save (sync or async) raises fails the save on the others at
    once (well within the timeout), naming it; nothing is committed."""
    directory = tmp_path / "ckpt"
    env = {"KILL_RANK": str(victim), "FAULT": fault, "GS_TIMEOUT": "30", "ASYNC": asynchronous}
    results = zygote.finish(zygote.launch("kill-save", 2, directory, env=env))
    assert [code for code, _ in results] == [3, 3], results
    survivor = results[1 - victim][1]
    assert expected in survivor, survivor
    assert f"ranks=[{victim}]" in survivor, survivor
    assert float(survivor.split("ERROR after ")[1].split("s ")[0]) < 15, survivor
    assert CheckpointManager(directory, read_only=True).steps() == [1]


def test_store_host_waits_for_a_late_rank_before_leaving(tmp_path, zygote):
    """Rank 0 hosts the Store and leaves right after its save; rank 1, slow to look for
    the outcome, still reads it: the save is committed on both (it failed with "Store
    stopped answering" when rank 0 did not wait)."""
    results = zygote.finish(zygote.launch("late-reader", 2, tmp_path / "ckpt"))
    assert all(code == 0 and "SAVED" in text for code, text in results), results
    assert CheckpointManager(tmp_path / "ckpt", read_only=True).steps() == [1]


def test_every_ranks_writer_is_durable_before_the_commit(tmp_path, zygote):
    """A distributed save makes each rank's own writer's points durable first: the
    writer rank's (before it commits) and the other rank's (before its part)."""
    results = zygote.finish(zygote.launch("logged-save", 2, tmp_path))
    assert [code for code, _ in results] == [0, 0], results
    for _, text in results:
        assert "LOGGED [1, 2, 3]" in text, results
    assert CheckpointManager(tmp_path / "ckpt", read_only=True).steps() == [3]


@pytest.mark.slow
@pytest.mark.parametrize("victim", [1, 0])
def test_rank_killed_during_sharded_save_commits_nothing(tmp_path, zygote, victim):
    """A rank SIGKILLed inside a sharded save: the survivor is told (naming it) within
    seconds, long before the timeout (60 s), nothing is committed, and the previous
    checkpoint restores."""
    from safetensors.torch import load_file

    directory = tmp_path / "ckpt"
    env = {"KILL_RANK": str(victim), "GS_TIMEOUT": "60"}
    results = zygote.finish(zygote.launch("kill-save", 2, directory, env=env))
    survivor = 1 - victim
    assert results[victim][0] == -signal.SIGKILL, results
    code, text = results[survivor]
    assert code == 3, results
    assert f"ranks=[{victim}]" in text, text
    assert "nothing was committed" in text, text
    if victim == 1:  # the writer waited for rank 1's report: its heartbeat stopped
        assert "rank(s) [1] died during the save" in text, text
    else:  # rank 0 also hosted the Store: its death is seen at once
        assert "Store stopped answering" in text, text
    seconds = float(text.split("ERROR after ")[1].split("s ")[0])
    assert seconds < 30, text
    reader = CheckpointManager(directory, read_only=True)
    assert reader.steps() == [1]
    plain = torch.nn.Sequential(torch.nn.Linear(6, 16), torch.nn.ReLU(), torch.nn.Linear(16, 3))
    reader.restore({"model": plain, "optim": None, "clock": Clock()}, partial=True)
    reference = load_file(tmp_path / "ref-1.st")
    for key, value in plain.state_dict().items():
        assert torch.equal(value, reference[f"model/{key}"]), key


def _ddp_run(zygote, directory: Path, steps: int, kills: int, rng: random.Random) -> bytes:
    """Runs 2-rank DDP training to ``steps``, SIGKILLing a random rank at a random moment
    ``kills`` times (each resumed from the newest checkpoint); returns the final state."""
    saved = 0
    for _ in range(kills):
        # Past a random checkpoint still ahead, then a random moment later (mid-step or
        # mid-save): each run makes progress, and the kill lands anywhere.
        target = min(saved + 3 * rng.randint(1, 2), steps - 3)
        if target <= saved:
            break
        ranks = zygote.launch("ddp-train", 2, directory, str(steps), env={"GS_TIMEOUT": "3"})
        deadline = time.monotonic() + 60
        while f"SAVED {target}" not in ranks[0][1].read_text() and time.monotonic() < deadline:
            time.sleep(0.005)
        time.sleep(rng.uniform(0.0, 0.03))
        os.kill(ranks[rng.randrange(2)][0], signal.SIGKILL)
        zygote.finish(ranks, timeout=20)
        saved = max(CheckpointManager(directory, read_only=True).steps())
        assert saved >= target
        (directory / "final.st").unlink(missing_ok=True)
    results = zygote.finish(zygote.launch("ddp-train", 2, directory, str(steps)))
    assert all(code == 0 for code, _ in results), results
    return (directory / "final.st").read_bytes()


@pytest.mark.slow
def test_ddp_run_killed_and_resumed_is_bit_identical(tmp_path, zygote):
    """A 2-rank DDP run SIGKILLed at random moments and resumed ends bit-identical to an
    uninterrupted run."""
    seed = random.randrange(1 << 30)
    rng = random.Random(seed)
    uninterrupted = _ddp_run(zygote, tmp_path / "straight", 24, 0, rng)
    resumed = _ddp_run(zygote, tmp_path / "killed", 24, 3, rng)
    assert resumed == uninterrupted, f"seed {seed}"
