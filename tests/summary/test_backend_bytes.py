"""Each backend's bytes for a batch of items, groups of scalars among them: the event
records are protobuf's ``Event`` of each point, the JSONL lines ``json.dumps`` of each."""

from __future__ import annotations

import json
import math
import random
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from globalstep.summary._base import SCALAR, SCALARS, Item
from globalstep.summary._jsonl import JsonlBackend

TAGS = st.sampled_from(["loss", "lr", 'é/ü "損失"', "a" * 130, "x"])
POINT = st.tuples(
    st.integers(min_value=0, max_value=2**63 - 1),
    st.sampled_from([0.0, -0.0, 1.5, 1764441600.25])
    | st.floats(allow_nan=False, allow_infinity=False),
)
# (as one group?, (step, wall time), {tag: value})
CALLS = st.lists(
    st.tuples(st.booleans(), POINT, st.dictionaries(TAGS, st.floats(), min_size=1, max_size=4)),
    max_size=12,
)

Point = tuple[str, int, float, float]


def batch(calls: list[Any]) -> tuple[list[Item], list[Point]]:
    """The items of ``calls`` (each a group, or its scalars one by one) and their points."""
    items: list[Item] = []
    points: list[Point] = []
    for grouped, (step, wall_time), values in calls:
        if grouped:
            items.append((SCALARS, "", step, wall_time, values))
        else:
            items.extend((SCALAR, tag, step, wall_time, v) for tag, v in values.items())
        points.extend((tag, step, wall_time, v) for tag, v in values.items())
    return items, points


def assert_events_equal_protobuf(directory: Any, items: list[Item], points: list[Point]) -> None:
    """The event file of ``items`` holds protobuf's serialised Event of each point (a value
    past float32's range stored as an infinity), each framed as one record, in order."""
    event_pb2 = pytest.importorskip("tensorboard.compat.proto.event_pb2")
    from globalstep.summary._records import frame, iter_records
    from globalstep.summary._tensorboard import TensorBoardBackend

    expected = []
    for tag, step, wall_time, value in points:
        event = event_pb2.Event(step=step, wall_time=wall_time)
        scalar = event.summary.value.add()
        scalar.tag, scalar.simple_value = tag, value
        expected.append(event.SerializeToString())
    backend = TensorBoardBackend(str(directory), 0)
    backend.write(items)
    backend.close()
    with open(backend.path, "rb") as file:
        data = file.read()
    assert list(iter_records(data))[1:] == expected  # (the first is the file's version)
    assert data.endswith(b"".join(frame(record) for record in expected))


@settings(max_examples=150, deadline=None, derandomize=True)
@given(calls=CALLS)
def test_event_records_equal_protobuf(tmp_path_factory, calls) -> None:
    """A short batch's event records are protobuf's, point by point."""
    items, points = batch(calls)
    assert_events_equal_protobuf(tmp_path_factory.mktemp("events"), items, points)


@settings(max_examples=25, deadline=None, derandomize=True)
@given(
    start=st.sampled_from([0, 1, 100, 16_000, 2**21 - 300]) | st.integers(0, 2**63 - 2000),
    tags=st.lists(TAGS, min_size=1, max_size=3, unique=True),
    seed=st.integers(0, 2**32 - 1),
)
def test_long_runs_equal_protobuf(tmp_path_factory, start, tags, seed) -> None:
    """A batch of runs of groups long enough to be encoded as tables (NumPy) has the event
    records of protobuf: steps across a varint's length, zero wall times, a tag order
    that changes, a value past float32's range, single scalars between groups."""
    rng = random.Random(seed)
    special = [0.0, -0.0, math.nan, -math.nan, math.inf, -math.inf, 3.4028234663852886e38, 1e-320]
    calls = []
    order = list(tags)
    for i in range(rng.choice([300, 700, 1200])):
        step = start + i if rng.random() > 0.002 else rng.randrange(2**63)
        wall_time = 1764441600.25 + i / 7 if i % 600 > 50 else rng.choice([0.0, -0.0, 1.5])
        if rng.random() < 0.005:
            rng.shuffle(order)
        values = [rng.choice(special) if rng.random() < 0.02 else rng.gauss(0, 1) for _ in order]
        calls.append(
            (rng.random() > 0.002, (step, wall_time), dict(zip(order, values, strict=True)))
        )
    if rng.random() < 0.2:  # a finite value that float32 cannot hold: protobuf's infinity
        calls[rng.randrange(len(calls))][2][tags[0]] = rng.choice([1e39, 3.4028235677973366e38])
    items, points = batch(calls)
    assert_events_equal_protobuf(tmp_path_factory.mktemp("events"), items, points)


@settings(max_examples=150, deadline=None, derandomize=True)
@given(calls=CALLS)
def test_jsonl_lines_equal_json_dumps(tmp_path_factory, calls) -> None:
    """metrics.jsonl holds json.dumps of each point (NaN and the infinities in Python's
    spelling), one line each, in order."""
    items, points = batch(calls)
    expected = [
        json.dumps({"step": step, "wall_time": t, "tag": tag, "value": v}, ensure_ascii=False)
        + "\n"
        for tag, step, t, v in points
    ]
    directory = tmp_path_factory.mktemp("jsonl")
    backend = JsonlBackend(str(directory))
    backend.write(items)
    backend.close()
    assert (directory / "metrics.jsonl").read_text(encoding="utf-8") == "".join(expected)


@pytest.mark.parametrize(
    ("steps", "wall_time"),
    [(range(0, 1), 0.0), (range(0, 1), 1.5), (range(5, 6), 0.0), (range(300, 700), -0.0)],
)
def test_long_runs_of_default_fields_equal_protobuf(tmp_path, steps, wall_time) -> None:
    """Runs of groups whose step is 0 or wall time +0.0 (fields protobuf leaves out) have
    protobuf's records too."""
    calls = [
        (True, (steps[i % len(steps)], wall_time), {"loss": i / 3, "lr": -i / 7})
        for i in range(400)
    ]
    items, points = batch(calls)
    assert_events_equal_protobuf(tmp_path, items, points)
