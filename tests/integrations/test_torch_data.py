"""Tests for the data position: ResumableSampler, the data cursor, and skip_ahead."""

import io
import re

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from torch.utils.data import DataLoader, Dataset  # noqa: E402

from globalstep import (  # noqa: E402
    Clock,
    ConfigError,
)
from globalstep.compat import torch as compat  # noqa: E402
from globalstep.integrations.torch import ResumableSampler, attach, skip_ahead  # noqa: E402

# DataLoader workers are forked; where JAX was imported by an earlier test, JAX warns at the
# fork. The workers never touch JAX, so that warning does not apply here.
forks = pytest.mark.filterwarnings(r"ignore:os\.fork\(\) was called:RuntimeWarning")


class Recording(Dataset):
    """Items are their own index; the indices read are recorded (in this process)."""

    def __init__(self, n):
        self.n = n
        self.read = []

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        self.read.append(i)
        return torch.tensor([float(i)])


def _indices(batches):
    return [int(v) for b in batches for v in b.reshape(-1).tolist()]


def test_order_is_a_pure_function_of_seed_and_epoch():
    """Two samplers with one seed give one order per epoch; epochs and seeds differ."""
    a, b = ResumableSampler(50, seed=4), ResumableSampler(50, seed=4)
    assert np.array_equal(a.order(3), b.order(3))
    assert not np.array_equal(a.order(0), a.order(1))
    assert not np.array_equal(a.order(0), ResumableSampler(50, seed=5).order(0))
    assert sorted(a.order(2).tolist()) == list(range(50))


def test_no_shuffle_keeps_dataset_order():
    """shuffle=False yields the indices in order."""
    assert list(ResumableSampler(4, shuffle=False)) == [0, 1, 2, 3]


@forks
@pytest.mark.parametrize("workers", [0, 2])
def test_resume_mid_epoch_gives_the_rest_of_the_epoch(workers):
    """A sampler restored at (epoch, position) yields what an unbroken run yields from there."""
    data = Recording(30)
    full = ResumableSampler(data, seed=9)
    loader = DataLoader(data, batch_size=4, sampler=full, num_workers=workers)
    epoch0 = _indices(full.batches(loader))
    epoch1 = _indices(full.batches(loader))

    first = ResumableSampler(data, seed=9)
    loader = DataLoader(data, batch_size=4, sampler=first, num_workers=workers)
    list(first.batches(loader))
    for i, _ in enumerate(first.batches(loader)):
        if i == 2:
            break  # three batches of epoch 1 taken, then the process "dies"
    assert first.state_dict() == {"seed": 9, "epoch": 1, "position": 12}

    resumed = ResumableSampler(data, seed=9)
    resumed.load_state_dict(first.state_dict())
    loader = DataLoader(data, batch_size=4, sampler=resumed, num_workers=workers)
    assert _indices(resumed.batches(loader)) == epoch1[12:]
    assert len(epoch0) == 30
    assert resumed.state_dict() == {"seed": 9, "epoch": 2, "position": 0}


def test_resume_reads_no_skipped_item():
    """Resuming at a position reads only the items after it (no replay)."""
    data = Recording(20)
    sampler = ResumableSampler(data, seed=1)
    sampler.load_state_dict({"seed": 1, "epoch": 0, "position": 16})
    loader = DataLoader(data, batch_size=4, sampler=sampler)
    assert _indices(sampler.batches(loader)) == sampler.order(0)[16:].tolist()
    assert sorted(data.read) == sorted(sampler.order(0)[16:].tolist())


def test_drop_last_ends_the_epoch():
    """With drop_last the partial batch is not yielded and the epoch still ends."""
    data = Recording(10)
    sampler = ResumableSampler(data, shuffle=False)
    batches = list(sampler.batches(DataLoader(data, batch_size=4, sampler=sampler, drop_last=True)))
    assert len(batches) == 2
    assert sampler.state_dict() == {"seed": 0, "epoch": 1, "position": 0}


@forks
def test_creating_the_iterator_leaves_global_rng():
    """Starting an epoch through batches() does not move torch's global generator."""
    data = Recording(8)
    sampler = ResumableSampler(data)
    loader = DataLoader(data, batch_size=4, sampler=sampler, num_workers=2)
    torch.manual_seed(0)
    expected = torch.rand(3)
    torch.manual_seed(0)
    next(sampler.batches(loader))
    assert torch.equal(torch.rand(3), expected)


def test_advance_and_end_epoch():
    """advance() moves the position; end_epoch() starts the next epoch at 0."""
    s = ResumableSampler(10)
    s.advance(7)
    assert (s.epoch, s.position, len(s)) == (0, 7, 3)
    s.end_epoch()
    assert (s.epoch, s.position, len(s)) == (1, 0, 10)


