"""One rank of the distributed checkpoint tests, run by tests/checkpoint/test_distributed.py.

Usage: python dist_worker.py MODE RANK WORLD PORT DIRECTORY [STEPS]
   or: python dist_worker.py zygote

The zygote imports torch once and forks a process per rank on request (one JSON line per
rank on stdin: argv, env, output file; it answers "PID <pid>" and, when a rank ends,
"EXIT <pid> <code>"), so a test that starts ten ranks pays for one torch import, not ten.

Modes:
  fsdp-save      FSDP2 model + Adam, saves step 1, then step 2 with a second (async) manager;
                 writes ref-<step>.safetensors
                 with the full tensors (model and optimizer state) for the test to compare.
  fsdp-restore   FSDP2 model + a fresh Adam on WORLD ranks restores the newest checkpoint and
                 compares the full tensors with ref-2.safetensors; prints RESTORED-OK.
  kill-save      saves step 1 (async with ASYNC=1), then at step 2 rank KILL_RANK (env) does
                 FAULT (env): "kill" SIGKILLs itself once its shards are written, "raise"
                 fails writing them, "exists" (the writer) saves step 1 again; the others
                 print the error.
  ddp-train      DDP training to STEPS, saving every 3 steps, resuming from the newest
                 checkpoint; rank 0 writes final.st at the end.
  late-reader    saves step 1 with rank 1 late to look for the outcome (1 s), and rank 0
                 (the Store's host) exits at once after its save; prints SAVED.
  logged-save    each rank opens its own SummaryWriter (one that does not flush by itself),
                 logs steps 1..3, saves step 3, then prints LOGGED and the steps its JSONL
                 holds on disk.
"""

from __future__ import annotations

import datetime
import json
import os
import select
import signal
import sys
import time

import torch
import torch.distributed as dist
from safetensors.torch import load_file, save_file

from globalstep import CheckpointError, Clock
from globalstep.checkpoint import CheckpointManager
from globalstep.checkpoint._ranks import coordinated as gs_dist

MODE = PORT = DIRECTORY = ""
RANK_ = WORLD_ = 0
TIMEOUT = 20.0


def init() -> None:
    dist.init_process_group(
        "gloo",
        init_method=f"tcp://127.0.0.1:{PORT}",
        rank=RANK_,
        world_size=WORLD_,
        timeout=datetime.timedelta(seconds=TIMEOUT),
    )


def fsdp_model() -> tuple[torch.nn.Module, torch.optim.Optimizer]:
    from torch.distributed.fsdp import fully_shard

    torch.manual_seed(0)
    # 3 output rows: uneven shards (and an empty one on 4 ranks).
    model = torch.nn.Sequential(torch.nn.Linear(6, 16), torch.nn.ReLU(), torch.nn.Linear(16, 3))
    fully_shard(model)
    return model, torch.optim.Adam(model.parameters(), lr=0.01)


def train_step(model: torch.nn.Module, optimizer: torch.optim.Optimizer, step: int) -> None:
    generator = torch.Generator().manual_seed(1000 * step + RANK_)
    x = torch.randn(5, 6, generator=generator)
    optimizer.zero_grad()
    model(x).pow(2).mean().backward()
    optimizer.step()


