"""A schedule of one's own, added by the recipe of docs/write-your-own-schedule.md alone:
one module (this one) on public names, and one line (``name``) that registers it.

``from_config``, ``values()`` against scalar calls, composites, a CheckpointManager's and a
Run's checkpoints, and ``globalstep schedule`` / ``plan`` then know it like a built-in one;
the registry refuses a second class with a name already taken.
"""

from __future__ import annotations

import contextlib
import io
import json
import sys
import textwrap
from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import pytest

import globalstep
from globalstep import ConfigError, ConversionError
from globalstep._cli import main
from globalstep._errors import ConfigDriftWarning
from globalstep.checkpoint import CheckpointManager
from globalstep.schedules import (
    Length,
    Linear,
    Schedule,
    Steps,
    Values,
    check_number,
    from_config,
    join,
    registered,
    warmup,
)


@dataclass(frozen=True)
class Halving(Schedule):
    """Halves ``initial`` every ``every`` steps: ``initial * 0.5 ** (s // every)``."""

    initial: float
    every: Length
    dtype: str = "float64"

    name: ClassVar[str] = "test_halving"  # the one line
    lengths: ClassVar[dict[str, int]] = {"every": 1}
    formula: ClassVar[str] = "v(s) = {initial} * 0.5 ** floor(s / {every})"

    def check(self) -> None:
        check_number("initial", self.initial)

    def compute(self, steps: Steps) -> Values:
        halvings = self.floats(steps // self.steps_of("every"))
        return self.scalar(self.initial) * self.apply(np.power, self.scalar(0.5), halvings)


def _cli(*argv: str) -> tuple[int, str]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
        status = main(list(argv))
    return status, out.getvalue()


@pytest.fixture
def scratch_registry(monkeypatch):
    """The schedule registry as it is, given back as it was after the test (for classes
    a test registers only to see what happens)."""
    from globalstep.schedules import _base

    monkeypatch.setattr(_base, "_REGISTRY", dict(_base._REGISTRY))
    monkeypatch.setattr(_base, "_ORIGINS", dict(_base._ORIGINS))


def test_its_name_registers_it():
    assert registered()["test_halving"] is Halving
    assert Halving(1.0, 10).describe() == (
        "test_halving(initial=1.0, every=10, dtype='float64'): v(s) = 1.0 * 0.5 ** floor(s / 10)"
    )


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_from_config_round_trip(dtype):
    lr = Halving(0.3, 7, dtype=dtype)
    config = lr.to_config()
    assert config == {"name": "test_halving", "initial": 0.3, "every": 7, "dtype": dtype}
    again = from_config(json.loads(json.dumps(config)))
    assert type(again) is Halving
    assert again == lr
    assert Halving.from_config(config) == lr
    assert again.values(np.arange(50)).tobytes() == lr.values(np.arange(50)).tobytes()
    # Inside a composite too.
    ramp = join([warmup(lr, steps=5), Linear(0.1, 0.0, 10)], boundaries=[20])
    assert from_config(json.loads(json.dumps(ramp.to_config()))) == ramp


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_values_equal_scalar_calls_bit_for_bit(dtype):
    lr = Halving(0.3, 7, dtype=dtype)
    steps = np.arange(0, 5000, dtype=np.int64)  # across several memo blocks
    values = lr.values(steps)
    assert values.dtype == np.dtype(dtype)
    scalars = np.array([lr(int(s)) for s in steps], dtype=dtype)
    assert scalars.tobytes() == values.tobytes()
    assert [lr(np.int64(s)) for s in (0, 6, 7, 4999)] == [lr(s) for s in (0, 6, 7, 4999)]
    assert lr(0) == float(np.dtype(dtype).type(0.3))
    assert lr(7) == lr(0) / 2
    assert lr(14) == lr(0) / 4


def test_lengths_take_durations_and_check_hook_refuses():
    lr = Halving(1.0, "2ep")
    with pytest.raises(ConversionError, match="resolve it to steps first"):
        lr(0)
    resolved = lr.resolve(steps_per_epoch=5)
    assert resolved.every == 10
    assert (resolved(9), resolved(10)) == (1.0, 0.5)
    with pytest.raises(ConfigError, match=r"`initial` must be a finite number; got initial=nan"):
        Halving(float("nan"), 10)
    with pytest.raises(ConfigError, match=r"`every` must be >= 1; got every=0"):
        Halving(1.0, 0)
    with pytest.raises(ConfigError, match=r"`dtype` must be one of 'float64', 'float32'"):
        Halving(1.0, 10, dtype="float16")


def test_a_checkpoint_manager_saves_and_restores_it(tmp_path):
    lr = Halving(0.3, 7, dtype="float32")
    manager = CheckpointManager(tmp_path / "ckpt")
    manager.save(3, {"lr": lr, "warm": warmup(lr, steps=4)})
    manager.close()
    template = {"lr": Halving(1.0, 1), "warm": warmup(Halving(1.0, 1), steps=1)}
    restored = CheckpointManager(tmp_path / "ckpt").restore(template=template)
    assert type(restored["lr"]) is Halving
    assert restored["lr"] == lr
    assert restored["warm"] == warmup(lr, steps=4)
    assert restored["lr"].values(np.arange(30)).tobytes() == lr.values(np.arange(30)).tobytes()


def _train(directory, lr):
    with globalstep.Run(
        directory, total_steps=6, save_every=3, schedules={"lr": lr}, progress=False
    ) as run:
        weights = np.zeros(2)
        run.restore({"weights": weights})
        rates = []
        while not run.done:
            rates.append(run.value("lr"))
            weights -= rates[-1]  # in place: the restored tree moves
            run.update(loss=1.0)
    return rates


def test_a_run_stores_it_and_resumes_with_it(tmp_path):
    lr = Halving(0.3, 2)
    assert _train(tmp_path / "run", lr) == [lr(s) for s in range(6)]
    reader = CheckpointManager(tmp_path / "run" / "checkpoints", read_only=True)
    tree = reader.metadata()["tree"]
    reader.close()
    stored = json.loads(tree["dict"]["run"]["dict"]["config"]["value"])
    assert from_config(stored["schedules"]["lr"]) == lr
    # The same schedule resumes quietly (warnings are errors here); another one is told.
    assert _train(tmp_path / "run", lr) == []
    with pytest.warns(ConfigDriftWarning, match=r"schedules\.lr\.every: 2 \(checkpoint\) -> 3"):
        _train(tmp_path / "run", Halving(0.3, 3))


def test_the_command_line_names_it(tmp_path, monkeypatch):
    status, text = _cli(
        "schedule", "test_halving", "--initial", "0.8", "--every", "10", "--at", "0,10,25"
    )
    assert status == 0
    assert text.splitlines()[:4] == ["step  value", " 0  0.8", "10  0.4", "25  0.2"]
    status, text = _cli("schedule", "--help")
    assert status == 0
    assert "test_halving" in text
    monkeypatch.chdir(tmp_path)
    (tmp_path / "lr.json").write_text(json.dumps(Halving(0.8, "1ep").to_config()))
    status, text = _cli(
        "plan",
        "--dataset-size",
        "100",
        "--batch-size",
        "10",
        "--epochs",
        "3",
        "--config",
        "lr.json",
    )
    assert status == 0, text
    assert (
        "schedule          test_halving(initial=0.8, every=10, dtype='float64'): "
        "v(s) = 0.8 * 0.5 ** floor(s / 10)"
    ) in text.splitlines()
    assert "value at step 29  0.2" in text.splitlines()


def test_the_command_line_imports_a_module_of_schedules(tmp_path, monkeypatch, scratch_registry):
    """``--import MODULE`` (in the current directory here) makes its schedules known, with
    their own parameters as options."""
    (tmp_path / "my_schedules_for_cli.py").write_text(
        textwrap.dedent(
            """
            from dataclasses import dataclass
            from typing import ClassVar

            from globalstep.schedules import Schedule

            @dataclass(frozen=True)
            class Twice(Schedule):
                base_rate: float
                name: ClassVar[str] = "test_twice"

                def compute(self, steps):
                    return self.floats(steps) * 0 + 2 * self.scalar(self.base_rate)
            """
        )
    )
    monkeypatch.chdir(tmp_path)
    monkeypatch.delitem(sys.modules, "my_schedules_for_cli", raising=False)
    status, text = _cli("schedule", "test_twice", "--base-rate", "0.25", "--at", "3")
    assert status == 2
    assert "unrecognized arguments: --base-rate 0.25" in text
    path = list(sys.path)
    argv = ("schedule", "--import", "my_schedules_for_cli", "test_twice", "--base-rate", "0.25")
    status, text = _cli(*argv, "--at", "3")
    assert status == 0, text
    assert text.splitlines()[:2] == ["step  value", "3  0.5"]
    assert sys.path == path  # the current directory was searched, not added for good
    sys.modules.pop("my_schedules_for_cli")
    status, text = _cli("schedule", "--import", "no_such_module_here", "constant", "--value", "1")
    assert status == 2
    assert text.strip() == (
        "globalstep: error: `--import` must name a module Python can import "
        "(ModuleNotFoundError: No module named 'no_such_module_here'); "
        "got --import='no_such_module_here'."
    )


def test_a_taken_name_is_refused_naming_its_class(scratch_registry):
    with pytest.raises(
        ConfigError,
        match=r"`Impostor.name` must be a schedule name no other class has; "
        r"globalstep\.schedules\.Linear has it; got Impostor.name='linear'\. "
        r"Give .*Impostor a name of its own",
    ):

        @dataclass(frozen=True)
        class Impostor(Schedule):
            name: ClassVar[str] = "linear"

            def compute(self, steps: Steps) -> Values:
                return self.floats(steps)

    assert registered()["linear"] is Linear
    assert (
        type(from_config({"name": "linear", "initial": 1.0, "end_value": 0.0, "steps": 10}))
        is Linear
    )
    with pytest.raises(ConfigError, match=r"test_custom_schedule\.Halving has it; got Other.name="):

        @dataclass(frozen=True)
        class Other(Schedule):
            name: ClassVar[str] = "test_halving"

            def compute(self, steps: Steps) -> Values:
                return self.floats(steps)

    assert registered()["test_halving"] is Halving


def test_a_subclass_without_a_name_of_its_own_takes_no_name(scratch_registry):
    @dataclass(frozen=True)
    class Tweaked(Halving):
        pass

    assert registered()["test_halving"] is Halving
    assert Tweaked not in registered().values()


def test_the_same_class_defined_again_takes_its_name_back(scratch_registry):
    """A notebook cell run twice: the same module and qualified name."""
    made = []
    for _ in range(2):

        @dataclass(frozen=True)
        class Again(Schedule):
            value: float
            name: ClassVar[str] = "test_again"

            def compute(self, steps: Steps) -> Values:
                return self.floats(steps) * 0 + self.scalar(self.value)

        made.append(Again)
    assert made[0] is not made[1]
    assert registered()["test_again"] is made[1]
    assert from_config({"name": "test_again", "value": 2.0})(5) == 2.0
