"""Every error globalstep raises, and every warning it gives: the whole tree in one place.

Each exception derives from :class:`GlobalStepError` and from the built-in exception that
matches what went wrong, so ``except ValueError`` keeps working for callers who do not know
globalstep. Each carries its data as attributes (``err.parameter``, ``err.step``,
``err.path``, ...) so that code can react without parsing the message.

The tree::

    GlobalStepError
    ├── ConfigError (ValueError)                  bad parameter: .parameter, .value, .rule
    │   ├── DurationError                         malformed duration string: .text
    │   ├── InvalidStepError (also a StepError)   not a step, where one is asked for: .step
    │   ├── ConfigTypeError (TypeError)           where torch raises TypeError
    │   └── ConfigZeroDivisionError (ZeroDivisionError)  where torch divides by zero
    ├── StepError (ValueError)                    bad step or tick: .step
    │   ├── StepMismatchError                     ranks at different steps: .steps, .ranks
    │   └── StepZeroDivisionError (ZeroDivisionError)    a step torch divides by zero at
    ├── EmptyBoundariesError (IndexError)         Keras' PiecewiseConstantDecay with no boundaries
    ├── ConversionError (ValueError)              a duration that cannot become steps: .missing
    ├── MissingDependencyError (ImportError)      an optional extra is not installed: .extra
    ├── CheckpointError (OSError)                 saving or restoring failed: .path
    │   ├── CheckpointNotFoundError (FileNotFoundError)
    │   ├── CheckpointExistsError (FileExistsError)
    │   ├── CorruptCheckpointError                bad checksum, truncated file, garbage JSON
    │   ├── LockError                             another writer holds the directory: .holder
    │   └── DistributedCheckpointError            a rank failed or did not answer: .ranks
    ├── RestoreMismatchError (ValueError)         the checkpoint does not fit the template: .report
    │   └── WorldSizeError                        a per-rank leaf saved on N ranks, restored
    │                                             on M, that cannot be remapped: .key
    ├── SummaryWriteError (OSError)               a summary writer's background write failed: .path
    ├── TrackerRefusedError (ValueError)          a tracker refused points for good (a tracker
    │                                             client raises it; never retried)
    ├── TracingError (RuntimeError)               a per-update call traced by tf.function or
    │                                             jax.jit: .call, .tracer
    ├── PeerLostError (ConnectionError)           a rank of the process group died: .ranks
    ├── NonFiniteError (ArithmeticError)          NaN or inf under a guard: .step, .tag, .value
    └── DivergenceError (ArithmeticError)         bad updates past the rollback limit: .steps

The warnings (each a ``UserWarning``, exported also by the module that gives it):
``CheckpointWarning`` (an entry retention skipped or could not delete), ``StepOrderWarning``
(a curve folding back), ``FrozenStepWarning`` (a step that does not move),
``UncountedEpochWarning``, ``ConfigDriftWarning`` (a resume with another configuration),
``CompatDifferenceWarning``, ``KerasDifferenceWarning`` and ``OptaxScheduleWarning`` (where
a compat schedule deliberately differs from its peer), ``WorldSizeWarning`` (random
generators re-seeded on restoring a checkpoint of another number of ranks),
``TrackerWarning`` (points a tracker format could not send: dropped past its buffer,
refused, or still unsent at close), ``ResumeDivergenceWarning`` (a resumed run logged
another value than its crashed attempt at a step both logged).

Example:
    >>> from globalstep._errors import ConfigError
    >>> err = ConfigError("decay_steps", "must be > 0", 0)
    >>> str(err)
    '`decay_steps` must be > 0; got decay_steps=0.'
    >>> isinstance(err, ValueError)
    True
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "CheckpointError",
    "CheckpointExistsError",
    "CheckpointNotFoundError",
    "ConfigError",
    "ConversionError",
    "CorruptCheckpointError",
    "DivergenceError",
    "DurationError",
    "GlobalStepError",
    "LockError",
    "MissingDependencyError",
    "NonFiniteError",
    "PeerLostError",
    "RestoreMismatchError",
    "StepError",
    "StepMismatchError",
    "SummaryWriteError",
    "TracingError",
    "TrackerRefusedError",
    "WorldSizeError",
]


class GlobalStepError(Exception):
    """The root of every error globalstep raises."""


class ConfigError(GlobalStepError, ValueError):
    """A parameter broke a rule.

    Args:
        parameter: the parameter's name, as the caller spelled it.
        rule: what the value must satisfy, e.g. ``"must be > 0"``.
        value: the value received.
        hint: an optional sentence that says what to change.
    """

    def __init__(self, parameter: str, rule: str, value: Any, hint: str | None = None) -> None:
        self.parameter = parameter
        self.rule = rule
        self.value = value
        message = f"`{parameter}` {rule}; got {parameter}={value!r}."
        if hint:
            message = f"{message} {hint}"
        super().__init__(message)


class DurationError(ConfigError):
    """A duration string does not follow the grammar; the message shows the grammar."""

    def __init__(self, parameter: str, text: Any, grammar: str) -> None:
        self.text = text
        super().__init__(parameter, f"must be a duration ({grammar})", text)


class StepError(GlobalStepError, ValueError):
    """A step or a tick is negative, not an integer, or out of range."""

    def __init__(self, message: str, step: Any = None) -> None:
        self.step = step
        super().__init__(message)


class StepMismatchError(StepError):
    """The ranks of a distributed run are at different steps.

    ``steps`` lists every rank's step (index = rank in the group), ``ranks`` the ranks
    whose step differs from the most common one, ``step`` that most common step.
    """

    def __init__(self, message: str, steps: list[int], ranks: list[int], step: int) -> None:
        self.steps = steps
        self.ranks = ranks
        super().__init__(message, step)


class ConversionError(GlobalStepError, ValueError):
    """A duration cannot be turned into steps because a piece of information is missing."""

    def __init__(self, message: str, missing: str) -> None:
        self.missing = missing
        super().__init__(message)


class MissingDependencyError(GlobalStepError, ImportError):
    """An optional dependency is not installed; the message names the extra that brings it."""

    def __init__(self, module: str, extra: str, purpose: str) -> None:
        self.module = module
        self.extra = extra
        super().__init__(
            f"{purpose} needs `{module}`, which is not installed: "
            f"pip install 'globalstep[{extra}]'",
            name=module,
        )


class CheckpointError(GlobalStepError, OSError):
    """Saving or restoring a checkpoint failed; ``path`` names the file or directory."""

    def __init__(self, message: str, path: Any = None) -> None:
        self.path = path
        # OSError's own constructor would reinterpret two arguments as (errno, strerror).
        super().__init__(message)

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


class CheckpointNotFoundError(CheckpointError, FileNotFoundError):
    """No committed checkpoint exists where one was asked for."""


class CheckpointExistsError(CheckpointError, FileExistsError):
    """A checkpoint for this step exists already and ``force=True`` was not given."""


class CorruptCheckpointError(CheckpointError):
    """A checkpoint exists but cannot be trusted: bad checksum, truncated file, garbage JSON."""


class LockError(CheckpointError):
    """Another live writer holds the checkpoint directory's lock; ``holder`` names it."""

    def __init__(self, message: str, path: Any = None, holder: Any = None) -> None:
        self.holder = holder
        super().__init__(message, path)