def full_state(model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> dict[str, torch.Tensor]:
    out = {f"model/{k}": v.full_tensor().contiguous() for k, v in model.state_dict().items()}
    for i, param in enumerate(model.parameters()):
        for name, value in optimizer.state[param].items():
            if hasattr(value, "full_tensor"):
                out[f"optim/{i}/{name}"] = value.full_tensor().contiguous()
    return out


def fsdp_save() -> None:
    model, optimizer = fsdp_model()
    clock = Clock()
    options = gs_dist.DistributedOptions(timeout_seconds=TIMEOUT)
    for async_save in (False, True):  # a second manager of the same directory, async
        with CheckpointManager(DIRECTORY, distributed=options, async_save=async_save) as manager:
            train_step(model, optimizer, clock.step)
            clock.tick()
            manager.save(clock, {"model": model, "optim": optimizer, "clock": clock})
            full = full_state(model, optimizer)
            if RANK_ == 0:
                save_file(full, os.path.join(os.path.dirname(DIRECTORY), f"ref-{clock.step}.st"))
    print("SAVED", flush=True)


def fsdp_restore() -> None:
    model, optimizer = fsdp_model()
    clock = Clock()
    with CheckpointManager(DIRECTORY, distributed=True) as manager:
        manager.restore({"model": model, "optim": optimizer, "clock": clock})
    reference = load_file(os.path.join(os.path.dirname(DIRECTORY), "ref-2.st"))
    full = full_state(model, optimizer)
    assert sorted(full) == sorted(reference), (sorted(full), sorted(reference))
    for key, value in reference.items():
        assert torch.equal(full[key], value), key
    assert clock.step == 2
    train_step(model, optimizer, clock.step)  # the restored optimizer state steps
    # A plain module on every rank of a distributed manager reads each tensor whole.
    plain = torch.nn.Sequential(torch.nn.Linear(6, 16), torch.nn.ReLU(), torch.nn.Linear(16, 3))
    with CheckpointManager(DIRECTORY, distributed=True) as manager:
        manager.restore({"model": plain, "optim": None, "clock": Clock()}, partial=True)
    for key, value in plain.state_dict().items():
        assert torch.equal(value, reference[f"model/{key}"]), key
    print("RESTORED-OK", flush=True)


def kill_save() -> None:
    model, optimizer = fsdp_model()
    clock = Clock()
    victim = int(os.environ["KILL_RANK"])
    fault = os.environ.get("FAULT", "kill")
    original = gs_dist.write_chunks

    def write_then_die(*args, **kwargs):  # type: ignore[no-untyped-def]
        mine = clock.step == 2 and victim == RANK_
        if mine and fault == "raise":  # the disk is full when this rank opens its file

            def full(path: str) -> None:
                raise OSError(28, "No space left on device (injected)", path)

            args[0].open_writer = full
        report = original(*args, **kwargs)
        if mine and fault == "kill":
            os.kill(os.getpid(), signal.SIGKILL)
        return report

    gs_dist.write_chunks = write_then_die
    options = gs_dist.DistributedOptions(timeout_seconds=TIMEOUT)
    async_save = os.environ.get("ASYNC") == "1"
    with CheckpointManager(DIRECTORY, distributed=options, async_save=async_save) as manager:
        for _ in range(2):
            train_step(model, optimizer, clock.step)
            clock.tick()
            started = time.monotonic()
            step = 1 if clock.step == 2 and fault == "exists" else clock.step
            try:
                manager.save(step, {"model": model, "optim": optimizer, "clock": clock})
                manager.wait()  # an async save's error surfaces here
            except CheckpointError as err:  # DistributedCheckpointError on the others
                ranks = getattr(err, "ranks", getattr(err.__cause__, "ranks", None))
                print(f"ERROR after {time.monotonic() - started:.1f}s ranks={ranks}: {err}")
                sys.stdout.flush()
                if fault != "kill":
                    dist.barrier()  # rank 0 hosts the Store: it outlives the others' reads
                os._exit(3)
            if RANK_ == 0 and clock.step == 1:
                full = full_state(model, optimizer)
                save_file(full, os.path.join(os.path.dirname(DIRECTORY), "ref-1.st"))
            elif clock.step == 1:
                full_state(model, optimizer)  # full_tensor() is collective
    print("NO-ERROR", flush=True)


def late_reader() -> None:
    model, optimizer = fsdp_model()
    original = gs_dist.SaveRound._wait_for

    def late(self, names, since):  # type: ignore[no-untyped-def]
        if names == ["outcome"]:
            time.sleep(1.0)  # the writer has committed and gone on by now
        return original(self, names, since)

    gs_dist.SaveRound._wait_for = late
    options = gs_dist.DistributedOptions(timeout_seconds=TIMEOUT)
    with CheckpointManager(DIRECTORY, distributed=options) as manager:
        train_step(model, optimizer, 0)
        manager.save(1, {"model": model, "optim": optimizer})
    print("SAVED", flush=True)
    if RANK_ == 0:
        os._exit(0)  # no barrier, no destroy_process_group: the Store goes with it


def logged_save() -> None:
    from globalstep.summary import SummaryWriter, read_run

    logdir = os.path.join(DIRECTORY, f"logs-rank{RANK_}")
    clock = Clock()
    writer = SummaryWriter(logdir, clock=clock, formats=("jsonl",), flush_seconds=3600)
    options = gs_dist.DistributedOptions(timeout_seconds=TIMEOUT)
    with CheckpointManager(os.path.join(DIRECTORY, "ckpt"), distributed=options) as manager:
        for _ in range(3):
            clock.tick()
            writer.scalars({"loss": float(clock.step)})
        manager.save(clock, {"clock": clock, "w": torch.ones(2)})
        steps = [p.step for p in read_run(logdir).scalars.get("loss", [])]
    print(f"LOGGED {steps}", flush=True)
    writer.close()


def ddp_train() -> None:
    steps = int(sys.argv[6])
    torch.manual_seed(0)
    inner = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1))
    model = torch.nn.parallel.DistributedDataParallel(inner)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    clock = Clock()
    tree = {"model": model, "optim": optimizer, "clock": clock}
    options = gs_dist.DistributedOptions(timeout_seconds=TIMEOUT)
    with CheckpointManager(DIRECTORY, distributed=options, max_to_keep=2, save_every=3) as manager:
        if manager.latest_step() is not None:
            manager.restore(tree)
        print(f"START {clock.step}", flush=True)
        while clock.step < steps:
            generator = torch.Generator().manual_seed(7919 * clock.step + RANK_)
            x = torch.randn(16, 8, generator=generator)
            y = x.sum(dim=1, keepdim=True).sin()
            optimizer.zero_grad()
            torch.nn.functional.mse_loss(model(x), y).backward()
            optimizer.step()
            clock.tick()
            time.sleep(0.01)
            if manager.maybe_save(clock, tree):  # the resumed trigger agrees on every rank
                print(f"SAVED {clock.step}", flush=True)
    if RANK_ == 0:
        final = {k: v.contiguous() for k, v in inner.state_dict().items()}
        for i, param in enumerate(inner.parameters()):
            final[f"momentum/{i}"] = optimizer.state[param]["momentum_buffer"].contiguous()
        save_file(final, os.path.join(DIRECTORY, "final.st"))
    print("DONE", flush=True)


