"""A tracker of one's own, added by the recipe of docs/add-a-tracker.md alone.

Only public names: a class with ``open``, ``send`` and ``close`` given as
``Tracker(name, client=...)``. It gets what MLflow gets: a point once a committed
checkpoint covers its step (a kill and a resume show each step once), what an outage left
unsent at the next open or rerun, and a clear refusal where the client cannot be one.
"""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

import globalstep
from globalstep import CheckpointManager, Clock, ConfigError, SummaryWriter
from globalstep._cli import main
from globalstep._errors import TrackerWarning
from globalstep.summary import Tracker, TrackerClient

CHECKPOINT = "globalstep/checkpoint"


class Server:
    """The "tool": its runs' points, reachable or not."""

    def __init__(self) -> None:
        self.runs: dict[str, list[tuple[str, int, float, float]]] = {}
        self.opened: list[str | None] = []
        self.keys: list[str] = []
        self.down = False
        self.failures = 0
        self.lock = threading.Lock()

    def steps(self, tag: str = "loss", run: str = "run-1") -> list[int]:
        with self.lock:
            return [step for name, step, _, _ in self.runs.get(run, []) if name == tag]

    def values(self, tag: str = "loss", run: str = "run-1") -> dict[int, float]:
        with self.lock:
            return {step: value for name, step, value, _ in self.runs.get(run, []) if name == tag}


class ServerClient:
    """A client by the recipe: open, send, close (no set_params)."""

    def __init__(self, server: Server) -> None:
        self.server = server
        self.run_id: str | None = None

    def _reach(self) -> None:
        if self.server.down:
            self.server.failures += 1
            raise ConnectionError("the server is down")

    def open(self, run_id: str | None, *, logdir: str, key: str) -> str:
        self._reach()
        self.server.opened.append(run_id)
        self.server.keys.append(key)
        self.run_id = run_id or f"run-{len(self.server.runs) + 1}"
        self.server.runs.setdefault(self.run_id, [])
        return self.run_id

    def send(self, points: list[tuple[str, int, float, float]]) -> None:
        self._reach()
        assert self.run_id is not None
        with self.server.lock:
            self.server.runs[self.run_id].extend(points)

    def close(self) -> None:
        pass


def serving(server: Server, name: str = "mine", **options: float) -> Tracker:
    return Tracker(name, client=lambda: ServerClient(server), **options)  # type: ignore[arg-type]


def wait_until(condition, seconds: float = 60.0) -> None:
    """Waits for the sender thread (a bound on a hang, not a timing assertion)."""
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "the sender did not get there"
        time.sleep(0.01)


def test_the_recipes_client_is_a_tracker_client():
    """The recipe's three methods make a TrackerClient."""
    assert isinstance(ServerClient(Server()), TrackerClient)
    assert not isinstance(Server(), TrackerClient)


def test_points_reach_the_client_once_a_committed_checkpoint_covers_them(tmp_path):
    """Steps go to the client only below the newest commit, and the rest at a clean close."""
    server, clock = Server(), Clock()
    writer = SummaryWriter(tmp_path / "logs", clock=clock, formats=("jsonl", serving(server)))
    with CheckpointManager(tmp_path / "ckpt", save_every="10st") as manager:
        for _ in range(15):
            clock.tick()
            writer.scalars({"loss": 1.0 / clock.step})
            manager.maybe_save(clock, {"clock": clock})
        wait_until(lambda: server.steps(CHECKPOINT) == [10])
        writer.flush()
        time.sleep(0.2)  # the sender had its chance: steps 11..15 must still wait
        assert server.steps() == list(range(1, 11))
    writer.close()  # a clean close makes the rest final
    assert server.steps() == list(range(1, 16))
    assert server.steps(CHECKPOINT) == [10]
    assert (tmp_path / "logs" / "mine.tracker.jsonl").exists()


