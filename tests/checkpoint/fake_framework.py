"""A stand-in framework for the adapter tests: a mutable tensor and an immutable array.

Its adapters live in ``fake_framework_adapters``, which the registry imports on first use,
as it imports ``globalstep.integrations.torch`` for torch objects.
"""

from __future__ import annotations

from typing import Any

import numpy as np


class Tensor:
    """A mutable array holder, like a CPU torch tensor."""

    def __init__(self, data: Any) -> None:
        self.data = np.array(data, dtype=np.float32)


class Frozen:
    """An immutable array holder, like a jax.Array."""

    def __init__(self, data: Any) -> None:
        self._data = np.array(data, dtype=np.float32)
        self._data.flags.writeable = False

    @property
    def data(self) -> np.ndarray[Any, Any]:
        return self._data


class Opaque:
    """A framework object no adapter takes."""
