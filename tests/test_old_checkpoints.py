"""Checkpoints and logs written by main before the redesign (5d95193) restore today.

The directories under ``tests/data/main-5d95193/`` were written by
``tests/data/make_main_checkpoints.py`` on that commit; ``expected.json`` holds the values
it saved. Each test copies a directory to a temporary one first (a restore may write).
"""

from __future__ import annotations

import json
import pathlib
import shutil
from typing import Any

import numpy as np
import pytest

import globalstep
from globalstep.summary import read_run

DATA = pathlib.Path(__file__).parent / "data" / "main-5d95193"
EXPECTED = json.loads((DATA / "expected.json").read_text())


def copied(name: str, tmp_path: pathlib.Path) -> pathlib.Path:
    target = tmp_path / name
    shutil.copytree(DATA / name, target)
    return target


def from_json(value: Any) -> Any:
    if isinstance(value, dict) and set(value) == {"dtype", "shape", "values"}:
        return np.asarray(value["values"], dtype=value["dtype"]).reshape(value["shape"])
    if isinstance(value, dict):
        return {key: from_json(item) for key, item in value.items()}
    if isinstance(value, list):
        return [from_json(item) for item in value]
    return value


def template() -> dict[str, Any]:
    return {
        "w": np.zeros((4, 3), np.float32),
        "b": np.zeros(5),
        "ints": np.zeros((2, 3), np.int64),
        "mask": np.zeros(3, bool),
        "half": np.zeros(3, np.float16),
        "nested": {"list": [np.zeros(2, np.uint8), 0.0], "name": ""},
    }


def assert_tree_equal(actual: Any, expected: Any) -> None:
    if isinstance(expected, dict):
        assert sorted(actual) == sorted(expected)
        for key in expected:
            assert_tree_equal(actual[key], expected[key])
    elif isinstance(expected, list):
        assert len(actual) == len(expected)
        for a, e in zip(actual, expected, strict=True):
            assert_tree_equal(a, e)
    elif isinstance(expected, np.ndarray):
        assert actual.dtype == expected.dtype
        assert actual.shape == expected.shape
        assert actual.tobytes() == expected.tobytes()
    else:
        assert actual == expected


def test_numpy_manager_directory_restores_every_kept_step(tmp_path: pathlib.Path) -> None:
    expected = EXPECTED["numpy"]
    directory = copied("numpy", tmp_path)
    with globalstep.CheckpointManager(directory, read_only=True) as manager:
        assert manager.steps() == expected["steps"]
        for step in expected["steps"]:
            clock = globalstep.Clock(steps_per_epoch=10)
            state = {"clock": clock, "model": template()}
            restored = manager.restore(state, step=step)
            assert clock.step == step
            assert restored["model"]["w"] is state["model"]["w"]  # arrays filled in place
            assert_tree_equal(restored["model"], from_json(expected["trees"][str(step)]))
    clock = globalstep.Clock(steps_per_epoch=10)
    with globalstep.CheckpointManager(directory, max_to_keep=3) as manager:
        manager.restore({"clock": clock, "model": template()})
        assert clock.step == 40
        assert clock.epoch == expected["epoch"]
        clock.tick()
        manager.save(clock, {"clock": clock, "model": template()})  # and goes on saving
        assert manager.steps() == [30, 40, 41]


def test_torch_state_restores_weights_optimizer_sampler_and_rng(tmp_path: pathlib.Path) -> None:
    torch = pytest.importorskip("torch")
    from torch.utils.data import TensorDataset

    from globalstep.integrations import torch as gst

    expected = EXPECTED["torch"]
    dataset = TensorDataset(torch.zeros(40, 3), torch.zeros(40, 1))
    model = torch.nn.Linear(3, 1)
    opt = torch.optim.Adam(model.parameters(), lr=0.5)
    clock = globalstep.Clock()
    sampler = gst.ResumableSampler(dataset, seed=1)
    state = {"clock": clock, "model": model, "opt": opt, "data": sampler, "rng": gst.RNGState()}
    with globalstep.CheckpointManager(copied("torch", tmp_path)) as manager:
        manager.restore(state)
    assert clock.step == expected["step"]
    assert model.weight.detach().tolist() == expected["weight"]
    assert model.bias.detach().tolist() == expected["bias"]
    assert opt.state[model.weight]["exp_avg"].tolist() == expected["exp_avg"]
    assert opt.param_groups[0]["lr"] == expected["lr"]
    assert sampler.state_dict() == expected["sampler"]
    assert torch.rand(3).tolist() == expected["next_torch_random"]


def test_run_directory_resumes_at_its_last_step(tmp_path: pathlib.Path) -> None:
    expected = EXPECTED["run"]
    weights = np.zeros(3)
    with globalstep.Run(
        copied("run", tmp_path),
        total_steps=30,
        save_every=10,
        schedules={"lr": globalstep.CosineDecay(0.1, decay_steps=30)},
        config=expected["config"],
        progress=False,
    ) as run:
        run.restore({"weights": weights})
        assert run.step == expected["step"]
        assert run.done
    assert weights.tolist() == expected["weights"]
    log = read_run(tmp_path / "run" / "logs")
    assert [p.step for p in log.scalars["loss"]] == list(range(1, 31))


def test_standalone_logs_read_back(tmp_path: pathlib.Path) -> None:
    log = read_run(copied("logs", tmp_path))
    values = {str(p.step): p.value for p in log.scalars["loss"]}
    assert values == EXPECTED["logs"]["loss"]
