"""The hand-encoded scalar event is byte for byte protobuf's ``Event.SerializeToString()``."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

pytest.importorskip("tensorboard")
from tensorboard.compat.proto import event_pb2

from globalstep.summary._tensorboard import scalar_event


def protobuf_bytes(tag: str, step: int, wall_time: float, value: float) -> bytes:
    event = event_pb2.Event(step=step, wall_time=wall_time)
    scalar = event.summary.value.add()
    scalar.tag = tag
    scalar.simple_value = value
    data: bytes = event.SerializeToString()
    return data


EDGES = [
    ("loss", 0, 0.0, 0.0),  # every defaulted field: step and wall_time left out
    ("loss", 0, -0.0, -0.0),  # -0.0 is not the default (its bits are not zero)
    ("a", 1, 1.5, 2.0),
    ("a" * 200, 2**63 - 1, 1.7e9, 1e-45),  # a two-byte length, the largest step
    ("é/ü 損失", 127, 1.7e9, -1.0),  # a multi-byte tag; the last one-byte varint
    ("x", 128, 1.7e9, math.nan),
    ("x", 300, 1.7e9, -math.nan),
    ("x", 5, 1.7e9, math.inf),
    ("x", 5, 1.7e9, -math.inf),
    ("x", 5, 1.7e9, 3.4028234663852886e38),  # float32's largest
    ("x", 5, 1.7e9, 3.4028235677973366e38),  # rounds past it: protobuf stores inf
    ("x", 5, 1.7e9, -1e39),
    ("x", 5, 1.7e9, 1e-320),  # a float64 subnormal: float32 zero
]


@pytest.mark.parametrize(("tag", "step", "wall_time", "value"), EDGES)
def test_edges_equal_protobuf(tag: str, step: int, wall_time: float, value: float) -> None:
    assert scalar_event(tag, step, wall_time, value) == protobuf_bytes(tag, step, wall_time, value)


@settings(max_examples=300, deadline=None, derandomize=True)
@given(
    tag=st.text(min_size=1, max_size=300),
    step=st.integers(min_value=0, max_value=2**63 - 1),
    wall_time=st.floats(allow_nan=False) | st.floats(min_value=0, max_value=4e9),
    value=st.floats(),
)
def test_drawn_equal_protobuf(tag: str, step: int, wall_time: float, value: float) -> None:
    assert scalar_event(tag, step, wall_time, value) == protobuf_bytes(tag, step, wall_time, value)
