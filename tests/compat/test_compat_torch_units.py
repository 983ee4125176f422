"""compat.torch schedulers in the unit the user steps them in: durations and interval="epoch"."""

import numpy as np
import pytest

from globalstep import Clock, ConfigError, ConversionError, DurationError
from globalstep.compat import torch as gt

N = 7  # batches per epoch
EPOCHS = 40


def torch_per_epoch(make, epochs: int = EPOCHS, batches: int = N) -> list[float]:
    """The rate each update uses when torch's scheduler is stepped once per epoch."""
    torch = pytest.importorskip("torch")
    optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=0.1, momentum=0.9)
    scheduler = make(torch.optim.lr_scheduler, optimizer)
    used = []
    for _ in range(epochs):
        for _ in range(batches):
            used.append(optimizer.param_groups[0]["lr"])
            optimizer.step()
        scheduler.step()
    return used


def ours_per_update(schedule, epochs: int = EPOCHS, batches: int = N) -> list[float]:
    """The rate each update uses when read at clock.step, the clock ticked per update."""
    clock = Clock(steps_per_epoch=batches)
    schedule = schedule.resolve(clock)
    used = []
    for _ in range(epochs * batches):
        used.append(schedule(clock.step))
        clock.tick()
    return used


PER_EPOCH = [
    (
        "StepLR step_size='30ep'",
        lambda sch, o: sch.StepLR(o, 30, 0.1),
        gt.StepLR(base_lr=0.1, step_size="30ep", gamma=0.1),
    ),
    (
        "StepLR interval='epoch'",
        lambda sch, o: sch.StepLR(o, 3, 0.5),
        gt.StepLR(base_lr=0.1, step_size=3, gamma=0.5, interval="epoch"),
    ),
    (
        "MultiStepLR milestones in epochs",
        lambda sch, o: sch.MultiStepLR(o, [5, 12, 12, 30], 0.5),
        gt.MultiStepLR(base_lr=0.1, milestones=["5ep", "12ep", "12ep", "30ep"], gamma=0.5),
    ),
    (
        "CosineAnnealingLR interval='1ep'",
        lambda sch, o: sch.CosineAnnealingLR(o, 10, 1e-3),
        gt.CosineAnnealingLR(base_lr=0.1, T_max=10, eta_min=1e-3, interval="1ep"),
    ),
    (
        "ExponentialLR interval=N",
        lambda sch, o: sch.ExponentialLR(o, 0.9),
        gt.ExponentialLR(base_lr=0.1, gamma=0.9, interval=N),
    ),
    (
        "SequentialLR interval='epoch'",
        lambda sch, o: sch.SequentialLR(
            o, [sch.LinearLR(o, 0.1, total_iters=4), sch.CosineAnnealingLR(o, 20)], [4]
        ),
        gt.SequentialLR(
            [gt.LinearLR(0.1, 0.1, total_iters=4), gt.CosineAnnealingLR(0.1, 20)],
            milestones=[4],
            interval="epoch",
        ),
    ),
]


@pytest.mark.parametrize(("name", "make", "ours"), PER_EPOCH, ids=[c[0] for c in PER_EPOCH])
def test_per_epoch_scheduler_migrated_keeps_its_numbers(name, make, ours):
    """A torch scheduler stepped once per epoch of 7 batches equals the compat one read at
    clock.step, bit for bit, for every update of 40 epochs."""
    assert ours_per_update(ours) == torch_per_epoch(make)


def test_step_size_in_epochs_decays_per_epoch_not_per_update():
    """StepLR(step_size="30ep") decays after 30 epochs, where step_size=30 decays after 30
    updates (the silent mistake of issue 9)."""
    clock = Clock(steps_per_epoch=100)
    epochs = gt.StepLR(base_lr=0.1, step_size="30ep", gamma=0.1).resolve(clock)
    updates = gt.StepLR(base_lr=0.1, step_size=30, gamma=0.1)
    assert epochs(30) == 0.1
    assert updates(30) == pytest.approx(0.01)
    assert epochs(2999) == 0.1
    assert epochs(3000) == pytest.approx(0.01)


