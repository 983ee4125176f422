"""The tracker formats' generic part (summary/_tracker.py) with a fake client.

What a tracker is sent and when: nothing a crash can take back (points wait for a commit
that covers them, or a clean close), restarts drop pending points, a resumed process
continues the recorded tracker run and sends what a crash left unsent, a failing tracker is
retried and bounded, and the one warning counts what was lost. The real MLflow server is
in test_mlflow.py.
"""

from __future__ import annotations

import json
import re
import threading
import time

import pytest

from globalstep import CheckpointManager, Clock, ConfigError, SummaryWriter, _durability
from globalstep._errors import TrackerRefusedError, TrackerWarning
from globalstep.summary import Tracker, read_run
from globalstep.summary._tracker import CHECKPOINT_TAG, record_path


class FakeClient:
    """Records what a tracker is sent; ``down`` makes every call fail, ``refuse`` names
    tags refused for good."""

    name = "mlflow"

    def __init__(self) -> None:
        self.sent: list[tuple[str, int, float, float]] = []
        self.opened: list[str | None] = []
        self.keys: list[str] = []
        self.params: list[dict[str, object]] = []
        self.closed = 0
        self.down = False
        self.refuse: set[str] = set()
        self.calls = 0
        self.event = threading.Event()

    def open(self, run_id: str | None, *, logdir: str, key: str) -> str:
        self.calls += 1
        self.keys.append(key)
        if self.down:
            raise ConnectionError("tracker down")
        self.opened.append(run_id)
        return run_id or f"run-{len(self.opened)}"

    def send(self, points: list[tuple[str, int, float, float]]) -> None:
        self.calls += 1
        if self.down:
            raise ConnectionError("tracker down")
        if any(tag in self.refuse for tag, *_ in points):
            raise TrackerRefusedError("bad tag")
        self.sent.extend(points)
        self.event.set()

    def set_params(self, params: dict[str, object]) -> None:
        if self.down:
            raise ConnectionError("tracker down")
        self.params.append(dict(params))

    def close(self) -> None:
        self.closed += 1


def tracker(client: FakeClient, **options: object) -> Tracker:
    return Tracker("mlflow", client=lambda: client, **options)  # type: ignore[arg-type]


def steps(client: FakeClient, tag: str = "loss") -> list[int]:
    return [step for t, step, _, _ in client.sent if t == tag]


def wait_until(condition, seconds: float = 60.0) -> None:
    """Waits for the sender thread (a bound on a hang, not a timing assertion)."""
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "the sender did not get there"
        time.sleep(0.01)


def train(writer: SummaryWriter, clock: Clock, manager: CheckpointManager, to: int) -> None:
    while clock.step < to:
        clock.tick()
        writer.scalars({"loss": 1.0 / clock.step, "lr": 0.1})
        manager.maybe_save(clock, {"clock": clock})


def test_points_wait_for_the_commit_that_covers_them(tmp_path):
    client, clock = FakeClient(), Clock()
    writer = SummaryWriter(tmp_path / "logs", clock=clock, formats=("jsonl", tracker(client)))
    with CheckpointManager(tmp_path / "ckpt", save_every="10st") as manager:
        train(writer, clock, manager, 15)
        wait_until(lambda: CHECKPOINT_TAG in {t for t, *_ in client.sent})
        writer.flush()
        time.sleep(0.2)  # the sender had its chance: steps 11..15 must still wait
        assert steps(client) == list(range(1, 11))
        assert steps(client, "lr") == list(range(1, 11))
        assert [(s, v) for t, s, v, _ in client.sent if t == CHECKPOINT_TAG] == [(10, 10.0)]
        train(writer, clock, manager, 20)
        wait_until(lambda: steps(client)[-1:] == [20])
    writer.close()  # a clean close sends the rest (here: nothing new)
    assert steps(client) == list(range(1, 21))
    assert client.closed == 1
    assert client.opened == [None]


def test_a_clean_close_sends_every_point(tmp_path):
    client, clock = FakeClient(), Clock()
    with SummaryWriter(tmp_path, clock=clock, formats=(tracker(client),)) as writer:
        for _ in range(7):
            clock.tick()
            writer.scalars({"loss": float(clock.step)})
        writer.set_params({"lr": 0.5, "model": {"width": 8}})
    assert steps(client) == list(range(1, 8))
    assert [v for t, _, v, _ in client.sent if t == "loss"] == [float(s) for s in range(1, 8)]
    assert client.params == [{"lr": 0.5, "model": {"width": 8}}]


