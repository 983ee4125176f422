"""The Clock, the one owner of a training run's step, and its frozen snapshot, Progress.

What a step is
--------------
``step`` is the number of optimizer updates already applied. It starts at 0. One update is
one batch, or one group of accumulated micro-batches: not an epoch, not a sample. A value
used "at step k" is the one that update number k uses, so ``schedule(0)`` is the rate of the
very first update, and after that update the step is 1. This is what TensorFlow 1 did with
``tf.train.exponential_decay(lr, global_step, ...)`` and ``minimize(global_step=...)``, and
every other module of globalstep links here instead of restating it.

With 1,200 rows, batch size 100 and 2,000 epochs a run has 12 steps per epoch and 24,000
steps; a staircase decay with ``decay_steps=100000`` never decays in it. At step 0 the rate
is the initial rate; it decays only because something advances the step. Here the step
advances with the update itself: call :meth:`Clock.tick` once per applied update (and not for
an update that was skipped, e.g. by a mixed-precision overflow).

The step of a logged value
--------------------------
A value observed for an update (its loss, its gradient norm) is logged at the clock's step
*after* that update: the first update's loss at step 1, the last one's at the run's last
step. The rate logged beside it is the rate that update used, so the rate logged at step
``s`` is ``schedule(s - 1)``. This is the step ``tf.summary.scalar(..., step=
optimizer.iterations)`` writes after ``apply_gradients``, and the one Keras' TensorBoard
callback and the Hugging Face Trainer write. Every part of globalstep that logs follows it:
:class:`~globalstep.run.Run.update` (called after the update), the
:class:`~globalstep.summary.SummaryWriter` with a clock written to after ``clock.tick()``
(or after ``optimizer.step()`` under :func:`~globalstep.integrations.torch.attach`), and
the Keras ``GlobalStepCallback``. A checkpoint at step S then holds every point of the
updates it contains, steps 1 to S, and a resumed run logs from S + 1.

Example:
    >>> clock = Clock(steps_per_epoch=12, batch_size=100)
    >>> clock.tick(12)
    >>> p = clock.progress()
    >>> (p.step, p.epoch, p.step_in_epoch, p.samples)
    (12, 1, 0, 1200)

Several clocks coexist without hidden global state, one per optimizer:

    >>> generator, critic = Clock("generator"), Clock("critic")
    >>> for _ in range(5):
    ...     critic.tick()
    >>> generator.tick()
    >>> (generator.step, critic.step)
    (1, 5)
"""

from __future__ import annotations

import math
import operator
import sys
import time
import weakref
from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields
from typing import Any, NoReturn

from globalstep._errors import ConfigError, InvalidStepError, StepError
from globalstep._tracing import TRACER_MODULES, opaque, traced_by, traced_error

__all__ = ["MAX_STEP", "Clock", "Progress"]

MAX_STEP = 2**63 - 1
"""The largest step a clock holds: the int64 range frameworks store the step in."""

# advance() asks traced_by() only where a framework that traces is imported at all.
_TF_MODULE, _JAX_CORE = TRACER_MODULES
_modules = sys.modules
# (step, epoch, epoch_start, samples, tokens, elapsed_before, session_start): every counter
# at one step; the clock's base holds them at its base step (see Clock.__init__).
_Counters = tuple[int, int, int, int, int, float, float]


def integer(value: Any) -> int | None:
    """Returns ``value`` as an int where it is an integer: an int, a NumPy integer, a
    0-d integer tensor, anything :func:`operator.index` takes; None for a bool (of any
    library), a float or anything else.

    Example:
        >>> import numpy as np
        >>> integer(np.int64(4)), integer(True), integer(4.0)
        (4, None, None)
    """
    if type(value) is int:
        return value
    if isinstance(value, bool) or "bool" in str(getattr(value, "dtype", "")):
        return None
    try:
        return operator.index(value)
    except (TypeError, ValueError):
        return None


STEP_RULES = ("must be an int >= 0", "must be an int >= 0", "must be <= 2**63-1")
"""What :func:`check_step` says a refused step must be, by the rule it broke: an integer
(not a bool, not a float), at least 0, at most :data:`MAX_STEP`."""


