"""compat.torch schedulers through a CheckpointManager: state_dict round trips, no pickle."""

import json
import math

import pytest

from globalstep import CheckpointManager, Clock, ConfigError
from globalstep.compat import torch as gt

METRICS = [1.0, 0.9, 0.9, 0.95, 0.91, 0.9, 0.9, 0.89, 0.9, 0.9, 0.9, 0.9, 0.5, 0.5, 0.6]


def plateau() -> gt.ReduceLROnPlateau:
    return gt.ReduceLROnPlateau(base_lr=0.1, patience=1, cooldown=1, factor=0.5)


def cyclic() -> gt.CyclicLR:
    return gt.CyclicLR(base_lr=0.01, max_lr=0.1, step_size_up=3, mode="triangular2")


def test_plateau_and_cyclic_resume_through_a_checkpoint(tmp_path):
    """Saved mid-run and restored into fresh objects, ReduceLROnPlateau and CyclicLR (with
    momentum) give the rates and momenta of an uninterrupted run."""

    def run(stop_at=None):
        clock, lr_plateau, lr_cyclic = Clock(), plateau(), cyclic()
        state = {"clock": clock, "plateau": lr_plateau, "cyclic": lr_cyclic}
        manager = CheckpointManager(tmp_path / "ckpt")
        if stop_at is None and manager.latest_step() is not None:
            manager.restore(state)
        seen = []
        while clock.step < len(METRICS):
            if clock.step == stop_at:
                manager.save(clock, state)
                manager.close()
                return seen
            step = clock.step
            seen.append((lr_plateau(step), lr_cyclic(step), lr_cyclic.momentum(step)))
            lr_plateau.step(METRICS[step])
            clock.tick()
        manager.close()
        return seen

    uninterrupted = []
    _clock, lr_plateau, lr_cyclic = Clock(), plateau(), cyclic()
    for step, metric in enumerate(METRICS):
        uninterrupted.append((lr_plateau(step), lr_cyclic(step), lr_cyclic.momentum(step)))
        lr_plateau.step(metric)
    first = run(stop_at=8)
    second = run()
    assert first + second == uninterrupted
    assert len({r[0] for r in uninterrupted}) > 2  # the plateau did reduce, twice


def test_plateau_state_is_json_with_infinite_best_as_none():
    """Before any improvement the best metric is None in the state, and it survives JSON."""
    lr = gt.ReduceLROnPlateau(base_lr=0.1, mode="max")
    state = lr.state_dict()
    assert state["best"] is None
    again = gt.ReduceLROnPlateau(base_lr=0.1, mode="max")
    again.load_state_dict(json.loads(json.dumps(state, allow_nan=False)))
    assert again.best == -math.inf
    assert again == lr


@pytest.mark.parametrize(
    "state",
    [
        {"lr": 0.1},
        {"lr": 0.1, "best": None, "num_bad_epochs": -1.5, "cooldown_counter": 0, "last_epoch": 0},
        {"lr": "x", "best": None, "num_bad_epochs": 0, "cooldown_counter": 0, "last_epoch": 0},
        None,
    ],
)
def test_plateau_bad_state(state):
    """A state that is not what state_dict() wrote raises ConfigError naming the key."""
    with pytest.raises(ConfigError, match="state"):
        plateau().load_state_dict(state)


def test_pure_schedule_state_is_empty_and_refuses_other_state():
    """A pure schedule's state is {} (the clock carries its position); anything else raises."""
    s = cyclic()
    assert s.state_dict() == {}
    s.load_state_dict({})
    with pytest.raises(ConfigError, match="Restore the clock"):
        s.load_state_dict({"last_epoch": 3})