def test_an_outage_is_sent_at_the_next_open_in_the_same_tracker_run(tmp_path):
    """Points a down client left go, once, when a writer opens the directory again."""
    server, clock = Server(), Clock()
    server.down = True
    fast = {"retry_seconds": 0.01, "max_retry_seconds": 0.05, "close_seconds": 0.2}
    writer = SummaryWriter(tmp_path, clock=clock, formats=(serving(server, **fast),))
    for _ in range(10):
        clock.tick()
        writer.scalars({"loss": float(clock.step)})
    wait_until(lambda: server.failures >= 2)
    with pytest.warns(TrackerWarning, match=r"10 points were not sent to mine") as got:
        writer.close()
    assert "Tracker('mine', client=...)" in str(got[0].message)
    assert "--send" not in str(got[0].message)  # logs --send cannot build this client
    assert server.runs == {}
    server.down = False
    with SummaryWriter(tmp_path, clock=clock, formats=(serving(server),)) as writer:
        wait_until(lambda: server.steps() == list(range(1, 11)))  # at the open, before a point
        for _ in range(2):
            clock.tick()
            writer.scalars({"loss": float(clock.step)})
    assert server.values() == {s: float(s) for s in range(1, 13)}
    assert server.steps() == list(range(1, 13))  # each once
    assert server.opened == [None]  # one tracker run, with the directory's key
    assert len(set(server.keys)) == 1
    SummaryWriter(tmp_path, formats=(serving(server),)).close()  # nothing left
    assert server.steps() == list(range(1, 13))
    assert server.opened == [None, "run-1"]


def test_a_complete_run_rerun_sends_what_an_outage_left(tmp_path):
    """A Run rerun after its end sends the points its tracker could not, once."""
    server = Server()

    def train() -> None:
        formats = ("jsonl", serving(server, close_seconds=0.2))
        with globalstep.Run(
            tmp_path, total_steps=20, save_every=10, progress=False, stream=io.StringIO(),
            writer_options={"formats": formats},
            checkpoint_options={"ledger": False},  # no goodput/* points: the count is exact
        ) as run:  # fmt: skip
            run.restore({})
            while not run.done:
                run.update(loss=float(run.step + 1))

    server.down = True
    with pytest.warns(TrackerWarning, match=r"22 points were not sent to mine"):
        train()
    server.down = False
    train()  # complete: it opens the writer for the unsent points only
    assert server.steps() == list(range(1, 21))
    assert server.steps(CHECKPOINT) == [10, 20]
    train()  # nothing left: nothing sent twice
    assert server.steps() == list(range(1, 21))


def test_params_go_to_a_client_that_takes_them_and_skip_one_that_does_not(tmp_path):
    """set_params is optional: a client without it gets none, and no warning."""
    server, taken = Server(), []

    class WithParams(ServerClient):
        def set_params(self, params):
            taken.append(dict(params))

    plain = SummaryWriter(tmp_path / "plain", formats=(serving(server),))
    plain.set_params({"lr": 0.1})
    plain.scalar("loss", 1.0, step=1)
    plain.close()
    assert server.steps() == [1]
    other = Tracker("with-params", client=lambda: WithParams(server))
    with SummaryWriter(tmp_path / "with", formats=(other,)) as writer:
        writer.set_params({"lr": 0.1})
    assert taken == [{"lr": 0.1}]


def test_logs_send_names_a_record_of_ones_own_client_and_fails(tmp_path, capsys):
    """`globalstep logs --send` cannot build a user's client: it says so, status 1."""
    server = Server()
    server.down = True
    fast = {"retry_seconds": 0.01, "max_retry_seconds": 0.05, "close_seconds": 0.1}
    writer = SummaryWriter(tmp_path, formats=(serving(server, **fast),))
    writer.scalar("loss", 1.0, step=1)
    with pytest.warns(TrackerWarning):
        writer.close()
    assert main(["logs", str(tmp_path), "--send"]) == 1
    err = capsys.readouterr().err
    assert "1 points were not sent to 'mine', a tracker of your own" in err
    assert "Tracker('mine', client=...)" in err


class _Partial:
    def open(self, run_id, *, logdir, key):
        return "x"


@pytest.mark.parametrize(
    ("options", "match"),
    [
        ({"name": "comet"}, r"`name` must be one of \('mlflow', 'wandb'\).* unless client="),
        (
            {"name": "../comet", "client": ServerClient},
            r"`name` must be a str of letters, digits, '_' and '-'.*; got name='../comet'",
        ),
        ({"name": "comet", "client": "comet"}, r"`client` must be callable.*; got client='comet'"),
        (
            {"name": "comet", "client": ServerClient(Server())},
            r"`client` must build the client \(a class, or a function returning one\), not be "
            r"the client.*Pass ServerClient",
        ),
        (
            {"name": "comet", "client": _Partial},
            r"`client` must build a TrackerClient, with the methods open, send, close \(this "
            r"one lacks send, close\); got client=<class",
        ),
    ],
    ids=["no client", "a path", "not callable", "an instance", "methods missing"],
)
def test_a_client_that_cannot_be_one_is_refused(options, match):
    """Each rule names the parameter and shows the value received."""
    with pytest.raises(ConfigError, match=match):
        Tracker(**options)