def check_step(
    value: Any, parameter: str = "step", *, rules: tuple[str, str, str] = STEP_RULES
) -> int:
    """Returns ``value`` as an int where it is a step: an int (or a NumPy integer, a 0-d
    integer tensor, anything :func:`operator.index` takes, but a bool) in [0, 2**63-1].

    The one check of a step that every package calls (a schedule's argument, a summary's
    step, a checkpoint's step).

    Args:
        value: the step received.
        parameter: its name, as the caller spells it (``"purge_step"``).
        rules: the rule the error states, for a value that is not an int, below 0, or past
            :data:`MAX_STEP` (a caller that takes more than a step, such as a Clock, says so).

    Raises:
        InvalidStepError: ``value`` is not a step; a :class:`~globalstep._errors.ConfigError`
            and a :class:`~globalstep._errors.StepError`, naming ``parameter``, the rule and
            the value received.

    Example:
        >>> import numpy as np
        >>> check_step(np.int64(4))
        4
        >>> check_step(-1, "purge_step")
        Traceback (most recent call last):
        ...
        globalstep._errors.InvalidStepError: `purge_step` must be an int >= 0; got purge_step=-1.
    """
    number = integer(value)
    if number is not None and 0 <= number <= MAX_STEP:
        return number
    rule = rules[0] if number is None else rules[1] if number < 0 else rules[2]
    shown = value
    if number is not None and abs(number) > 10**30:  # 10**400 shown with its 401 digits: cut
        text = str(number)
        shown = f"{text[:12]}...({len(text.lstrip('-'))} digits)"
    raise InvalidStepError(parameter, rule, shown, step=value)


_STATE_VERSION = 1


@dataclass(frozen=True)
class Progress:
    """A frozen snapshot of a :class:`Clock`; everything that decides reads one of these.

    Attributes:
        clock: the clock's name.
        step: optimizer updates applied so far (see the module docstring).
        epoch: completed epochs; also the index of the epoch in progress.
        step_in_epoch: updates applied in the epoch in progress.
        samples: training samples consumed by the applied updates.
        tokens: training tokens consumed by the applied updates.
        elapsed_seconds: training time, accumulated across restarts.
        steps_per_epoch: updates per epoch, where known.
        batch_size: samples per update, where known.
        tokens_per_step: tokens per update, where known.
    """

    clock: str
    step: int
    epoch: int
    step_in_epoch: int
    samples: int
    tokens: int
    elapsed_seconds: float
    steps_per_epoch: int | None = None
    batch_size: int | None = None
    tokens_per_step: int | None = None

    def to_dict(self) -> dict[str, Any]:
        """Returns the snapshot as a JSON-ready dict."""
        # Every field is a number, a str or None: no deep copy (dataclasses.asdict) needed.
        return {name: getattr(self, name) for name in _PROGRESS_FIELDS}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Progress:
        """Builds a snapshot from :meth:`to_dict`'s output, checking every field.

        Raises:
            ConfigError: a field is missing, unknown, or out of range.
        """
        if not isinstance(data, Mapping):
            raise ConfigError("data", "must be a mapping from Progress.to_dict()", data)
        names = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - names)
        if unknown:
            raise ConfigError("data", f"must hold only the fields {sorted(names)}", unknown)
        if not isinstance(data.get("clock"), str):
            raise ConfigError("data['clock']", "must be a string", data.get("clock"))
        for key in ("step", "epoch", "step_in_epoch", "samples", "tokens"):
            _check_count(f"data[{key!r}]", data.get(key), minimum=0, optional=False)
        for key in ("steps_per_epoch", "batch_size", "tokens_per_step"):
            _check_count(f"data[{key!r}]", data.get(key), minimum=1)
        _check_seconds("data['elapsed_seconds']", data.get("elapsed_seconds"))
        return cls(**dict(data))


_PROGRESS_FIELDS = tuple(f.name for f in fields(Progress))


def _check_count(parameter: str, value: Any, *, minimum: int, optional: bool = True) -> None:
    if value is None and optional:
        return
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(parameter, "must be an int", value)
    if value < minimum:
        raise ConfigError(parameter, f"must be >= {minimum}", value)


def _check_seconds(parameter: str, value: Any) -> float:
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not math.isfinite(value)
        or value < 0
    ):
        raise ConfigError(parameter, "must be a finite number >= 0", value)
    return float(value)


