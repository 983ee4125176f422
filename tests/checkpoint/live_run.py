"""Child processes for the live-run tests: a pruning writer, readers, an evaluator, a starter.

Run as ``python live_run.py ROLE DIRECTORY ARG OUT``:

- ``writer DIR STOPFILE OUT``: saves 4 KiB checkpoints with ``max_to_keep=2`` as fast as
  it can until STOPFILE exists, prints ``ready`` after the first, and writes the committed
  steps to OUT;
- ``reader DIR STOPFILE OUT``: runs every read call in turn until STOPFILE exists, and
  writes the number of calls of each kind and every error to OUT (and, as it goes, the
  number of calls so far to OUT.progress);
- ``follower DIR STOPFILE OUT``: follows the run like an evaluator and writes the steps it
  yielded, the ones it missed, and any error to OUT;
- ``starter DIR START OUT``: in each of 30 rounds, opens a writer on ``DIR/<round>`` at a
  set wall-clock instant (from START), saves step 1 and holds the lock a moment if it got
  it; writes one line per round to OUT.
"""

import contextlib
import io
import json
import os
import sys
import time
import traceback
import warnings

import numpy as np

from globalstep import LockError
from globalstep._cli import main as cli
from globalstep.checkpoint import CheckpointManager, CheckpointWarning


def _state(step):
    return {"step": step, "w": np.full(512, float(step))}  # 4 KiB of array


def writer(directory, stopfile, out):
    """Saves as fast as it can until ``stopfile`` exists, keeping 2."""
    committed = []
    with CheckpointManager(directory, max_to_keep=2) as manager:
        step = 1
        manager.save(step, _state(step))
        committed.append(step)
        print("ready", flush=True)
        while not os.path.exists(stopfile):
            step += 1
            manager.save(step, _state(step))
            committed.append(step)
    with open(out, "w") as f:
        json.dump(committed, f)


def _check(tree):
    if tree["w"][0] != tree["step"] or tree["w"][-1] != tree["step"]:
        raise AssertionError(f"torn read: step {tree['step']} holds {tree['w'][0]}")


def _calls(manager):
    template = {"step": 0, "w": np.zeros(512)}
    quiet = io.StringIO()

    def ckpt(action):
        with contextlib.redirect_stdout(quiet), contextlib.redirect_stderr(quiet):
            status = cli(["ckpt", action, manager.directory])
        quiet.seek(0)
        quiet.truncate()
        if status != 0:
            raise AssertionError(f"ckpt {action} exited {status}")

    def open_and_read():
        with manager.open() as reader:
            if reader["w"][0] != reader.step:
                raise AssertionError("open: torn read")

    def metadata():
        if not isinstance(manager.metadata()["step"], int):
            raise AssertionError("metadata without a step")

    def latest():
        if manager.latest_step() is None:
            raise AssertionError("latest_step() is None beside a live run")

    def steps():
        if not manager.steps():
            raise AssertionError("steps() is empty beside a live run")

    return {
        "latest_step": latest,
        "steps": steps,
        "restore": lambda: _check(manager.restore()),
        "restore_template": lambda: _check(manager.restore(template)),
        "restore_skip_corrupt": lambda: _check(manager.restore(skip_corrupt=True)),
        "open": open_and_read,
        "metadata": metadata,
        "verify": manager.verify,
        "ckpt_ls": lambda: ckpt("ls"),
        "ckpt_verify": lambda: ckpt("verify"),
    }


def reader(directory, stopfile, out):
    """Runs every read call in turn until ``stopfile`` exists."""
    counts, errors = {}, []
    with CheckpointManager(directory, read_only=True) as manager:
        calls = _calls(manager)
        rounds = 0
        while not os.path.exists(stopfile):
            rounds += 1
            if rounds % 10 == 0:
                with open(f"{out}.progress.tmp", "w") as f:
                    f.write(str(sum(counts.values())))
                os.replace(f"{out}.progress.tmp", f"{out}.progress")
            for name, call in calls.items():
                # The CLI parses and imports on each call: run it every 20th round only.
                if name.startswith("ckpt") and rounds % 20:
                    continue
                # The cheap listing calls, which an evaluator polls, run 50 times a round.
                for _ in range(50 if name in ("latest_step", "steps") else 1):
                    try:
                        with warnings.catch_warnings():
                            warnings.simplefilter("error")
                            call()
                    except Exception as err:  # every error is counted and shown
                        errors.append(f"{name}: {type(err).__name__}: {err}")
                        if len(errors) < 5:
                            errors.append(traceback.format_exc())
                    counts[name] = counts.get(name, 0) + 1
    with open(out, "w") as f:
        json.dump({"counts": counts, "errors": errors}, f)


def follower(directory, stopfile, out):
    """Follows the run until it has been quiet for 3 s after ``stopfile`` appeared."""
    yielded, errors = [], []
    with CheckpointManager(directory, read_only=True) as manager:
        iterator = manager.follow(after=0, timeout_seconds=3.0, poll_seconds=0.001)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", CheckpointWarning)
            try:
                for opened in iterator:
                    with opened:
                        if opened["w"][0] != opened.step:
                            errors.append(f"step {opened.step}: torn read")
                    yielded.append(opened.step)
            except Exception as err:  # reported, and the test fails on it
                errors.append(f"{type(err).__name__}: {err}\n{traceback.format_exc()}")
    with open(out, "w") as f:
        json.dump({"yielded": yielded, "missed": iterator.missed, "errors": errors}, f)


def starter(directory, start, out):
    """For each of 30 rounds, opens a writer on ``directory/<round>`` at the round's instant.

    Round r starts at wall-clock time ``start + 0.5 r``; the writer that gets the lock saves
    step 1 and holds the lock 0.2 s. Writes one line per round to OUT.
    """
    results = []
    for attempt in range(30):
        begin = float(start) + 0.5 * attempt
        while time.time() < begin:
            pass
        try:
            manager = CheckpointManager(f"{directory}/{attempt}", max_to_keep=1)
        except LockError:
            results.append("locked out")
            continue
        with manager:
            manager.save(1, _state(1))
            time.sleep(max(0.0, begin + 0.2 - time.time()))
        results.append("got the lock")
    with open(out, "w") as f:
        f.write("\n".join(results))


if __name__ == "__main__":
    role, *arguments = sys.argv[1:]
    {"writer": writer, "reader": reader, "follower": follower, "starter": starter}[role](*arguments)
