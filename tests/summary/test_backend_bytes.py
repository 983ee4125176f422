"""Each backend's bytes for a batch of items, groups of scalars among them: the event
records are protobuf's ``Event`` of each point, the JSONL lines ``json.dumps`` of each."""

from __future__ import annotations

import json
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


@settings(max_examples=150, deadline=None, derandomize=True)
@given(calls=CALLS)
def test_event_records_equal_protobuf(tmp_path_factory, calls) -> None:
    """The event file holds protobuf's serialised Event of each point (a value past
    float32's range stored as an infinity), each framed as one record, in order."""
    event_pb2 = pytest.importorskip("tensorboard.compat.proto.event_pb2")
    from globalstep.summary._records import frame, iter_records
    from globalstep.summary._tensorboard import TensorBoardBackend

    expected = []
    items, points = batch(calls)
    for tag, step, wall_time, value in points:
        event = event_pb2.Event(step=step, wall_time=wall_time)
        scalar = event.summary.value.add()
        scalar.tag, scalar.simple_value = tag, value
        expected.append(event.SerializeToString())
    backend = TensorBoardBackend(str(tmp_path_factory.mktemp("events")), 0)
    backend.write(items)
    backend.close()
    with open(backend.path, "rb") as file:
        data = file.read()
    assert list(iter_records(data))[1:] == expected  # (the first is the file's version)
    assert data.endswith(b"".join(frame(record) for record in expected))


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