def test_a_restart_drops_the_pending_points_at_and_above_it(tmp_path):
    client, clock = FakeClient(), Clock()
    with SummaryWriter(tmp_path, clock=clock, formats=(tracker(client),)) as writer:
        for _ in range(10):
            clock.tick()
            writer.scalars({"loss": float(clock.step)})
        writer.restart(6)
        for step in range(6, 9):
            writer.scalar("loss", 100.0 + step, step=step)
    assert [(s, v) for t, s, v, _ in client.sent if t == "loss"] == [
        *((s, float(s)) for s in range(1, 6)),
        *((s, 100.0 + s) for s in range(6, 9)),
    ]


def _crashed_record(logdir, lines):
    logdir.mkdir(parents=True, exist_ok=True)
    with open(record_path(str(logdir), "mlflow"), "w") as file:
        for line in lines:
            file.write(json.dumps(line) + "\n")


def test_a_resumed_process_continues_the_run_and_sends_what_a_crash_left(tmp_path):
    # What a process killed after its commit at step 3 and before the send leaves: the
    # run's id, points 1..5, the commit of step 3, points 1 and 2 sent, a torn last line.
    logdir = tmp_path / "logs"
    points = [["loss", s, float(s), 1000.0 + s] for s in range(1, 6)]
    _crashed_record(logdir, [{"run": "abc"}, *points[:3], {"committed": 3}, *points[3:]])
    with open(record_path(str(logdir), "mlflow"), "a") as file:
        file.write(json.dumps({"sent": [[0, 1]]}) + '\n["loss", 6, 6.0, 10')
    client, clock = FakeClient(), Clock()
    writer = SummaryWriter(logdir, clock=clock, formats=(tracker(client),))
    wait_until(lambda: steps(client) == [3])  # committed but unsent: sent at once
    assert client.opened == ["abc"]
    clock.tick(4)  # resumed from the checkpoint of step 3, at step 4: 4 and 5 are void
    for _ in range(3):
        writer.scalars({"loss": 10.0 * clock.step})
        clock.tick()
    writer.close()
    assert [(s, v) for t, s, v, _ in client.sent] == [(3, 3.0), (4, 40.0), (5, 50.0), (6, 60.0)]
    # The same record read by a third process: nothing left to send, the same run.
    third = FakeClient()
    SummaryWriter(logdir, formats=(tracker(third),)).close()
    assert third.sent == []
    assert third.opened == ["abc"]


def test_an_earlier_attempts_uncommitted_points_never_go_at_a_close(tmp_path):
    logdir = tmp_path / "logs"
    _crashed_record(logdir, [{"run": "abc"}, ["loss", 1, 1.0, 1.0], {"committed": 0}])
    client = FakeClient()
    SummaryWriter(logdir, formats=(tracker(client),)).close()
    assert client.sent == []  # step 1 of the crashed attempt waits for a commit or a restart


def test_a_tracker_down_is_retried_and_training_goes_on(tmp_path):
    client, clock = FakeClient(), Clock()
    client.down = True
    options = {"retry_seconds": 0.01, "max_retry_seconds": 0.05}
    writer = SummaryWriter(tmp_path, clock=clock, formats=("jsonl", tracker(client, **options)))
    for _ in range(50):
        clock.tick()
        writer.scalars({"loss": float(clock.step)})
    wait_until(lambda: client.calls >= 3)  # retried, with nothing sent
    assert client.sent == []
    client.down = False
    writer.close()
    assert steps(client) == list(range(1, 51))
    assert [p.step for p in read_run(tmp_path).scalars["loss"]] == list(range(1, 51))


def test_past_the_bound_points_are_dropped_and_counted_once(tmp_path):
    client, clock = FakeClient(), Clock()
    client.down = True
    options = {"max_pending": 20, "retry_seconds": 0.01, "max_retry_seconds": 0.02}
    writer = SummaryWriter(tmp_path, clock=clock, formats=("jsonl", tracker(client, **options)))
    for _ in range(50):
        clock.tick()
        writer.scalars({"loss": float(clock.step)})
    writer.flush()
    client.down = False
    with pytest.warns(TrackerWarning, match=r"dropped 30 points past its buffer, the oldest"):
        writer.close()
    assert steps(client) == list(range(31, 51))  # the newest points are kept
    assert len(read_run(tmp_path).scalars["loss"]) == 50  # JSONL holds every point