def test_two_trackers_of_one_name_or_a_bare_name_are_refused(tmp_path):
    """One record per name: a duplicate is refused, and so is a name without its client."""
    server = Server()
    with pytest.raises(ConfigError, match=r"`formats` must name each of .* one per name"):
        SummaryWriter(tmp_path, formats=(serving(server), serving(server)))
    with pytest.raises(ConfigError, match=r"one of your own as Tracker\(name, client=...\)"):
        SummaryWriter(tmp_path, formats=("jsonl", "mine"))
    assert not (tmp_path / "mine.tracker.jsonl").exists()


def test_a_builder_that_builds_no_client_gives_the_tracker_up(tmp_path):
    """What a function builds is checked on the sender thread; the points stay recorded."""
    broken = Tracker("broken", client=lambda: object(), close_seconds=1)
    writer = SummaryWriter(tmp_path, formats=("jsonl", broken))
    writer.scalar("loss", 1.0, step=1)
    with pytest.warns(
        TrackerWarning, match=r"the broken run could not be opened .*lacks open, send, close"
    ):
        writer.close()
    assert (tmp_path / "broken.tracker.jsonl").read_text().count('["loss", 1, 1.0,') == 1


_LOOP = """
import json, os, signal, sys, time
import globalstep
from globalstep.summary import Tracker

directory, tool, attempt, files = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4:]


class FileClient:
    "The tool is a file: a point is sent once it is on disk."

    def open(self, run_id, *, logdir, key):
        return run_id or "file-run"

    def send(self, points):
        with open(tool, "a") as file:
            file.writelines(json.dumps(point) + "\\n" for point in points)
            file.flush()
            os.fsync(file.fileno())

    def close(self):
        pass


formats = (*files, Tracker("file", client=FileClient))
with globalstep.Run(directory, total_steps=30, save_every=10, progress=False,
                    stream=sys.stderr, writer_options={"formats": formats}) as run:
    run.restore({})
    while not run.done:
        run.update(loss=1000.0 * attempt + run.step + 1)
        if attempt == 1 and run.step == 15:
            while not os.path.exists(tool) or "checkpoint" not in open(tool).read():
                time.sleep(0.01)
            run.writer.flush()
            time.sleep(0.3)  # time enough to send 11..15, were they sendable
            os.kill(os.getpid(), signal.SIGKILL)
"""


@pytest.mark.slow
@pytest.mark.parametrize("files", [["jsonl"], []], ids=["beside jsonl", "the only format"])
def test_a_kill_and_a_resume_show_each_step_once_in_ones_own_tool(tmp_path, files):
    """Killed at step 15 after its commit at 10, resumed: the tool holds steps 1..30
    once each, 11..15 with the resumed attempt's values (the only format, its record
    tells the resumed writer where to restart)."""
    tool = tmp_path / "tool.jsonl"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    for attempt in (1, 2):
        done = subprocess.run(
            [sys.executable, "-c", _LOOP, str(tmp_path / "run"), str(tool), str(attempt), *files],
            env=env, capture_output=True, text=True, check=False,
        )  # fmt: skip
        expected = -signal.SIGKILL if attempt == 1 else 0
        assert done.returncode == expected, done.stderr[-3000:]
        if attempt == 1:
            sent = [json.loads(line) for line in Path(tool).read_text().splitlines()]
            assert [p[1] for p in sent if p[0] == "loss"] == list(range(1, 11))
    points = [json.loads(line) for line in Path(tool).read_text().splitlines()]
    loss = {step: value for tag, step, value, _ in points if tag == "loss"}
    assert [p[1] for p in points if p[0] == "loss"] == list(range(1, 31))  # each once
    assert [loss[s] - s for s in (10, 11, 15, 16, 30)] == [1000.0, 2000.0, 2000.0, 2000.0, 2000.0]
    assert [p[1] for p in points if p[0] == CHECKPOINT] == [10, 20, 30]
