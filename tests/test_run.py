"""Run: restore-or-initialise, the per-update path, durable curves, drift and rollback."""

import dataclasses
import io
import json
import math
import warnings

import numpy as np
import pytest

from globalstep import (
    CheckpointManager,
    Clock,
    ConfigError,
    CosineDecay,
    DivergenceError,
    ExponentialDecay,
    Rollback,
    Run,
)
from globalstep.checkpoint._files.commit import RenameCommit
from globalstep.run import ConfigDriftWarning, GeneratorState, config_differences
from globalstep.summary import read_run

ROWS, BATCH = 60, 10


def _data():
    """A small regression problem."""
    rng = np.random.default_rng(0)
    inputs = rng.normal(size=(ROWS, 3))
    return inputs, inputs @ np.array([1.0, -2.0, 0.5])


def _make_run(directory, total_steps=None, *, config=None, **kw):
    """The Run of _train's loop."""
    kw.setdefault("writer_options", {"formats": ("jsonl",)})
    return Run(
        directory,
        total_steps=total_steps,
        save_every=kw.pop("save_every", 10),
        clock=Clock(steps_per_epoch=ROWS // BATCH, batch_size=BATCH),
        schedules={"lr": CosineDecay(0.1, decay_steps=100)},
        config=config or {"model": "linear"},
        progress=False,
        stream=io.StringIO(),
        **kw,
    )


def _train(directory, *, total_steps, stop_at=None, nan_at=(), config=None, rollback=None, **kw):
    """A Run-based NumPy loop; returns (run, weights, losses by step after the update)."""
    inputs, targets = _data()
    weights, noise = np.zeros(3), np.random.default_rng(1)
    losses = {}
    run = _make_run(directory, total_steps, config=config, rollback=rollback, **kw)
    with run:
        run.restore({"weights": weights, "noise": GeneratorState(noise)})
        while not run.done:
            if stop_at is not None and run.step >= stop_at:
                raise KeyboardInterrupt
            epoch, index = divmod(run.next_batch(), ROWS // BATCH)
            order = np.random.default_rng([7, epoch]).permutation(ROWS)
            rows = order[index * BATCH : (index + 1) * BATCH]
            error = inputs[rows] @ weights - targets[rows]
            lr = run.value("lr")
            weights -= lr * (2 * inputs[rows].T @ error / BATCH + 1e-3 * noise.normal(size=3))
            loss = float(np.mean(error**2))
            if run.step in nan_at:
                nan_at = tuple(s for s in nan_at if s != run.step)
                loss = math.nan
                weights[:] = math.nan
            if run.update(loss=loss, lr=lr):
                losses[run.step] = loss
    return run, weights, losses


def test_resumed_run_matches_an_uninterrupted_one(tmp_path):
    """A run stopped at step 37 and resumed ends with the same weights, bit for bit."""
    _, straight, _ = _train(tmp_path / "a", total_steps=80)
    with pytest.raises(KeyboardInterrupt):
        _train(tmp_path / "b", total_steps=80, stop_at=37)
    run, resumed, _ = _train(tmp_path / "b", total_steps=80)
    assert run.step == 80
    assert resumed.tobytes() == straight.tobytes()


def test_curves_show_each_step_once_after_a_resume(tmp_path):
    """After a stop at 37 (checkpoint at 30) and a resume, the log has steps 1..80 once."""
    _, _, straight = _train(tmp_path / "a", total_steps=80)
    with pytest.raises(KeyboardInterrupt):
        _train(tmp_path / "b", total_steps=80, stop_at=37)
    _train(tmp_path / "b", total_steps=80)
    points = read_run(tmp_path / "b" / "logs").scalars["loss"]
    assert [p.step for p in points] == list(range(1, 81))
    assert [p.value for p in points] == [straight[s] for s in range(1, 81)]


def test_normal_end_saves_a_final_checkpoint(tmp_path):
    """Leaving the with block normally saves the step reached, off the save_every grid."""
    run, _, _ = _train(tmp_path, total_steps=25)
    with CheckpointManager(tmp_path / "checkpoints", read_only=True) as manager:
        assert manager.latest_step() == 25
    assert "finished at step 25" in run._stream.getvalue()


def test_running_again_after_the_end_says_complete(tmp_path):
    """A second run on a finished directory resumes at the end and says the run is complete."""
    _train(tmp_path, total_steps=20)
    run, _, losses = _train(tmp_path, total_steps=20)
    assert losses == {}
    assert "the run is complete (step 20 of 20)" in run._stream.getvalue()


def test_data_position_is_restored(tmp_path):
    """The data position comes back with the checkpoint, apart from the step."""
    with pytest.raises(KeyboardInterrupt):
        _train(tmp_path, total_steps=50, stop_at=23)
    with _make_run(tmp_path) as run:
        run.restore({"weights": np.zeros(3), "noise": GeneratorState(np.random.default_rng())})
        assert (run.step, run.data_position) == (20, 20)


def test_value_is_bit_equal_to_the_schedule(tmp_path):
    """run.value() equals schedule(step) bit for bit, across memo blocks."""
    schedule = ExponentialDecay(0.1, decay_steps=7, rate=0.9)
    with Run(tmp_path, schedules={"lr": schedule}, progress=False, stream=io.StringIO()) as run:
        run.restore({})
        for _ in range(600):
            assert run.value("lr") == schedule(run.step)
            run.update()


def test_plain_callables_are_schedules_too(tmp_path):
    """A schedule that is any callable of the step is called with the clock's step."""
    with Run(tmp_path, schedules={"lr": lambda s: 1.0 / (s + 1)}, progress=False) as run:
        run.restore({})
        run.update()
        assert run.value("lr") == 0.5


def test_unknown_schedule_names_the_known_ones(tmp_path):
    """run.value() of an unknown name raises KeyError listing the run's schedules."""
    with Run(tmp_path, schedules={"lr": CosineDecay(0.1, 10)}, progress=False) as run:
        run.restore({})
        with pytest.raises(KeyError, match=r"no schedule named 'wd'; this run has \['lr'\]"):
            run.value("wd")


def test_update_before_restore_is_an_error(tmp_path):
    """update() before restore() raises ConfigError saying to call restore first."""
    with Run(tmp_path, progress=False) as run, pytest.raises(ConfigError, match="restore"):
        run.update(loss=1.0)


def test_restore_twice_is_an_error(tmp_path):
    """A second restore() raises ConfigError."""
    with Run(tmp_path, progress=False, stream=io.StringIO()) as run:
        run.restore({})
        with pytest.raises(ConfigError, match="must be called once per Run"):
            run.restore({})


def test_skipped_update_does_not_tick(tmp_path):
    """update(applied=False) logs at the unchanged step and does not advance the clock."""
    with Run(tmp_path, progress=False, stream=io.StringIO()) as run:
        run.restore({})
        run.update(loss=1.0)
        run.update(applied=False, loss=2.0)
        assert run.step == 1


@pytest.mark.parametrize("async_save", [False, True])
def test_checkpoint_commits_after_the_logs_are_on_disk(tmp_path, monkeypatch, async_save):
    """At the moment a checkpoint at step S commits (on the save's own thread when it is
    async), the JSONL file holds every step <= S."""
    seen = {}
    # The writing of the checkpoint, inside CommitProtocol.commit (which makes the logs
    # durable first, for every save).
    real_write = RenameCommit._write

    def spy(protocol, save, **kwargs):
        lines = (tmp_path / "logs" / "metrics.jsonl").read_text().splitlines()
        seen[save.document["step"]] = {json.loads(line).get("step") for line in lines}
        return real_write(protocol, save, **kwargs)

    monkeypatch.setattr(RenameCommit, "_write", spy)
    _train(
        tmp_path,
        total_steps=30,
        writer_options={"formats": ("jsonl",), "flush_seconds": 60},
        checkpoint_options={"async_save": async_save},
    )
    assert sorted(seen) == [10, 20, 30]
    for step, steps in seen.items():
        assert set(range(1, step + 1)) <= steps


def test_writer_opened_before_restore_keeps_history(tmp_path):
    """A writer opened before the restore still keeps the steps before the resumed one."""
    with pytest.raises(KeyboardInterrupt):
        _train(tmp_path, total_steps=50, stop_at=27)
    weights, noise = np.zeros(3), np.random.default_rng(1)
    with _make_run(tmp_path, 30) as run:
        _ = run.writer  # opened at step 0, before the restore
        run.restore({"weights": weights, "noise": GeneratorState(noise)})
        while not run.done:
            weights += 1.0  # an update (a tree left as restored is refused at the save)
            run.update(loss=-1.0)
    points = read_run(tmp_path / "logs").scalars["loss"]
    assert [p.step for p in points] == list(range(1, 31))
    assert [p.value for p in points[20:]] == [-1.0] * 10


# ------------------------------------------------------------------------- config drift


def test_config_drift_warns_with_the_differences(tmp_path):
    """Resuming with another hyperparameter warns, naming the key and both values."""
    with pytest.raises(KeyboardInterrupt):
        _train(tmp_path, total_steps=30, stop_at=12, config={"lr": 0.01})
    with pytest.warns(ConfigDriftWarning, match=r"config\.lr: 0\.01 \(checkpoint\) -> 0\.5"):
        _train(tmp_path, total_steps=30, config={"lr": 0.5})


def test_config_drift_is_an_error_with_strict(tmp_path):
    """strict=True refuses to resume with another configuration, touching nothing."""
    with pytest.raises(KeyboardInterrupt):
        _train(tmp_path, total_steps=30, stop_at=12, config={"lr": 0.01})
    with pytest.raises(ConfigError, match=r"must match the configuration stored"):
        _train(tmp_path, total_steps=30, config={"lr": 0.5}, strict=True)


def test_schedule_and_batch_size_changes_count_as_drift(tmp_path):
    """A changed schedule or clock batch size is reported, not only the user's config."""
    with Run(tmp_path, clock=Clock(batch_size=10), progress=False, stream=io.StringIO()) as run:
        run.restore({})
        run.update()
    with (
        pytest.warns(ConfigDriftWarning, match=r"clocks\.global_step\.batch_size: 10"),
        Run(
            tmp_path,
            clock=Clock(batch_size=20),
            schedules={"lr": CosineDecay(0.1, 10)},
            progress=False,
            stream=io.StringIO(),
        ) as run,
    ):
        run.restore({})


def test_same_config_resumes_silently(tmp_path):
    """Resuming with the same configuration warns nothing."""
    with pytest.raises(KeyboardInterrupt):
        _train(tmp_path, total_steps=30, stop_at=12)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        _train(tmp_path, total_steps=30)


def test_config_differences_lists_added_and_removed_keys():
    """Keys present on one side only are listed as absent on the other."""
    assert config_differences({"a": {"b": 1}}, {"c": 2}) == [
        "a.b: 1 (checkpoint) -> '<absent>' (now)",
        "c: '<absent>' (checkpoint) -> 2 (now)",
    ]


def test_config_must_be_json_ready(tmp_path):
    """A config value that JSON cannot hold raises ConfigError naming its key."""
    with pytest.raises(ConfigError, match=r"`config\['f'\]` must be JSON-ready"):
        Run(tmp_path, config={"f": object()}, progress=False)


# ------------------------------------------------------------------------- rollback


def test_rollback_on_nan_restores_skips_and_finishes(tmp_path):
    """A NaN at step 35 restores step 30, skips 3 batches, and the run ends finite at 60."""
    policy = Rollback(skip_batches=3, max_rollbacks=2, window_steps=100)
    run, weights, losses = _train(tmp_path, total_steps=60, nan_at=(35,), rollback=policy)
    assert run.step == 60
    assert np.isfinite(weights).all()
    assert all(math.isfinite(v) for v in losses.values())
    # Step 35 was drawn as batch 35; the rollback to 30 moved the data on past 35 + 3.
    assert run.data_position == 60 + 35 - 30 + 1 + 3
    assert "restored step 30, skipped 3 batches" in run._stream.getvalue()
    log = read_run(tmp_path / "logs")
    assert [p.step for p in log.scalars["loss"]] == list(range(1, 61))
    assert log.scalars["run/rollback_from_step"][0].value == 35.0
    assert "restored step 30" in log.texts["run/rollback"][0].value


def test_rollback_gives_up_naming_the_steps(tmp_path):
    """A third bad step within the window, with max_rollbacks=2, raises naming the steps."""
    policy = Rollback(skip_batches=1, max_rollbacks=2, window_steps=100)
    with pytest.raises(DivergenceError, match=r"bad at steps \[15, 17, 19\]") as info:
        _train(tmp_path, total_steps=60, nan_at=(15, 17, 19), rollback=policy)
    assert info.value.steps == [15, 17, 19]


def test_rollback_on_a_spike(tmp_path):
    """A loss above spike_factor times the running median rolls back like a NaN."""
    policy = Rollback(spike_factor=5.0, median_of=5, skip_batches=0)
    with Run(tmp_path, save_every=5, rollback=policy, progress=False, stream=io.StringIO()) as run:
        run.restore({})
        for _ in range(12):
            run.update(loss=1.0)
        assert run.update(loss=100.0) is False
        assert run.step == 10


def test_rollback_without_a_checkpoint_is_an_error(tmp_path):
    """A bad step before any checkpoint raises DivergenceError saying to pass save_every."""
    with Run(tmp_path, rollback=Rollback(), progress=False, stream=io.StringIO()) as run:
        run.restore({})
        with pytest.raises(DivergenceError, match="no checkpoint at or before it"):
            run.update(loss=math.inf)


@pytest.mark.parametrize(
    ("kwargs", "parameter"),
    [
        ({"spike_factor": 1.0}, "spike_factor"),
        ({"median_of": 0}, "median_of"),
        ({"skip_batches": -1}, "skip_batches"),
        ({"max_rollbacks": 0}, "max_rollbacks"),
        ({"window_steps": True}, "window_steps"),
        ({"tag": ""}, "tag"),
    ],
)
def test_bad_rollback_policy(kwargs, parameter):
    """Each Rollback field out of range raises ConfigError naming it."""
    with pytest.raises(ConfigError, match=f"`{parameter}` must"):
        Rollback(**kwargs)


# ------------------------------------------------------------------------- parameters


@pytest.mark.parametrize(
    ("kwargs", "parameter"),
    [
        ({"total_steps": -1}, "total_steps"),
        ({"clock": "global_step"}, "clock"),
        ({"clocks": [Clock()]}, "clocks"),
        ({"schedules": {"lr": 0.1}}, "schedules"),
        ({"rollback": {"tag": "loss"}}, "rollback"),
        ({"strict": 1}, "strict"),
        ({"log_every": 0}, "log_every"),
        ({"handle_signals": None}, "handle_signals"),
        ({"checkpoint_options": {"save_every": 5}}, "checkpoint_options"),
        ({"writer_options": {"clock": Clock()}}, "writer_options"),
        ({"config": [1]}, "config"),
    ],
)
def test_bad_parameters(tmp_path, kwargs, parameter):
    """Each Run parameter out of range raises ConfigError naming it."""
    with pytest.raises(ConfigError, match=f"`{parameter}` must"):
        Run(tmp_path, **kwargs)


def test_generator_state_needs_a_generator():
    """GeneratorState of something else than a NumPy Generator raises ConfigError."""
    with pytest.raises(ConfigError, match=r"`generator` must be a numpy\.random\.Generator"):
        GeneratorState(np.random.RandomState(0))


def test_closed_run_refuses_restore(tmp_path):
    """restore() after close() raises ConfigError."""
    run = Run(tmp_path, progress=False)
    run.close()
    with pytest.raises(ConfigError, match="`run` must be open"):
        run.restore({})


def test_compat_schedule_values_are_bit_equal(tmp_path):
    """A compat schedule read through run.value() equals its own call, bit for bit."""
    from globalstep.compat.torch import OneCycleLR

    schedule = OneCycleLR(max_lr=0.1, total_steps=400)
    with Run(tmp_path, schedules={"lr": schedule}, progress=False, stream=io.StringIO()) as run:
        run.restore({})
        for _ in range(399):
            assert run.value("lr") == schedule(run.step)
            run.update()


def test_value_follows_a_schedule_replaced_in_schedules(tmp_path):
    """run.value() reads a schedule put into run.schedules after earlier reads, not the
    memo of the one it replaced."""
    with _make_run(tmp_path, 10) as run:
        run.restore({})
        first = run.value("lr")
        run.schedules["lr"] = CosineDecay(0.5, decay_steps=100)
        assert run.value("lr") == 0.5 != first
        run.schedules["lr"] = lambda step: 0.25
        assert run.value("lr") == 0.25


# ------------------------------------------------------------------------- one tick per update


def test_a_clock_ticked_beside_run_update_is_refused_at_the_first_update(tmp_path):
    """A clock.tick() beside Run.update would count each update twice: the first update
    after it raises, naming both steps and the way out; nothing was counted twice."""
    weights = np.zeros(3)
    with _make_run(tmp_path) as run:
        run.restore({"weights": weights})
        weights += 1.0
        run.clock.tick()
        with pytest.raises(
            ConfigError, match=r"advanced from step 0 to 1 since the last update"
        ) as err:
            run.update(loss=1.0)
        assert run.step == 1
    # The way out names every owner that claims a clock itself: torch's attach and the
    # Keras/TensorFlow follow.
    assert "clock.claim_ticks('<what ticks it>')" in str(err.value)
    assert "globalstep.integrations.torch.attach and the follow() of" in str(err.value)
    assert "globalstep.integrations.keras or .tensorflow" in str(err.value)


def test_a_claimed_clock_is_left_to_its_owner(tmp_path):
    """A loop that claims the clock's ticks ticks it itself; Run.update then logs and saves
    at the owner's step without ticking (10 updates: step 10, a checkpoint at 10)."""
    weights = np.zeros(3)
    with _make_run(tmp_path) as run:
        run.restore({"weights": weights})
        run.clock.claim_ticks("the loop")
        for _ in range(10):
            weights += 1.0
            run.clock.tick()
            run.update(loss=float(weights[0]))
        assert run.step == 10
        assert run.checkpoints.steps() == [10]
    points = read_run(tmp_path / "logs").scalars["loss"]
    assert [(p.step, p.value) for p in points] == [(s, float(s)) for s in range(1, 11)]


# ------------------------------------------------------------------------- rebound state


def test_a_rebound_tree_not_handed_over_is_refused_at_the_save(tmp_path):
    """`w = w - lr * g` leaves run.state as restored: the save after updates is refused
    with what to do, before anything is written; handing the tree over saves it."""
    with _make_run(tmp_path) as run:
        state = run.restore(
            {"weights": np.zeros(3), "noise": GeneratorState(np.random.default_rng())}
        )
        w = state["weights"]

        def train():
            nonlocal w
            while not run.done:
                state["noise"].generator.normal()  # the generator moves; the weights do not
                w = w - 0.1
                run.update(loss=float(w[0]))

        with pytest.raises(ConfigError, match=r"pass it: run\.update\(\.\.\., state=new_tree\)"):
            train()
        assert run.step == 10
        assert run.checkpoints.steps() == []
        run.update(state={"weights": w, "noise": state["noise"]})
        run.save()
        assert run.checkpoints.steps() == [11]
    with _make_run(tmp_path) as again:
        tree = again.restore(
            {"weights": np.zeros(3), "noise": GeneratorState(np.random.default_rng())}
        )
        assert tree["weights"].tolist() == w.tolist()


def test_a_tree_changed_in_place_or_by_torch_is_saved(tmp_path):
    """In-place NumPy updates, a torch module's in-place updates and a Python number left
    as restored are not mistaken for a stale tree; a rebound torch tensor is."""
    torch = pytest.importorskip("torch")
    model = torch.nn.Linear(2, 1)
    mask = np.ones(2)  # never changes: the module's tensors do
    with _make_run(tmp_path / "module") as run:
        run.restore({"model": model, "mask": mask, "epochs": 0})
        for _ in range(10):
            with torch.no_grad():
                model.weight.add_(1.0)
            run.update()
        assert run.checkpoints.steps() == [10]
    with _make_run(tmp_path / "tensor") as run:
        w = run.restore({"w": torch.zeros(2)})["w"]

        def train():
            nonlocal w
            for _ in range(10):
                w = w + 1.0
                run.update()

        with pytest.raises(ConfigError, match=r"got state=\['/w'\]"):
            train()
        run.update(state={"w": w})


def test_distributed_initialised_asks_torch_only_where_it_is_imported(monkeypatch):
    """distributed.initialised(), the public question Run asks, follows torch.distributed's
    own answer, and is False where torch.distributed was never imported."""
    import sys
    import types

    from globalstep import distributed

    monkeypatch.delitem(sys.modules, "torch.distributed", raising=False)
    assert distributed.initialised() is False
    fake = types.SimpleNamespace(is_available=lambda: True, is_initialized=lambda: True)
    monkeypatch.setitem(sys.modules, "torch.distributed", fake)
    assert distributed.initialised() is True
    fake.is_initialized = lambda: False
    assert distributed.initialised() is False


def test_a_run_written_before_the_redesign_goes_on_saving_on_its_grid(tmp_path):
    """A Run directory written by main before the redesign (tests/data/main-5d95193/run,
    stopped at step 30 with save_every=10) resumes with the save trigger's state stored in
    its tree's run part: a longer run saves at 40, on the grid, not at the first update."""
    import pathlib
    import shutil

    data = pathlib.Path(__file__).parent / "data" / "main-5d95193"
    expected = json.loads((data / "expected.json").read_text())["run"]
    directory = tmp_path / "run"
    shutil.copytree(data / "run", directory)
    with CheckpointManager(directory / "checkpoints", read_only=True) as manager:
        stored = manager.restore(partial=True)[0]["run"]["save_trigger"]
    with Run(
        directory,
        total_steps=45,
        save_every=10,
        schedules={"lr": CosineDecay(0.1, decay_steps=30)},
        config=expected["config"],
        progress=False,
        stream=io.StringIO(),
    ) as run:
        weights = run.restore({"weights": np.zeros(3)})["weights"]
        assert run.save_trigger.state_dict() == stored
        while not run.done:
            weights -= 0.01
            run.update(loss=1.0)
    with CheckpointManager(directory / "checkpoints", read_only=True) as manager:
        assert manager.steps() == [10, 20, 30, 40, 45]


def test_a_bad_save_every_leaves_the_directory_unlocked(tmp_path):
    """save_every is checked before the checkpoint manager takes the directory's lock: a
    Run refused for it leaves the next Run free to open the same directory."""
    with pytest.raises(ConfigError, match="must be a duration"):
        Run(tmp_path, save_every="soon", progress=False, stream=io.StringIO())
    with Run(tmp_path, progress=False, stream=io.StringIO()) as run:
        run.restore({"w": np.zeros(1)})


# -------------------------------------------------------------- plain values in the state


@dataclasses.dataclass
class _Stats:
    """Counters in a dataclass that is not frozen."""

    calls: int = 0
    best: float = math.inf


def _count(directory, stop):
    """issue 33's loop: NumPy weights, a dict of counters and a dataclass, changed in what
    it passed; returns what restore() showed (the objects' identities, their values)."""
    w, meta = np.zeros(2), {"updates": 0, "seen": {"rows": 0}, "last": [0.0, 0.0]}
    stats = _Stats()
    with Run(directory, total_steps=30, save_every=10, progress=False, stream=io.StringIO()) as run:
        tree = run.restore({"w": w, "meta": meta, "stats": stats})
        same = tree["meta"] is meta and tree["w"] is w and tree["stats"] is stats
        shown = (same, json.dumps(meta), dataclasses.astuple(stats), run.step)
        while not run.done and run.step < stop:
            w += 1.0
            meta["updates"] += 1
            meta["seen"]["rows"] += 4
            meta["last"][meta["updates"] % 2] = meta["updates"] / 8
            stats.calls += 1
            stats.best = min(stats.best, 1 / meta["updates"])
            run.update(loss=1.0)
    return shown


def test_a_dict_of_counters_is_restored_in_place_and_saved_as_it_counts(tmp_path):
    """Three attempts (to 15, 25, 30) counting in the dict, list and dataclass they passed:
    every checkpoint holds the counts of its step, and each restore fills the objects
    passed (issue 33, point 3: checkpoints 20, 25 and 30 held 15)."""
    for stop in (15, 25, 30):
        same, meta, stats, step = _count(tmp_path, stop)
        assert same
        assert json.loads(meta)["updates"] == step
        assert json.loads(meta)["seen"] == {"rows": 4 * step}
        assert stats == ((step, 1 / step) if step else (0, math.inf))
    with CheckpointManager(tmp_path / "checkpoints", read_only=True) as reader:
        assert reader.steps() == [10, 15, 20, 25, 30]
        for step in reader.steps():
            state = reader.restore(step=step)["state"]
            assert state["w"].tolist() == [step, step], step
            last = [step / 8, (step - 1) / 8] if step % 2 == 0 else [(step - 1) / 8, step / 8]
            assert state["meta"] == {"updates": step, "seen": {"rows": 4 * step}, "last": last}
            assert state["stats"] == {"calls": step, "best": 1 / step}


@dataclasses.dataclass(frozen=True)
class _Meta:
    updates: int
    name: str = "adam"


def _hand_over_then_count(directory, passed, rebind, *, stop=15, total=30):
    """Trains to ``stop`` handing each new tree over (the checkpoint holds the counts),
    then resumes with ``passed`` and counts in the objects it passed, never handing the
    tree over: ``rebind(tree, step)`` builds the new tree the loop keeps to itself."""
    w = np.zeros(2)
    with _make_run(directory, total) as run:
        tree = run.restore(passed(w))
        while run.step < stop:
            w += 1.0
            run.update(state=rebind(tree, run.step + 1))
    w = np.zeros(2)
    with _make_run(directory, total) as run:
        tree = run.restore(passed(w))
        mine = tree
        while not run.done:
            w += 1.0
            mine = rebind(mine, run.step + 1)
            run.update(loss=1.0)


@pytest.mark.parametrize(
    ("passed", "rebind", "leaf"),
    [
        (
            lambda w: (w, 0),
            lambda t, n: (t[0], n),
            r"'1: restored 15, passed 0 \(in the tuple at the root\)'",
        ),
        (
            lambda w: {"w": w, "meta": _Meta(0)},
            lambda t, n: {"w": t["w"], "meta": _Meta(n)},
            r"'meta/updates: restored 15, passed 0 \(in a _Meta\)'",
        ),
        (
            lambda w: {"w": w, "counts": (0, 1.5)},
            lambda t, n: {"w": t["w"], "counts": (n, 1.5)},
            r"'counts/0: restored 15, passed 0 \(in a tuple\)'",
        ),
    ],
    ids=["a tuple at the root", "a frozen dataclass", "a tuple in a dict"],
)
def test_a_restored_value_that_cannot_be_put_in_place_is_refused_at_the_save(
    tmp_path, passed, rebind, leaf
):
    """A plain value in a container restore() cannot fill (a tuple, a frozen dataclass),
    restored to another value than the one passed and still in the tree after updates, is
    refused at the save, naming the leaf and what to do, before anything is written."""
    with pytest.raises(ConfigError, match=r"got state=\[" + leaf) as caught:
        _hand_over_then_count(tmp_path, passed, rebind)
    message = str(caught.value)
    assert "values restored at step 15" in message
    assert "save at step 20" in message
    assert "run.update(..., state=new_tree)" in message
    assert "a dict, a list or a dataclass that is not frozen" in message
    with CheckpointManager(tmp_path / "checkpoints", read_only=True) as reader:
        assert reader.steps() == [10, 15]


def test_restored_values_equal_to_those_passed_or_handed_over_are_saved(tmp_path):
    """Constants in a tuple (restored equal to the values passed), a rebuilt tuple handed
    over, or one replaced in the dict passed are not taken for stale values."""
    constants = {"w": np.zeros(2), "cfg": ("adam", 0.9, None)}
    with _make_run(tmp_path / "constants", 30) as run:
        run.restore(constants)
        for _ in range(15):
            constants["w"] += 1.0
            run.update()
    with _make_run(tmp_path / "constants", 30) as run:
        tree = run.restore({"w": np.zeros(2), "cfg": ("adam", 0.9, None)})
        while not run.done:
            tree["w"] += 1.0
            run.update()
    for how in ("handed over", "replaced in the dict"):
        directory = tmp_path / how.replace(" ", "_")
        for attempt in range(2):
            with _make_run(directory, 30) as run:
                tree = run.restore({"w": np.zeros(2), "counts": (0,)})
                while not run.done and run.step < 15 * (attempt + 1):
                    tree["w"] += 1.0
                    counts = (tree["counts"][0] + 1,)
                    if how == "handed over":
                        tree = {"w": tree["w"], "counts": counts}
                        run.update(state=tree)
                    else:
                        tree["counts"] = counts
                        run.update()
        with CheckpointManager(directory / "checkpoints", read_only=True) as reader:
            assert reader.restore()["state"]["counts"] == (30,), how