def test_sampler_state_in_checkpoint(tmp_path):
    """The sampler's (seed, epoch, position) round-trips through a checkpoint."""
    from globalstep import CheckpointManager

    s = ResumableSampler(10, seed=3)
    s.end_epoch()
    s.advance(4)
    fresh = ResumableSampler(10, seed=3)
    with CheckpointManager(tmp_path) as manager:
        manager.save(1, {"data": s}, force=True)
        manager.restore({"data": fresh})
    assert fresh.state_dict() == {"seed": 3, "epoch": 1, "position": 4}


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda: ResumableSampler(iter([1, 2])), "map-style dataset"),
        (lambda: ResumableSampler(5, seed=-1), "`seed` must be an int >= 0"),
        (lambda: ResumableSampler(5, shuffle=1), "`shuffle` must be a bool"),
        (lambda: ResumableSampler(5).advance(6), "epoch's end"),
        (lambda: ResumableSampler(5).advance(-1), "`samples` must be an int >= 0"),
        (lambda: ResumableSampler(5).order(-1), "`epoch` must be an int >= 0"),
        (lambda: ResumableSampler(5).load_state_dict([1]), "must be a mapping"),
        (
            lambda: ResumableSampler(5, seed=1).load_state_dict(
                {"seed": 2, "epoch": 0, "position": 0}
            ),
            "this sampler's seed 1",
        ),
        (
            lambda: ResumableSampler(5).load_state_dict({"seed": 0, "epoch": 0, "position": 6}),
            r"len\(dataset\)=5",
        ),
        (
            lambda: ResumableSampler(5).load_state_dict({"seed": 0, "epoch": -1, "position": 0}),
            r"state\['epoch'\]",
        ),
    ],
)
def test_sampler_refuses_bad_input(call, match):
    """The sampler names the parameter and the rule it broke."""
    with pytest.raises(ConfigError, match=match):
        call()


def test_batches_refuses_a_loader_with_another_sampler():
    """batches() refuses a loader that does not draw from this sampler."""
    with pytest.raises(ConfigError, match="sampler=<this ResumableSampler>"):
        ResumableSampler(4).batches(DataLoader(list(range(4)), batch_size=2))


def test_batches_refuses_a_loader_without_batch_size():
    """batches() refuses a loader built with batch_size=None."""
    s = ResumableSampler(4)
    with pytest.raises(ConfigError, match=r"loader\.batch_size"):
        s.batches(DataLoader(list(range(4)), batch_size=None, sampler=s))


def test_overflow_keeps_clock_schedule_and_cursor_consistent():
    """An overflow update consumes its batches but moves neither the clock nor the schedule."""
    data = Recording(24)
    sampler = ResumableSampler(data, seed=2)
    loader = DataLoader(data, batch_size=4, sampler=sampler)
    w = torch.nn.Parameter(torch.ones(1))
    opt = torch.optim.AdamW([w], lr=1.0)
    clock = Clock()
    schedule = compat.ExponentialLR(base_lr=0.1, gamma=0.5)
    attach(opt, clock, schedule)
    scaler = torch.amp.GradScaler("cpu")
    rates, skipped = [], 0
    for i, x in enumerate(sampler.batches(loader)):
        opt.zero_grad()
        loss = (w * x).sum()
        if i in (1, 4):
            loss = loss * float("inf")
        scaler.scale(loss).backward()
        before = clock.step
        scaler.step(opt)
        scaler.update()
        skipped += clock.step == before
        rates.append(opt.param_groups[0]["lr"])
    assert (skipped, clock.step) == (2, 4)
    assert int(opt.state[w]["step"].item()) == clock.step
    assert rates == [schedule(k) for k in (0, 0, 1, 2, 2, 3)]
    assert sampler.state_dict() == {"seed": 2, "epoch": 1, "position": 0}
    assert scaler.get_scale() == 2.0**16 / 4


LOADER_FIX = r"Iterate the loader through the sampler: `for batch in sampler\.batches\(loader\):`"


