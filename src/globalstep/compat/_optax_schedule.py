"""The class of every compat.optax schedule: :class:`OptaxSchedule`, which answers a Python
int count with its NumPy formula (memoised, as every globalstep schedule) and anything else
(a ``jax.Array``, a tracer under ``jax.jit``) with its ``jax.numpy`` form, built on first use.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import numpy as np

from globalstep._errors import ConfigError, MissingDependencyError, OptaxScheduleWarning, StepError
from globalstep.compat._common import FORMULA_BLOCK, Formula, PeerSchedule
from globalstep.compat._optax_formulas import F32, Fn, JaxMaker
from globalstep.schedules import Steps, Values

__all__ = ["BUILDERS", "OptaxSchedule", "register"]

BUILDERS: dict[str, Callable[..., OptaxSchedule]] = {}
"""The building functions by name, for :meth:`OptaxSchedule.from_config`: each module that
defines some registers them (:func:`register`) as it is imported, so that this module
imports none of them."""


def register(*builders: Callable[..., OptaxSchedule]) -> None:
    """Adds ``builders`` to :data:`BUILDERS` under their names."""
    for builder in builders:
        BUILDERS[builder.__name__] = builder


def _jnp() -> Any:
    try:
        import jax.numpy as jnp
    except ImportError as err:  # pragma: no cover - jax is a dev dependency
        raise MissingDependencyError(
            "jax", "jax", "Calling a compat.optax schedule with an array or a float count"
        ) from err
    return jnp


class OptaxSchedule(PeerSchedule):
    """An optax schedule: called with a count, vectorised by ``values``.

    Attributes:
        fn_name: the optax function that built it.
        arguments: the arguments it was built with.
    """

    def __init__(
        self,
        fn_name: str,
        arguments: dict[str, Any],
        fn: Fn,
        dtype: str,
        jax_maker: JaxMaker,
        *,
        constant: bool = False,
    ) -> None:
        self.fn_name = fn_name
        self.arguments = arguments
        self._fn = fn
        self._jax_maker = jax_maker
        self._jax_fn: Callable[[Any], Any] | None = None
        # A constant schedule returns optax's value object itself, whatever the count.
        self._constant = constant
        self._schedule = Formula(self._formula, dtype=dtype)

    def _formula(self, steps: Steps) -> Values:
        if steps.ndim == 1 and steps.size > FORMULA_BLOCK:  # see PeerSchedule._flushed
            blocks = np.split(steps, range(FORMULA_BLOCK, steps.size, FORMULA_BLOCK))
            return np.concatenate([self._block(block) for block in blocks])
        return self._block(steps)

    def _block(self, steps: Steps) -> Values:
        # optax evaluates both branches of its where()s (0 ** -1 before the count begins):
        # IEEE results, no warnings, as in XLA.
        with np.errstate(all="ignore"):
            values = np.broadcast_to(self._fn(steps), steps.shape)
        # XLA runs with flush-to-zero: a float32 rate below the smallest normal is 0.
        return F32.flush(values) if self._schedule.dtype == "float32" else values

    def __call__(self, count: Any) -> Any:
        """Returns the value at ``count``, as optax's schedule does (see the module doc).

        Args:
            count: a Python int (any sign) gives a Python float; a ``jax.Array``, a tracer,
                a NumPy scalar or array, or a float gives what optax's schedule gives
                (a ``jax.Array``, traceable under ``jax.jit``).

        Raises:
            StepError: ``count`` is not a number or an array of numbers.

        Example:
            >>> from globalstep.compat.optax import exponential_decay
            >>> exponential_decay(1.0, 10, 0.5)(20)
            0.25
        """
        if type(count) is int:
            if self._constant:
                return self.arguments[self._constant_key()]
            if count >= 0:
                return super().__call__(count)
            return float(self._formula(np.array([count], dtype=np.int64))[0])
        if self._constant:
            return self.arguments[self._constant_key()]
        if isinstance(count, str | bytes) or count is None:
            raise StepError(
                f"`count` must be an int, a float or an array of them; got count={count!r}.",
                count,
            )
        return self.jax_fn(count)

    def _constant_key(self) -> str:
        return "value" if self.fn_name == "constant_schedule" else "init_value"

    @property
    def numpy_fn(self) -> Fn:
        """The NumPy formula: int64 counts (any sign) to values, before flush-to-zero.

        What a schedule built from others (a join, a warm-up before a decay) runs its parts
        with; calling the schedule or :meth:`values` adds the flush and the memo.
        """
        return self._fn

    @property
    def jax_maker(self) -> JaxMaker:
        """Builds the ``jax.numpy`` form given the ``jax.numpy`` module (see :attr:`jax_fn`);
        what a schedule built from others builds its parts' forms with."""
        return self._jax_maker

    @property
    def jax_fn(self) -> Callable[[Any], Any]:
        """optax's schedule as ``jax.numpy`` operations (built on first use; imports jax)."""
        if self._jax_fn is None:
            self._jax_fn = self._jax_maker(_jnp())
        return self._jax_fn

    def get_config(self) -> dict[str, Any]:
        """Returns the building function's name (``fn_name``) and its arguments.

        Example:
            >>> from globalstep.compat.optax import constant_schedule
            >>> constant_schedule(0.5).get_config()
            {'fn_name': 'constant_schedule', 'value': 0.5}
        """
        return {"fn_name": self.fn_name, **self.arguments}

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> OptaxSchedule:
        """Builds the schedule again from :meth:`get_config`'s output.

        Raises:
            ConfigError: ``config['fn_name']`` names no schedule of this module.

        Example:
            >>> from globalstep.compat.optax import exponential_decay
            >>> lr = exponential_decay(0.1, 1000, 0.96)
            >>> OptaxSchedule.from_config(lr.get_config()) == lr
            True
        """
        arguments = dict(config)
        name = arguments.pop("fn_name", None)
        if name not in BUILDERS:
            raise ConfigError(
                "config['fn_name']", f"must be one of {', '.join(sorted(BUILDERS))}", name
            )
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", OptaxScheduleWarning)  # warned when first built
            schedule: OptaxSchedule = BUILDERS[name](**arguments)
        return schedule

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self.arguments.items())
        return f"{self.fn_name}({args})"