def test_close_gives_up_after_close_seconds_and_keeps_the_rest(tmp_path):
    client, clock = FakeClient(), Clock()
    client.down = True
    options = {"close_seconds": 0.2, "retry_seconds": 0.01, "max_retry_seconds": 0.05}
    writer = SummaryWriter(tmp_path, clock=clock, formats=(tracker(client, **options),))
    for _ in range(5):
        clock.tick()
        writer.scalars({"loss": float(clock.step)})
    command = re.escape(f"run `globalstep logs {tmp_path} --send` once the server is reachable")
    with pytest.warns(
        TrackerWarning, match=r"5 points were not sent to MLflow \(close_seconds=0.2 passed"
    ) as got:
        writer.close()
    assert re.search(command, str(got[0].message))
    assert client.sent == []
    later = FakeClient()  # a writer opening the directory again sends them
    SummaryWriter(tmp_path, formats=(tracker(later),)).close()
    assert steps(later) == [1, 2, 3, 4, 5]
    assert later.opened == [None]


def test_refused_points_are_found_dropped_and_counted(tmp_path):
    client, clock = FakeClient(), Clock()
    client.refuse = {"bad"}
    writer = SummaryWriter(tmp_path, clock=clock, formats=(tracker(client),))
    for _ in range(6):
        clock.tick()
        writer.scalars(
            {"loss": float(clock.step), "bad": 1.0} if clock.step == 4 else {"loss": 1.0}
        )
    with pytest.warns(TrackerWarning, match=r"1 points were refused by mlflow"):
        writer.close()
    assert steps(client) == [1, 2, 3, 4, 5, 6]
    assert steps(client, "bad") == []


def test_a_commit_listener_that_fails_warns_and_others_still_hear(tmp_path):
    heard = []

    class Listener:
        def fail(self, step: int) -> None:
            raise OSError("disk")

        def hear(self, step: int) -> None:
            heard.append(step)

    listener = Listener()
    first, second = _durability.listen(listener.fail), _durability.listen(listener.hear)
    try:
        with pytest.warns(RuntimeWarning, match=r"commit listener .* failed on step 5"):
            _durability.committed(5)
    finally:
        first.cancel()
        second.cancel()
    assert heard == [5]
    with pytest.raises(TypeError, match=r"`listener` must be a bound method"):
        _durability.listen(lambda step: None)


@pytest.mark.parametrize(
    ("options", "match"),
    [
        ({"name": "neptune"}, r"`name` must be one of \('mlflow', 'wandb'\)"),
        ({"max_pending": 0}, r"`max_pending` must be an int > 0; got max_pending=0"),
        ({"max_pending": 1.5}, r"`max_pending` must be an int > 0"),
        ({"batch_points": True}, r"`batch_points` must be an int > 0"),
        ({"close_seconds": float("inf")}, r"`close_seconds` must be a finite number > 0"),
        ({"retry_seconds": 2.0, "max_retry_seconds": 1.0}, r"must be >= retry_seconds=2.0"),
        ({"client": "mlflow"}, r"`client` must be callable"),
    ],
)
def test_bad_tracker_options_are_refused(options, match):
    with pytest.raises(ConfigError, match=match):
        Tracker(**{"name": "mlflow", **options})


def test_bad_formats_with_trackers_are_refused(tmp_path):
    with pytest.raises(ConfigError, match=r"`formats` must name each of .*'mlflow', 'wandb'"):
        SummaryWriter(tmp_path, formats=("mlflow", Tracker("mlflow")))
    with pytest.raises(ConfigError, match=r"`formats` must be \('jsonl',\) for an fsspec URL"):
        SummaryWriter("memory://run", formats=("jsonl", "mlflow"))


def test_a_damaged_record_is_refused_with_the_line(tmp_path):
    path = record_path(str(tmp_path), "mlflow")
    with open(path, "w") as file:
        file.write('{"run": "abc"}\nnot json\n["loss", 1, 1.0, 1.0]\n')
    with pytest.raises(ConfigError, match=r"line 2 of .*mlflow.tracker.jsonl is not JSON"):
        SummaryWriter(tmp_path, formats=(tracker(FakeClient()),))


