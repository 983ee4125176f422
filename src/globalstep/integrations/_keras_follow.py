"""A clock kept equal to a Keras optimizer's ``iterations`` in a custom training loop.

Part of :mod:`globalstep.integrations.keras` (which exports :func:`follow` and
:class:`Follower`).
"""

from __future__ import annotations

import weakref
from typing import Any

import keras
import numpy as np

from globalstep._clock import Clock, release_claim
from globalstep._errors import ConfigError, StepError
from globalstep.integrations._held import refuse_held

__all__ = ["Follower", "follow"]


def _read_iterations(optimizer: Any) -> Any:
    """``optimizer.iterations`` as a host value (a NumPy or Python integer)."""
    iterations = optimizer.iterations
    if isinstance(iterations, keras.Variable):
        iterations = iterations.value
    if keras.backend.backend() == "tensorflow":
        return iterations.numpy()  # an eager tensor; a symbolic one has no numpy()
    return keras.ops.convert_to_numpy(iterations)


_TRACED_HINT = (
    "Call it after the traced step returns, in the Python loop: the traced step "
    "(tf.function, jax.jit) runs Python once, at tracing, so a tick there would count "
    "one update for the whole run."
)


# The live follower of each clock, by the clock's id (the follower holds its clock, so the
# id is not reused while the entry lives).
_FOLLOWING: weakref.WeakValueDictionary[int, Follower] = weakref.WeakValueDictionary()