def test_durations_and_interval_give_the_same_numbers():
    """step_size="3ep" read per update equals step_size=3 with interval="epoch"."""
    steps = np.arange(500)
    a = gt.StepLR(base_lr=1.0, step_size="3ep", gamma=0.5).resolve(steps_per_epoch=N)
    b = gt.StepLR(base_lr=1.0, step_size=3, gamma=0.5, interval="epoch").resolve(steps_per_epoch=N)
    assert a.values(steps).tolist() == b.values(steps).tolist()


def test_resolve_records_steps():
    """resolve() turns the durations into steps in a copy; the original keeps them."""
    s = gt.OneCycleLR(max_lr=1.0, total_steps="2ep", interval="step")
    resolved = s.resolve(Clock(steps_per_epoch=5))
    assert (s.total_steps, resolved.total_steps, resolved.steps_total) == ("2ep", 10, 10)
    assert gt.TorchSchedule.from_config(s.to_config()) == s


@pytest.mark.parametrize(
    "schedule",
    [
        gt.StepLR(base_lr=0.1, step_size="3ep"),
        gt.ExponentialLR(base_lr=0.1, gamma=0.9, interval="epoch"),
        gt.SequentialLR([gt.ConstantLR(0.1), gt.StepLR(0.1, "2ep")], milestones=[5]),
    ],
)
def test_unresolved_duration_raises_naming_what_is_missing(schedule):
    """A duration in epochs, read before resolve(), raises ConversionError naming
    steps_per_epoch (for the rate and for the momentum)."""
    with pytest.raises(ConversionError, match="steps_per_epoch"):
        schedule(0)
    with pytest.raises(ConversionError, match="steps_per_epoch"):
        schedule.momentum(0)


@pytest.mark.parametrize(
    ("make", "error", "match"),
    [
        (lambda: gt.StepLR(0.1, 3, interval="week"), DurationError, "interval"),
        (lambda: gt.StepLR(0.1, 3, interval=0), ConfigError, "interval"),
        (lambda: gt.StepLR(0.1, 3, interval="30s"), ConfigError, "wall time"),
        (lambda: gt.StepLR(0.1, "0ep"), ZeroDivisionError, "step_size"),
        (lambda: gt.MultiStepLR(0.1, ["3ep", "x"]), DurationError, "milestones"),
    ],
)
def test_bad_units(make, error, match):
    """An interval or length that is not a duration, or is zero, raises naming it."""
    with pytest.raises(error, match=match):
        make()


def test_lightning_spellings():
    """interval="step" is every update and interval="epoch" is "1ep", as in Lightning."""
    per_step = gt.ExponentialLR(1.0, 0.5, interval="step")
    assert per_step.values([0, 1, 2]).tolist() == [1.0, 0.5, 0.25]
    per_epoch = gt.ExponentialLR(1.0, 0.5, interval="epoch").resolve(steps_per_epoch=2)
    assert (per_epoch.interval, per_epoch.values([0, 1, 2, 3, 4]).tolist()) == (
        2,
        [1.0, 1.0, 0.5, 0.5, 0.25],
    )


def test_momentum_follows_the_interval():
    """momentum(step) advances with the interval, as the rate does."""
    per_step = gt.OneCycleLR(max_lr=1.0, total_steps=10)
    s = gt.OneCycleLR(max_lr=1.0, total_steps=10, interval=3)
    expected = [per_step.momentum(k) for k in (0, 0, 1, 3)]
    assert [s.momentum(k) for k in (0, 2, 3, 9)] == expected
    assert expected[2] != expected[0]


def test_readme_epoch_row_runs_and_keeps_torch_numbers():
    """The README's migration row for a per-epoch StepLR runs verbatim and equals torch
    stepped once per epoch."""
    import re
    from pathlib import Path

    import globalstep

    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    row = next(line for line in readme.splitlines() if "once per epoch" in line)
    code = re.findall(r"`([^`]*)`", row.split("|")[2])[0]
    clock = Clock(steps_per_epoch=N)
    schedule = eval(code, {"globalstep": globalstep, "clock": clock})
    used = []
    for _ in range(EPOCHS * N):
        used.append(schedule(clock.step))
        clock.tick()
    assert used == torch_per_epoch(lambda sch, o: sch.StepLR(o, 30, 0.1))