class RestoreMismatchError(GlobalStepError, ValueError):
    """A checkpoint does not fit the template; ``report`` lists what differs."""

    def __init__(self, message: str, report: Any = None) -> None:
        self.report = report
        super().__init__(message)


class WorldSizeError(RestoreMismatchError):
    """A per-rank leaf of a checkpoint saved on another number of ranks cannot be restored:
    it is neither a random generator nor an object with ``load_state_from_ranks``.

    Attributes:
        key: the leaf's flat name.
        saved_world_size: the number of ranks that saved the checkpoint.
        world_size: the number of ranks restoring it.
    """

    def __init__(self, message: str, *, key: str, saved_world_size: int, world_size: int) -> None:
        self.key = key
        self.saved_world_size = saved_world_size
        self.world_size = world_size
        super().__init__(message)


class SummaryWriteError(GlobalStepError, OSError):
    """A summary writer could not write its file (disk full, ...); ``path`` names the file.

    Raised on the training thread, at the writer's next call or at ``close()``; the
    original error is the ``__cause__``. What was flushed before stays on disk.
    """

    def __init__(self, message: str, path: Any = None) -> None:
        self.path = path
        super().__init__(message)

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


class TracingError(GlobalStepError, RuntimeError):
    """A call that must run once per update ran while ``tf.function`` or ``jax.jit`` traced
    it: its Python would run once, at tracing, instead of once per update.

    ``call`` names the call (``"clock.tick()"``), ``tracer`` the tracer (``"tf.function"``,
    ``"jax.jit"``); the message says what to do instead.
    """

    # AutoGraph re-raises an error from traced code as a new one of the same type built
    # from a message, or as a StagingError; this mark (AutoGraph's own) lets this one
    # through unchanged, attributes included.
    ag_pass_through = True

    def __init__(self, message: str, call: str, tracer: str) -> None:
        self.call = call
        self.tracer = tracer
        super().__init__(message)


class NonFiniteError(GlobalStepError, ArithmeticError):
    """A guarded value is NaN or infinite; carries the step, the tag and the value."""

    def __init__(self, tag: str, value: float, step: int | None) -> None:
        self.tag = tag
        self.value = value
        self.step = step
        super().__init__(f"`{tag}` is {value!r} at step {step}: a guarded value must be finite.")