@forks
@pytest.mark.parametrize("workers", [0, 2])
def test_loader_iterated_directly_refuses_the_save(tmp_path, workers):
    """`for batch in loader` counts nothing: the checkpoint that would hold the stale
    position (a resume then trains on those batches again) is refused, naming
    sampler.batches(loader), and none is written; whatever num_workers."""
    from globalstep import CheckpointManager

    data = Recording(40)
    sampler = ResumableSampler(data, seed=1)
    loader = DataLoader(data, batch_size=4, sampler=sampler, num_workers=workers)
    clock = Clock()

    def train(manager):
        for _ in loader:
            clock.tick()
            manager.maybe_save(clock, {"clock": clock, "data": sampler})

    with CheckpointManager(tmp_path / "ckpt", save_every=3) as manager:
        with pytest.raises(ConfigError, match=LOADER_FIX) as info:
            train(manager)
        assert manager.steps() == []
    assert clock.step == 3
    assert "`sampler` was drawn by a DataLoader iterated directly" in str(info.value)
    assert "epoch 0, position 0" in str(info.value)


@forks
@pytest.mark.parametrize(("workers", "persistent"), [(0, False), (2, False), (2, True)])
def test_loader_iterated_directly_refuses_its_next_pass(workers, persistent):
    """A second direct pass (the next epoch of `for epoch ...: for batch in loader`) would
    repeat the same epoch's order from the same position: it raises at its start."""
    data = Recording(12)
    sampler = ResumableSampler(data, seed=1)
    loader = DataLoader(
        data, batch_size=4, sampler=sampler, num_workers=workers, persistent_workers=persistent
    )
    assert len([batch for batch in loader]) == 3
    with pytest.raises(ConfigError, match="is drawn by a DataLoader iterated directly again"):
        for _ in loader:
            pass


def test_restored_sampler_iterated_directly_refuses_the_save():
    """Restored mid-epoch, then drawn by the loader directly: the next save refuses the
    restored position the loop has moved past."""
    data = Recording(12)
    first = ResumableSampler(data, seed=4)
    first.advance(8)
    resumed = ResumableSampler(data, seed=4)
    resumed.load_state_dict(first.state_dict())
    loader = DataLoader(data, batch_size=2, sampler=resumed)
    assert _indices(loader) == first.order()[8:].tolist()
    with pytest.raises(ConfigError, match=r"epoch 0, position 8, whatever the loop took") as info:
        resumed.state_dict()
    assert re.search(LOADER_FIX, str(info.value))


@forks
@pytest.mark.parametrize("workers", [0, 2])
def test_counted_uses_keep_working(workers):
    """What counts keeps working: a peek at the loader before the batches() loop, a loop
    that counts with advance() and end_epoch(), a restore after a direct draw, and reading
    the sampler itself."""
    data = Recording(12)
    sampler = ResumableSampler(data, seed=3)
    loader = DataLoader(data, batch_size=4, sampler=sampler, num_workers=workers)
    peek = next(iter(loader))  # e.g. the shapes, before training
    assert _indices([peek]) == sampler.order()[:4].tolist()
    assert _indices(sampler.batches(loader)) == sampler.order(0).tolist()
    assert sampler.state_dict() == {"seed": 3, "epoch": 1, "position": 0}
    for epoch in (1, 2):  # counting by hand
        for batch in loader:
            sampler.advance(len(batch))
            assert sampler.state_dict()["position"] > 0
        sampler.end_epoch()
        assert sampler.state_dict() == {"seed": 3, "epoch": epoch + 1, "position": 0}
    next(iter(loader))
    sampler.load_state_dict({"seed": 3, "epoch": 5, "position": 4})
    assert sampler.state_dict() == {"seed": 3, "epoch": 5, "position": 4}
    assert list(sampler) == list(sampler) == sampler.order()[4:].tolist()
    assert sampler.state_dict() == {"seed": 3, "epoch": 5, "position": 4}


def test_skip_ahead_drops_batches_and_reports():
    """skip_ahead() drops the first batches and prints its progress."""
    out = io.StringIO()
    rest = skip_ahead(range(10), 4, stream=out, every_seconds=1e-9)
    assert list(rest) == list(range(4, 10))
    assert out.getvalue().splitlines()[-1] == "skipping ahead: 4/4 batches"


def test_skip_ahead_zero_prints_nothing():
    """Skipping no batch prints nothing."""
    out = io.StringIO()
    assert list(skip_ahead([1, 2], 0, stream=out)) == [1, 2]
    assert out.getvalue() == ""


def test_skip_ahead_past_the_end_is_an_error():
    """Skipping more batches than the data has names the count."""
    with pytest.raises(ConfigError, match="end of the data"):
        skip_ahead([1, 2], 3, stream=io.StringIO())


@pytest.mark.parametrize(("count", "every", "match"), [(-1, 1.0, "count"), (1, 0, "every_seconds")])
def test_skip_ahead_refuses_bad_arguments(count, every, match):
    """skip_ahead() refuses a negative count and a non-positive interval."""
    with pytest.raises(ConfigError, match=match):
        skip_ahead([1], count, every_seconds=every)