def test_the_training_runs_key_is_made_once_and_given_to_every_open(tmp_path):
    first, second = FakeClient(), FakeClient()
    SummaryWriter(tmp_path, formats=(tracker(first),)).close()
    SummaryWriter(tmp_path, formats=(tracker(second),)).close()
    assert len(first.keys[0]) == 32
    assert second.keys == first.keys
    other = FakeClient()  # a new directory: a new training run, a new key
    SummaryWriter(tmp_path / "other", formats=(tracker(other),)).close()
    assert other.keys != first.keys


class StallingClient(FakeClient):
    """The first send waits until released, then fails (a send in flight at a restart)."""

    def __init__(self) -> None:
        super().__init__()
        self.in_send, self.release = threading.Event(), threading.Event()

    def send(self, points: list[tuple[str, int, float, float]]) -> None:
        if not self.release.is_set():
            self.in_send.set()
            assert self.release.wait(60)
            raise ConnectionError("dropped while a restart came")
        super().send(points)


def test_a_restart_while_a_batch_is_out_voids_its_points_if_it_comes_back(tmp_path):
    client, clock = StallingClient(), Clock()
    options = {"retry_seconds": 0.01, "max_retry_seconds": 0.02}
    writer = SummaryWriter(tmp_path / "logs", clock=clock, formats=(tracker(client, **options),))
    with CheckpointManager(tmp_path / "ckpt") as manager:
        for _ in range(5):
            clock.tick()
            writer.scalars({"loss": float(clock.step)})
        manager.save(clock, {"clock": clock})
        assert client.in_send.wait(60)
        writer.restart(3)  # rolled back: steps 3 and above are void
        writer.flush()
        client.release.set()
        for step in (3, 4):
            writer.scalar("loss", 10.0 * step, step=step)
        writer.close()
    assert [(t, s, v) for t, s, v, _ in client.sent] == [
        ("loss", 1, 1.0),
        ("loss", 2, 2.0),
        ("loss", 3, 30.0),
        ("loss", 4, 40.0),
    ]


class ParamsRefusingClient(FakeClient):
    def set_params(self, params: dict[str, object]) -> None:
        raise TrackerRefusedError("a parameter cannot change")


def test_refused_parameters_are_named_and_the_points_still_go(tmp_path):
    client, clock = ParamsRefusingClient(), Clock()
    writer = SummaryWriter(tmp_path, clock=clock, formats=(tracker(client),))
    writer.set_params({"lr": 0.2})
    for _ in range(3):
        clock.tick()
        writer.scalars({"loss": 1.0})
    with pytest.warns(TrackerWarning, match=r"parameters could not be set .*cannot change"):
        writer.close()
    assert steps(client) == [1, 2, 3]


def test_a_skipped_update_after_a_checkpoint_sends_nothing_a_crash_takes_back(tmp_path):
    """A Run's update skipped (applied=False) right after its checkpoint of step 3: the
    tracker receives no point for it then (a crash now would take it back: the resumed run
    makes that attempt again), and in the end each step once per tag, the skipped attempt
    under skipped/loss at the step of the update that applied after it."""
    import io

    from globalstep import Run

    client = FakeClient()
    options = {"formats": ("jsonl", tracker(client))}
    with Run(
        tmp_path, save_every=3, progress=False, stream=io.StringIO(), writer_options=options
    ) as run:
        run.restore({})
        for step in range(3):
            run.update(loss=float(step))
        run.update(loss=10.0, applied=False)  # an overflow, right after the commit of 3
        run.writer.flush()
        wait_until(lambda: (CHECKPOINT_TAG, 3) in {(t, s) for t, s, *_ in client.sent})
        time.sleep(0.2)  # the sender had its chance
        assert [(t, s, v) for t, s, v, _ in client.sent if t != CHECKPOINT_TAG] == [
            ("loss", s + 1, float(s)) for s in range(3)
        ]
        run.update(loss=3.0)
    sent = {}
    for tag, step, value, _ in client.sent:
        sent.setdefault(tag, []).append((step, value))
    assert sent["loss"] == [(1, 0.0), (2, 1.0), (3, 2.0), (4, 3.0)]
    assert sent["skipped/loss"] == [(4, 10.0)]
    assert sent["run/skipped_updates"] == [(4, 1.0)]
