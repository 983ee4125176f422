"""Adapters for ``fake_framework``, imported by the registry on first use."""

from __future__ import annotations

from typing import Any

import fake_framework as fw
import numpy as np

from globalstep.checkpoint._tree import adapters

LOADS: list[str] = []


class TensorAdapter(adapters.Adapter):
    name = "fake_framework.Tensor"

    def matches(self, obj: Any) -> bool:
        return isinstance(obj, fw.Tensor)

    def save(self, obj: Any) -> Any:
        return {"data": obj.data, "kind": "tensor"}

    def template(self, obj: Any) -> Any:
        return {"data": obj.data, "kind": "tensor"}  # shares memory: filled in place

    def apply(self, obj: Any, state: Any) -> None:
        LOADS.append("tensor")
        np.copyto(obj.data, state["data"])

    def rebuild(self, state: Any) -> Any:
        return fw.Tensor(state["data"])


class FrozenAdapter(adapters.Adapter):
    name = "fake_framework.Frozen"

    def matches(self, obj: Any) -> bool:
        return isinstance(obj, fw.Frozen)

    def save(self, obj: Any) -> Any:
        return obj.data

    def template(self, obj: Any) -> Any:
        return np.empty_like(obj.data)  # a writable buffer; restore() wraps it

    def restore(self, obj: Any, state: Any) -> Any:
        return fw.Frozen(state)


adapters.add(TensorAdapter())
adapters.add(FrozenAdapter())