class Follower:
    """A clock kept equal to an optimizer's ``iterations`` (see :func:`follow`).

    It holds the claim on the clock's ticks (:meth:`Clock.claim_ticks
    <globalstep._clock.Clock.claim_ticks>`), so :meth:`Run.update <globalstep.run.Run.update>`
    beside it leaves the tick to it, until :meth:`detach` or until the follower itself is
    dropped (a loop keeps it to call it). :meth:`of` finds it again from the clock.
    """

    __module__ = "globalstep.integrations.keras"  # its public home, as reprs and pickles name it

    def __init__(self, optimizer: Any, clock: Clock) -> None:
        self.optimizer = optimizer
        self.clock = clock
        self.tick_owner = ""  # what follow() claimed the clock's ticks as; "" once detached
        self._tf = keras.backend.backend() == "tensorflow"
        iterations = optimizer.iterations
        # Without gradient accumulation ``iterations`` is the optimizer's own variable,
        # read in place (one read a call); with it, a new tensor each call.
        self._variable = iterations.value if isinstance(iterations, keras.Variable) else None
        self._index: int | None = None
        self._read_op: Any = None
        if self._tf and self._variable is not None:
            import tensorflow as tf

            # The read op alone: half the cost of variable.numpy() (which also records it
            # for gradient tapes and copies it with an identity).
            handle, dtype, op = self._variable.handle, self._variable.dtype, tf.raw_ops
            self._read_op = lambda: op.ReadVariableOp(resource=handle, dtype=dtype)

    def __repr__(self) -> str:
        state = "following" if self.tick_owner else "detached"
        return f"Follower({_named(self.optimizer)}, {self.clock!r}, {state})"

    @classmethod
    def of(cls, clock: Clock) -> Follower | None:
        """The live follower that ticks ``clock``; None if there is none.

        Example:
            >>> import keras
            >>> from globalstep import Clock
            >>> clock = Clock()
            >>> step_of = follow(keras.optimizers.SGD(0.1), clock)
            >>> Follower.of(clock) is step_of
            True
            >>> step_of.detach()
            >>> Follower.of(clock) is None
            True
        """
        return _FOLLOWING.get(id(clock))

    @property
    def attached(self) -> bool:
        """Whether it still follows the optimizer (False after :meth:`detach`)."""
        return bool(self.tick_owner)

    def detach(self) -> None:
        """Ends the claim on the clock's ticks: ``Run.update`` ticks the clock again, and
        :func:`follow` may give the clock to another optimizer. The follower no longer
        ticks (calling it raises); :meth:`read` still reads.

        Raises:
            ConfigError: already detached.
        """
        if not self.tick_owner:
            raise ConfigError(
                "follower", "is already detached", self, hint="detach() once per follow()."
            )
        owner, self.tick_owner = self.tick_owner, ""
        if _FOLLOWING.get(id(self.clock)) is self:
            del _FOLLOWING[id(self.clock)]
        release_claim(weakref.ref(self.clock), owner)

    def read(self) -> int:
        """``optimizer.iterations`` now, as an int (one host read; the clock is not moved).

        Raises:
            ConfigError: called inside a traced function.
        """
        try:
            if self._read_op is not None:
                return int(self._read_op().numpy())
            return int(_read_iterations(self.optimizer))
        except (AttributeError, TypeError, NotImplementedError) as err:
            raise ConfigError(
                "follower",
                "must be called outside a traced function (optimizer.iterations is symbolic here)",
                self,
                hint=_TRACED_HINT,
            ) from err

    def __call__(self, iterations: Any = None) -> int:
        """Ticks the clock for the updates applied since the last call; returns the step.

        Args:
            iterations: ``optimizer.iterations`` as the loop holds it, where the optimizer's
                variable is not the live counter (a stateless JAX loop: the value of the
                ``iteration`` entry of the optimizer variables it returns, floor-divided by
                ``gradient_accumulation_steps`` if set); None reads ``optimizer.iterations``.

        Returns:
            The clock's step, equal to ``optimizer.iterations``.

        Raises:
            ConfigError: called inside a traced function (``tf.function``, ``jax.jit``), or
                ``iterations`` is not an integer.
            StepError: the optimizer's count went back (restored without the clock), or
                the clock was ticked by something else.
        """
        if not self.tick_owner:
            raise ConfigError(
                "follower",
                "must be attached to tick the clock (detach() ended its claim)",
                self,
                hint="Call follow(optimizer, clock) again for a new follower.",
            )
        value = self.read() if iterations is None else _host_int(iterations)
        step = self.clock.step
        if value == step + 1:
            self.clock.tick()
        elif value != step:
            if value < step:
                raise StepError(
                    f"optimizer.iterations is {value} but the clock ({self.clock.name!r}) is "
                    f"at step {step}: the optimizer's count went back. Restore the optimizer "
                    "and the clock from one checkpoint, or tick the clock only through its "
                    "follower.",
                    value,
                )
            self.clock.tick(value - step)
        return value

    def stateless(self, optimizer_variables: Any) -> int:
        """:meth:`__call__` for a stateless loop (``optimizer.stateless_apply``, the JAX way).

        Args:
            optimizer_variables: the optimizer variables' values the step returned, in the
                order of ``optimizer.variables``.

        Returns:
            The clock's step, equal to the iterations those values hold.

        Raises:
            ConfigError: ``optimizer_variables`` is not as long as ``optimizer.variables``.
        """
        variables = self.optimizer.variables
        if len(optimizer_variables) != len(variables):
            raise ConfigError(
                "optimizer_variables",
                f"must hold one value per optimizer variable ({len(variables)})",
                f"{len(optimizer_variables)} values",
            )
        if self._index is None:
            counter = self.optimizer.iterations
            if not isinstance(counter, keras.Variable):  # gradient accumulation
                counter = self.optimizer._iterations
            self._index = next(i for i, v in enumerate(variables) if v is counter)
        every = int(getattr(self.optimizer, "gradient_accumulation_steps", None) or 1)
        return self(_host_int(optimizer_variables[self._index]) // every)


def _named(optimizer: Any) -> str:
    """An optimizer as messages name it: its class and id."""
    return f"{type(optimizer).__name__} at {id(optimizer):#x}"


def _host_int(value: Any) -> int:
    if isinstance(value, bool):
        raise ConfigError("iterations", "must be an integer (optimizer.iterations)", value)
    if isinstance(value, int):
        return value
    if isinstance(value, keras.Variable):
        value = value.value
    try:
        if isinstance(value, np.ndarray | np.generic):
            array = np.asarray(value)
        elif callable(getattr(value, "numpy", None)) and keras.backend.backend() == "tensorflow":
            array = np.asarray(value.numpy())  # an eager tensor (a symbolic one raises)
        else:
            array = np.asarray(keras.ops.convert_to_numpy(value))
    except Exception as err:  # a tracer or a symbolic tensor: no value yet
        raise ConfigError(
            "iterations",
            "must be a concrete integer, not a traced one",
            type(value).__name__,
            hint=_TRACED_HINT,
        ) from err
    if array.shape != () or array.dtype.kind not in "iu":
        raise ConfigError("iterations", "must be a 0-d integer (optimizer.iterations)", value)
    return int(array)


def follow(optimizer: Any, clock: Clock) -> Follower:
    """Makes ``clock`` follow ``optimizer.iterations`` in a custom training loop.

    Call the returned :class:`Follower` once after each ``apply_gradients`` (or
    ``optimizer.apply``), outside any traced function: it reads ``optimizer.iterations``
    (one host read of one integer) and ticks the clock by what it gained, so the clock
    counts exactly the updates the optimizer counts: one per applied update, none for an
    update a ``keras.optimizers.LossScaleOptimizer`` skipped (non-finite gradients), one
    per ``gradient_accumulation_steps`` micro-batches. It works the same way for an eager
    loop and for a step in ``tf.function``, on the TensorFlow, JAX and torch backends.
    A value logged after the call carries the step after the update, as
    ``tf.summary.scalar(step=optimizer.iterations)`` does (see :mod:`globalstep._clock`).

    The follower owns the clock's ticks (:meth:`Clock.claim_ticks
    <globalstep._clock.Clock.claim_ticks>`) while it lives, until :meth:`Follower.detach`:
    beside a :class:`~globalstep.run.Run`, call ``follower()`` and then ``run.update(...)``
    after each update, and the step advances once, by the follower. A clock has one
    follower at a time.

    Cost: reading the variable right after a ``tf.function`` step is one eager op, tens
    to a couple of hundred microseconds on a loaded CPU; the cheapest is to return
    ``optimizer.iterations`` from the traced step (``return loss, optimizer.iterations``)
    and pass it, ``follower(iterations)``: an output of the step is read as it is, with no
    op of its own (see ``bench/bench_tf.py``).

    Args:
        optimizer: a Keras optimizer (a ``LossScaleOptimizer`` too).
        clock: the clock to advance; it must be at ``optimizer.iterations`` now (both 0,
            or both restored from one checkpoint).

    Returns:
        The :class:`Follower`; ``follower()`` returns the step, ``detach()`` ends its claim.

    Raises:
        ConfigError: ``optimizer`` is not a Keras optimizer, ``clock`` not a Clock, or the
            clock is followed already (the message names the first follower) or its ticks
            are claimed by another owner (a torch ``attach``).
        StepError: the clock is not at ``optimizer.iterations``.

    Example:
        >>> import keras, numpy as np
        >>> from globalstep import Clock
        >>> w = keras.Variable(np.zeros(2, "float32"))
        >>> opt = keras.optimizers.SGD(0.1)
        >>> clock = Clock()
        >>> step = follow(opt, clock)
        >>> opt.apply([keras.ops.ones(2)], [w])
        >>> step()
        1
        >>> clock.step
        1
    """
    _check_free(optimizer, clock)
    follower = Follower(optimizer, clock)
    value = follower.read()
    if value != clock.step:
        raise StepError(
            f"the clock ({clock.name!r}) is at step {clock.step} but optimizer.iterations is "
            f"{value}: they must count the same updates. Restore both from one checkpoint "
            "before follow(), or start both at 0.",
            clock.step,
        )
    # The clock's one tick per update is this optimizer's: a Run.update beside it leaves
    # the tick to it (see Clock.claim_ticks), for as long as the follower lives.
    owner = f"Keras optimizer {_named(optimizer)}, via follow()"
    clock.claim_ticks(owner)
    follower.tick_owner = owner
    weakref.finalize(follower, release_claim, weakref.ref(clock), owner)
    _FOLLOWING[id(clock)] = follower
    return follower


def _check_free(optimizer: Any, clock: Clock) -> None:
    """Refuses what is not a Keras optimizer and a Clock, and a clock followed already."""
    if not isinstance(optimizer, keras.optimizers.Optimizer):
        raise ConfigError("optimizer", "must be a Keras optimizer", type(optimizer).__name__)
    if not isinstance(clock, Clock):
        raise ConfigError("clock", "must be a globalstep Clock", clock)
    refuse_held(
        Follower.of,
        clock,
        "clock",
        clock,
        "is followed already",
        "One follower per clock: keep calling the first, or detach it first "
        "(globalstep.integrations.keras.Follower.of(clock).detach()) and follow again; "
        "a second optimizer takes a Clock of its own.",
    )
