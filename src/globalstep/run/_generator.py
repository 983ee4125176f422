"""GeneratorState: a NumPy random ``Generator`` as a leaf of a state tree."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from globalstep._errors import ConfigError

__all__ = ["GeneratorState"]


class GeneratorState:
    """Makes a NumPy ``Generator`` a leaf of a state tree: saved and restored in place.

    Example:
        >>> import numpy as np
        >>> rng = np.random.default_rng(3)
        >>> leaf = GeneratorState(rng)
        >>> saved = leaf.state_dict()
        >>> first = rng.normal()
        >>> leaf.load_state_dict(saved)
        >>> rng.normal() == first
        True
    """

    globalstep_per_rank = True
    """Each rank of a distributed checkpoint saves its own (see ``checkpoint.perrank``)."""

    def __init__(self, generator: np.random.Generator) -> None:
        if not isinstance(generator, np.random.Generator):
            raise ConfigError("generator", "must be a numpy.random.Generator", generator)
        self.generator = generator

    def state_dict(self) -> dict[str, Any]:
        """Returns the bit generator's state (JSON-ready)."""
        return dict(self.generator.bit_generator.state)

    def reseed(self, seed: int) -> None:
        """Seeds the generator afresh (a restore on another number of ranks does).

        Raises:
            ConfigError: ``seed`` is not an int >= 0.
        """
        if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
            raise ConfigError("seed", "must be an int >= 0", seed)
        self.generator.bit_generator.state = type(self.generator.bit_generator)(seed).state

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restores the state saved by :meth:`state_dict`.

        Raises:
            ConfigError: the state is not one of this bit generator's.
        """
        try:
            self.generator.bit_generator.state = dict(state)
        except (TypeError, ValueError, KeyError) as err:
            raise ConfigError(
                "state", "must be a bit generator state from GeneratorState.state_dict()", state
            ) from err