class Clock:
    """The one mutable owner of a run's step, epoch, samples, tokens and training time.

    Args:
        name: identifies the clock in checkpoints and logs ("generator", "critic", ...).
        steps_per_epoch: updates per epoch; when given, epochs roll over by themselves.
        batch_size: samples per update; when given, each tick counts its samples.
        tokens_per_step: tokens per update; when given, each tick counts its tokens.
        time_fn: a monotonic clock in seconds, injectable for tests.

    Raises:
        ConfigError: an empty name, or a count that is not a positive int.

    Threads: the counters change on one thread at a time, the one that trains (calls to
    :meth:`tick`, :meth:`end_epoch` and :meth:`load_state_dict` are not made from two
    threads at once). Any thread may read at any time (a background saver, a progress
    display): :meth:`progress` and :meth:`state_dict` return a consistent snapshot, and
    ``step`` alone is always a step some update reached. No lock is taken: the counters
    live in one tuple that each change replaces whole, and replacing an attribute is one
    atomic store (under the GIL, and in free-threaded builds, where a reader sees the old
    tuple or the new one, never a mix); so ``tick()`` costs a few hundred nanoseconds and
    a reader never holds the training thread up.
    """

    def __init__(
        self,
        name: str = "global_step",
        *,
        steps_per_epoch: int | None = None,
        batch_size: int | None = None,
        tokens_per_step: int | None = None,
        time_fn: Callable[[], float] = time.monotonic,
    ) -> None:
        if not isinstance(name, str) or not name.strip():
            raise ConfigError("name", "must be a non-empty string", name)
        _check_count("steps_per_epoch", steps_per_epoch, minimum=1)
        _check_count("batch_size", batch_size, minimum=1)
        _check_count("tokens_per_step", tokens_per_step, minimum=1)
        if not callable(time_fn):
            raise ConfigError("time_fn", "must be callable", time_fn)
        self._name = name
        self._steps_per_epoch = steps_per_epoch
        self._batch_size = batch_size
        self._tokens_per_step = tokens_per_step
        self._time_fn = time_fn
        # Samples and tokens one plain tick() adds.
        self._tick_samples = batch_size if batch_size is not None else 0
        self._tick_tokens = tokens_per_step if tokens_per_step is not None else 0
        # (step, base), replaced whole by each change (see the class docstring). The base,
        # (base_step, epoch, epoch_start, samples, tokens, elapsed_before, session_start),
        # holds the counters as they were at base_step; the updates since then add their
        # samples, tokens and epoch roll-overs when read (_counters()), so a plain tick
        # builds a pair. _step mirrors the step for readers of the step alone.
        self._state: tuple[int, _Counters] = (0, (0, 0, 0, 0, 0, 0.0, time_fn()))
        self._step = 0
        self.tick_owner: str | None = None
        """What ticks this clock once per update (set by :meth:`claim_ticks`; read only)."""

    def __repr__(self) -> str:
        state = self._counters()
        return f"Clock({self._name!r}, step={state[0]}, epoch={state[1]})"

    def _counters(self) -> _Counters:
        """(step, epoch, epoch_start, samples, tokens, elapsed_before, session_start) from
        one snapshot of the state."""
        step, (base_step, epoch, start, done, used, before, session) = self._state
        moved = step - base_step
        if moved:
            spe = self._steps_per_epoch
            if spe is not None:
                rolled = (step - start) // spe
                epoch += rolled
                start += rolled * spe
            done += moved * self._tick_samples
            used += moved * self._tick_tokens
        return step, epoch, start, done, used, before, session

    @property
    def name(self) -> str:
        """The clock's name."""
        return self._name

    @property
    def step(self) -> int:
        """Optimizer updates applied so far."""
        return self._step

    @property
    def epoch(self) -> int:
        """Completed epochs, which is also the index of the epoch in progress."""
        return self._counters()[1]

    @property
    def step_in_epoch(self) -> int:
        """Updates applied in the epoch in progress."""
        state = self._counters()  # one snapshot: two of its fields
        return state[0] - state[2]

    @property
    def samples(self) -> int:
        """Samples consumed by the applied updates."""
        return self._counters()[3]

    @property
    def tokens(self) -> int:
        """Tokens consumed by the applied updates."""
        return self._counters()[4]

    @property
    def elapsed_seconds(self) -> float:
        """Training seconds, accumulated across restarts (the time between runs not counted)."""
        before, session = self._state[1][5:]
        return before + (self._time_fn() - session)

    @property
    def steps_per_epoch(self) -> int | None:
        """Updates per epoch, where known."""
        return self._steps_per_epoch

    @property
    def batch_size(self) -> int | None:
        """Samples per update, where known."""
        return self._batch_size

    @property
    def tokens_per_step(self) -> int | None:
        """Tokens per update, where known."""
        return self._tokens_per_step

    def claim_ticks(self, owner: str) -> None:
        """Declares that ``owner`` ticks this clock once per update, so nothing else does.

        ``globalstep.integrations.torch.attach`` claims its clock; :meth:`Run.update
        <globalstep.run.Run.update>` then leaves the tick to the owner instead of counting
        each update twice. A loop that ticks the clock itself, beside a Run, claims it the
        same way (``clock.claim_ticks("my loop")``). Claiming again for the same owner does
        nothing.

        Args:
            owner: names what ticks the clock, for messages.

        Raises:
            ConfigError: ``owner`` is not a non-empty str, or another owner holds the claim.
        """
        if not isinstance(owner, str) or not owner:
            raise ConfigError("owner", "must be a non-empty str naming what ticks the clock", owner)
        held = self.tick_owner
        if held is not None and held != owner:
            raise ConfigError(
                "clock",
                f"is ticked already by {held}",
                self,
                hint="One owner ticks a clock once per update: release it "
                "(release_ticks) or give the second owner a Clock of its own.",
            )
        self.tick_owner = owner

    def release_ticks(self, owner: str) -> None:
        """Ends ``owner``'s claim (see :meth:`claim_ticks`); a claim held by another stays.

        Raises:
            ConfigError: ``owner`` does not hold the claim.
        """
        if self.tick_owner != owner:
            raise ConfigError(
                "owner", f"must hold the claim to release it (held by {self.tick_owner})", owner
            )
        self.tick_owner = None

    @opaque
    def advance(self) -> int:
        """``tick()`` of one update, with nothing to check but a tracer, returning the new
        step: the per-update fast path of whoever owns the ticks (the optimizer hooks,
        ``Run.update``; one tuple read, one built, two stores).

        Raises:
            TracingError: ``tf.function`` or ``jax.jit`` is tracing the call.
            StepError: the step would pass :data:`MAX_STEP`.
        """
        if (_TF_MODULE in _modules or _JAX_CORE in _modules) and traced_by() is not None:
            self._traced("clock.tick()")  # (a framework not imported cannot be tracing)
        step, base = self._state
        step += 1
        if step > MAX_STEP:
            self._too_far(1)
        self._state = (step, base)
        self._step = step
        return step

    @opaque
    def tick(self, n: int = 1, *, samples: int | None = None, tokens: int | None = None) -> None:
        """Records ``n`` applied optimizer updates.

        Call it in Python, once per update: inside a function that ``tf.function`` or
        ``jax.jit`` traces it would run once, at tracing, so it raises there (keep the step
        in the graph and tick after each call, outside it). Under ``torch.compile`` it
        runs as Python on every call: the graph breaks around it.

        Args:
            n: updates applied, >= 1.
            samples: samples those updates consumed; defaults to ``n * batch_size`` when the
                clock knows its batch size, else none are counted.
            tokens: tokens those updates consumed; defaults to ``n * tokens_per_step``.

        Raises:
            StepError: ``n`` is not an int >= 1, or the step would pass int64.
            ConfigError: ``samples`` or ``tokens`` is not an int >= 0.
            TracingError: ``tf.function`` or ``jax.jit`` is tracing the call.
        """
        if samples is None and tokens is None and type(n) is int and n == 1:
            self.advance()
            return
        if traced_by() is not None:
            self._traced("clock.tick()")
        count = integer(n)
        if count is None:
            raise StepError(f"`n` must be an int number of updates; got n={n!r}.", n)
        n = count
        if n < 1:
            raise StepError(f"`n` must be >= 1 (one tick per applied update); got n={n}.", n)
        _check_count("samples", samples, minimum=0)
        _check_count("tokens", tokens, minimum=0)
        if samples is None:
            samples = n * self._tick_samples
        if tokens is None:
            tokens = n * self._tick_tokens
        step, epoch, start, done, used, before, session = self._counters()
        step += n
        if step > MAX_STEP:
            self._too_far(n)
        spe = self._steps_per_epoch
        if spe is not None:
            rolled = (step - start) // spe
            epoch += rolled
            start += rolled * spe
        self._state = (step, (step, epoch, start, done + samples, used + tokens, before, session))
        self._step = step

    def _traced(self, call: str) -> NoReturn:
        tracer = traced_by()
        raise traced_error(call, tracer or "a tracer")

    def _too_far(self, n: int) -> NoReturn:
        raise StepError(
            f"`n` would move the step past int64 ({MAX_STEP}); got n={n} at step {self._step}.",
            self._step + n,
        )

    def end_epoch(self) -> None:
        """Ends the epoch in progress, for loops whose epochs the clock cannot count itself.

        An epoch with no update yet is left as it is, so calling this after an automatic
        roll-over (``steps_per_epoch`` given) is harmless.
        """
        step, epoch, start, done, used, before, session = self._counters()
        if step > start:
            self._state = (step, (step, epoch + 1, step, done, used, before, session))

    def progress(self) -> Progress:
        """Returns a consistent, frozen snapshot of every counter."""
        step, epoch, start, done, used, before, session = self._counters()  # one snapshot
        return Progress(
            clock=self._name,
            step=step,
            epoch=epoch,
            step_in_epoch=step - start,
            samples=done,
            tokens=used,
            elapsed_seconds=before + (self._time_fn() - session),
            steps_per_epoch=self._steps_per_epoch,
            batch_size=self._batch_size,
            tokens_per_step=self._tokens_per_step,
        )

    def state_dict(self) -> dict[str, Any]:
        """Returns the counters as a JSON-ready dict, for checkpoints."""
        p = self.progress()
        return {
            "version": _STATE_VERSION,
            "name": p.clock,
            "step": p.step,
            "epoch": p.epoch,
            "step_in_epoch": p.step_in_epoch,
            "samples": p.samples,
            "tokens": p.tokens,
            "elapsed_seconds": p.elapsed_seconds,
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restores the counters saved by :meth:`state_dict`.

        Training time restarts counting from this call, so the time between runs is not
        added. The clock's own ``steps_per_epoch``, ``batch_size`` and ``tokens_per_step``
        are kept: a resumed run may change them.

        Raises:
            ConfigError: the state belongs to a clock of another name, or a field is missing
                or out of range.
        """
        if not isinstance(state, Mapping):
            raise ConfigError("state", "must be a mapping from Clock.state_dict()", state)
        if state.get("version") != _STATE_VERSION:
            raise ConfigError("state['version']", f"must be {_STATE_VERSION}", state.get("version"))
        if state.get("name") != self._name:
            raise ConfigError(
                "state['name']",
                f"must match this clock's name {self._name!r}",
                state.get("name"),
                hint="Each named clock restores its own state.",
            )
        for key in ("step", "epoch", "step_in_epoch", "samples", "tokens"):
            _check_count(f"state[{key!r}]", state.get(key), minimum=0, optional=False)
        if state["step"] > MAX_STEP or state["step_in_epoch"] > state["step"]:
            raise ConfigError("state['step']", "must be in [step_in_epoch, 2**63-1]", state["step"])
        elapsed = _check_seconds("state['elapsed_seconds']", state.get("elapsed_seconds"))
        step = state["step"]
        self._state = (
            step,
            (
                step,
                state["epoch"],
                step - state["step_in_epoch"],
                state["samples"],
                state["tokens"],
                elapsed,
                self._time_fn(),
            ),
        )
        self._step = step


def release_claim(clock: weakref.ref[Clock], owner: str) -> None:
    """Ends ``owner``'s claim on the clock's ticks where it still holds it (the clock
    alive, the claim not passed on): what an attachment's or a follower's finalizer and
    ``detach()`` call."""
    alive = clock()
    if alive is not None and alive.tick_owner == owner:
        alive.release_ticks(owner)
