"""Run: the values of skipped updates (``applied=False``), one point per step and tag.

A skipped attempt's scalars are logged with the update that applies after it, at its step,
under ``skipped/<tag>`` (the last attempt's value) beside ``run/skipped_updates`` (how
many); see src/globalstep/run/_skipped.py and docs/what-is-a-step.md.
"""

import csv
import io

import pytest

from globalstep import ConfigError, Run
from globalstep._cli import main
from globalstep.summary import read_run

# Attempts: update number 0 skipped 3 times (a loss scale coming down at the start), update
# 4 once, update 5 twice; the others apply at once.
SKIPS = {0: 3, 4: 1, 5: 2}
TOTAL = 8


def _train(directory, *, save_after_skip=None, stop_after_save=False):
    """Trains TOTAL steps with the attempts of SKIPS; the loss of attempt k of update n is
    n + k / 10. With ``save_after_skip=n`` it saves after update n's first skipped attempt
    and, with ``stop_after_save``, stops there (an error: no final save)."""
    import numpy as np

    attempts = np.zeros(1, np.int64)  # attempts made at update number run.step
    weights = np.zeros(1)
    with Run(
        directory,
        total_steps=TOTAL,
        progress=False,
        stream=io.StringIO(),
        writer_options={"formats": ("jsonl", "tensorboard")},
    ) as run:
        run.restore({"attempts": attempts, "weights": weights})
        while not run.done:
            update, attempt = run.step, int(attempts[0])
            if attempt < SKIPS.get(update, 0):
                attempts += 1
                run.update(loss=update + attempt / 10, lr=0.5, applied=False)
                if update == save_after_skip and attempt == 0:
                    run.save()
                    if stop_after_save:
                        raise KeyboardInterrupt
            else:
                attempts[:] = 0
                weights += 1.0
                run.update(loss=update + attempt / 10, lr=0.5)


def _curves(logs, capsys):
    """Each tag's (step, value) pairs by reader: read_run, EventAccumulator (float32) and
    `globalstep logs --csv -`."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    log = read_run(logs)
    accumulator = EventAccumulator(str(logs), size_guidance={"scalars": 0})
    accumulator.Reload()
    assert main(["logs", str(logs), "--csv", "-"]) == 0
    rows = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    # The goodput/* series hold timings (tests/checkpoint/test_ledger.py checks them).
    tags = sorted(t for t in log.scalars if not t.startswith("goodput/"))
    return {
        "jsonl": {t: [(p.step, p.value) for p in log.scalars[t]] for t in tags},
        "tensorboard": {t: [(e.step, e.value) for e in accumulator.Scalars(t)] for t in tags},
        "csv": {
            t: [(int(r["step"]), float(r["value"])) for r in rows if r["tag"] == t] for t in tags
        },
    }


EXPECTED = {
    "loss": [(1, 0.3), (2, 1.0), (3, 2.0), (4, 3.0), (5, 4.1), (6, 5.2), (7, 6.0), (8, 7.0)],
    "lr": [(s, 0.5) for s in range(1, TOTAL + 1)],
    "skipped/loss": [(1, 0.2), (5, 4.0), (6, 5.1)],
    "skipped/lr": [(1, 0.5), (5, 0.5), (6, 0.5)],
    "run/skipped_updates": [(1, 3.0), (5, 1.0), (6, 2.0)],
}


def test_skipped_updates_log_each_step_once_in_every_reader(tmp_path, capsys):
    """An uninterrupted run with skipped updates: every tag holds each step once, in the
    JSONL reader, TensorBoard's EventAccumulator and `globalstep logs --csv`; the skipped
    attempts are at the step of the update that applied after them."""
    pytest.importorskip("tensorboard")
    _train(tmp_path)
    curves = _curves(tmp_path / "logs", capsys)
    assert curves["jsonl"] == EXPECTED
    assert curves["csv"] == EXPECTED
    assert curves["tensorboard"] == {
        tag: [(s, pytest.approx(v, rel=1e-7)) for s, v in points]
        for tag, points in EXPECTED.items()
    }


@pytest.mark.parametrize("stop_after_save", [False, True])
def test_a_save_between_skipped_updates_holds_them(tmp_path, capsys, stop_after_save):
    """A checkpoint saved after a skipped attempt and before the update that applies (a
    stop signal, a time trigger, run.save()) holds that attempt: a run resumed from it logs
    the same points as an uninterrupted one."""
    pytest.importorskip("tensorboard")
    if stop_after_save:
        with pytest.raises(KeyboardInterrupt):
            _train(tmp_path, save_after_skip=5, stop_after_save=True)
        assert read_run(tmp_path / "logs").scalars["loss"][-1].step == 5
    _train(tmp_path, save_after_skip=5)
    curves = _curves(tmp_path / "logs", capsys)
    assert curves["jsonl"] == EXPECTED
    assert curves["csv"] == EXPECTED


def test_a_skipped_attempts_value_that_is_no_number_is_refused_at_once(tmp_path):
    """A skipped attempt's value is held until the update that applies: one that is not a
    number is refused by the call that gives it, naming the tag."""
    with Run(tmp_path, progress=False, stream=io.StringIO()) as run:
        run.restore({})
        with pytest.raises(ConfigError, match=r"`loss` must be a number.*got loss='high'"):
            run.update(loss="high", applied=False)