class DivergenceError(GlobalStepError, ArithmeticError):
    """Training keeps producing bad updates (non-finite or spiking loss) past the rollback
    policy's limit, or has no checkpoint to roll back to; ``steps`` lists the bad steps."""

    def __init__(self, message: str, steps: list[int]) -> None:
        self.steps = steps
        super().__init__(message)


# Errors raised by one part (their own modules export them under the same names).


class StepZeroDivisionError(StepError, ZeroDivisionError):
    """A step at which torch's scheduler divides by zero with these parameters."""


class InvalidStepError(ConfigError, StepError):
    """A value that is not a step (an int in [0, 2**63-1]) where a step is asked for: a bad
    parameter (``.parameter``, ``.rule``, ``.value``) and a bad step (``.step``, the value
    received), raised by :func:`globalstep._clock.check_step` alone."""

    def __init__(self, parameter: str, rule: str, value: Any, *, step: Any) -> None:
        super().__init__(parameter, rule, value)
        self.step = step


class ConfigZeroDivisionError(ConfigError, ZeroDivisionError):
    """A parameter torch divides by zero at construction, refused here with what to change."""


class ConfigTypeError(ConfigError, TypeError):
    """A parameter of a kind torch refuses with ``TypeError`` (a lambda that is not callable)."""


class EmptyBoundariesError(GlobalStepError, IndexError):
    """``PiecewiseConstantDecay`` called with no boundaries (Keras raises IndexError)."""


class DistributedCheckpointError(CheckpointError):
    """A distributed save failed on a rank, or a rank did not answer in time.

    Attributes:
        ranks: the ranks that failed or did not answer.
        timeout_seconds: the timeout that applied.
    """

    def __init__(
        self,
        message: str,
        path: Any = None,
        ranks: list[int] | None = None,
        timeout_seconds: float | None = None,
    ) -> None:
        self.ranks = list(ranks or [])
        self.timeout_seconds = timeout_seconds
        super().__init__(message, path)


class PeerLostError(GlobalStepError, ConnectionError):
    """A rank of the process group died while this one waited for it (in a collective of
    an engine whose liveness globalstep watches: TensorFlow's multi-worker run).

    Attributes:
        ranks: the ranks found dead.
    """

    def __init__(self, message: str, ranks: list[int]) -> None:
        self.ranks = list(ranks)
        super().__init__(message)


# Warnings (each module that warns exports its own under the same name).


class KerasDifferenceWarning(UserWarning):
    """A schedule was built with arguments where compat deliberately differs from Keras."""


class FrozenStepWarning(UserWarning):
    """The step has not advanced over many reads while training goes on."""


class StepOrderWarning(UserWarning):
    """A step lower than one already written, without a restart mark: the curve folds back."""


class OptaxScheduleWarning(UserWarning):
    """A schedule built as optax builds it, where optax silently changes what was asked
    (a constant schedule for ``transition_steps <= 0``, boundaries ignored)."""


class CompatDifferenceWarning(UserWarning):
    """A compat schedule deliberately differs from its peer here (the docstring says how):
    warned at construction, so that a migration never changes numbers silently."""


class ConfigDriftWarning(UserWarning):
    """A run resumed with a configuration other than its checkpoint's."""


class UncountedEpochWarning(UserWarning):
    """An epoch trigger checked on a clock that cannot count epochs by itself."""


class CheckpointWarning(UserWarning):
    """An entry of the checkpoint directory was skipped or could not be deleted.

    The save that met it succeeded; the entry is named once, and retried at later saves.
    """


class WorldSizeWarning(UserWarning):
    """A checkpoint saved on N ranks was restored on M: its per-rank random generators were
    re-seeded deterministically (from the saved states, the new rank and the step), so the
    run cannot continue exactly as the uninterrupted one would."""


class ResumeDivergenceWarning(UserWarning):
    """A run resumed from a checkpoint logged, at a step its crashed attempt had logged too,
    another value than that attempt (the :class:`~globalstep.run.Run`'s resume audit): the
    run does not continue exactly as it would have without the crash. Likely causes: state
    that the checkpoint does not hold (a random generator, a data loader that starts its
    epoch again), or nondeterministic kernels. Given once per run, naming the first tag and
    step."""


class TrackerRefusedError(GlobalStepError, ValueError):
    """A tracker refused points for good (an invalid metric name, a value it cannot hold):
    raised by a tracker format's client (``summary/_mlflow.py``, ``summary/_wandb.py``) so
    that the points are not retried; the writer drops them and counts them in its
    :class:`TrackerWarning`."""


class TrackerWarning(UserWarning):
    """A tracker format (MLflow, W&B) could not send every point: given once, at the
    writer's close, counting the points dropped past the bound of its buffer, refused by
    the tracker, or not sent within ``close_seconds`` (those stay in the local record and
    are sent when a writer opens the directory again). TensorBoard and JSONL files are
    not affected: they hold every point."""