def main(argv: list[str]) -> None:
    global MODE, PORT, DIRECTORY, RANK_, WORLD_, TIMEOUT
    sys.argv = [__file__, *argv]
    MODE, rank, world, PORT, DIRECTORY = argv[:5]
    RANK_, WORLD_ = int(rank), int(world)
    TIMEOUT = float(os.environ.get("GS_TIMEOUT", "20"))
    init()
    {
        "fsdp-save": fsdp_save,
        "fsdp-restore": fsdp_restore,
        "kill-save": kill_save,
        "late-reader": late_reader,
        "logged-save": logged_save,
    }.get(MODE, ddp_train)()
    dist.destroy_process_group()


def zygote() -> None:
    """Forks a rank per request line; reports each rank's pid and exit code."""
    import torch.distributed.checkpoint
    import torch.distributed.fsdp
    import torch.distributed.tensor  # noqa: F401

    print("READY", flush=True)
    live: set[int] = set()
    stdin_open = True
    while stdin_open or live:
        if stdin_open and select.select([sys.stdin], [], [], 0.01)[0]:
            line = sys.stdin.readline()
            if not line:
                stdin_open = False
                for pid in live:  # the test is gone: take the ranks with it
                    os.kill(pid, signal.SIGKILL)
                continue
            request = json.loads(line)
            pid = os.fork()
            if pid == 0:
                code = 0
                try:
                    fd = os.open(request["out"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
                    os.dup2(fd, 1)
                    os.dup2(fd, 2)
                    os.environ.update(request["env"])
                    main(request["argv"])
                except SystemExit as err:
                    code = err.code if isinstance(err.code, int) else 1
                except BaseException:
                    import traceback

                    traceback.print_exc()
                    code = 1
                sys.stdout.flush()
                sys.stderr.flush()
                os._exit(code)
            live.add(pid)
            print(f"PID {pid}", flush=True)
        for pid in list(live):
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                live.discard(pid)
                print(f"EXIT {pid} {os.waitstatus_to_exitcode(status)}", flush=True)
        if not stdin_open and live:
            time.sleep(0.01)


if __name__ == "__main__":
    if sys.argv[1:] == ["zygote"]:
        zygote()
    else:
        main(sys.argv[1:])
