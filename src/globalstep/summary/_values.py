"""Reading logged values: numbers, arrays and framework tensors into floats and float64 arrays.

A scalar may be a Python or NumPy number, or an array or framework tensor (torch, JAX,
TensorFlow) of exactly one real element. :func:`as_float` reads any of them at once, on
the caller's thread. :func:`tensor_or_float` keeps a framework tensor as it is, checking
only its metadata, so that logging a GPU loss never waits for the device; the writer's
background thread reads it later with :class:`TensorReader`, which reads the tensors on
an accelerator of one batch together (:func:`read_together`) and records a value that
breaks a rule for the training thread to raise. :func:`as_array` reads a histogram's
values.
"""

from __future__ import annotations

import contextlib
import math
import sys
from collections.abc import Callable, Collection
from typing import Any

import numpy as np
import numpy.typing as npt

from globalstep._errors import ConfigError, NonFiniteError
from globalstep.summary._base import KIND, PAYLOAD, SCALAR, SCALARS, Item

__all__ = [
    "FLOAT32_MAX",
    "TOGETHER",
    "TOGETHER_ON_CPU",
    "Record",
    "TensorReader",
    "as_array",
    "as_float",
    "check_float32",
    "float_limit",
    "read_together",
    "short",
    "tensor_or_float",
]

FLOAT32_MAX = 3.4028234663852886e38
"""The largest finite float32: TensorBoard stores a scalar as a float32."""

TOGETHER = 8
"""The fewest tensors of one dtype read in one call."""

TOGETHER_ON_CPU = False
"""Whether CPU tensors are read together too (the tests set it, to run the path on CPU)."""

_TENSOR_TYPES: set[type] = set()  # framework tensor types seen (not NumPy's)
_REAL_DTYPES: set[Any] = set()  # their dtypes found real (not complex): one lookup next time


def float_limit(float32: bool) -> float:
    """The largest magnitude a float value may have without further checks: float32's
    where event files are written, else float64's."""
    return FLOAT32_MAX if float32 else sys.float_info.max


def short(value: Any) -> Any:
    """The value for an error message: a huge int is cut (10**400 has 401 digits)."""
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) > 10**30:
        text = str(value)
        return f"{text[:12]}...({len(text.lstrip('-'))} digits)"
    return value


def as_float(tag: str, value: Any) -> float:
    """Returns ``value`` as a float64: a Python or NumPy number, or an array or framework
    tensor of exactly one element, whatever its shape ((), (1,), (1, 1), ...).

    Raises:
        ConfigError: ``value`` is not a real number, has more or fewer than one element,
            or does not fit a float64.
    """
    parameter = f"value of {tag!r}"
    if isinstance(value, str | bytes) or value is None:
        raise ConfigError(parameter, "must be a real number", value)
    if not isinstance(value, int | float):
        shape = getattr(value, "shape", None)
        if shape is not None:
            try:
                count = math.prod(int(n) for n in shape)
            except (TypeError, ValueError):
                count = -1
            if count != 1:
                raise ConfigError(
                    parameter,
                    "must be one number (an array or tensor of exactly one element)",
                    f"<{type(value).__name__} of shape {tuple(shape)}>",
                )
            item = getattr(value, "item", None)
            if callable(item):
                value = item()
            elif callable(getattr(value, "numpy", None)):  # a TensorFlow tensor
                value = value.numpy().item()
    try:
        number = float(value)
    except OverflowError as err:
        raise ConfigError(
            parameter, "must fit a float64 (|value| <= 1.8e308)", short(value)
        ) from err
    except (TypeError, ValueError) as err:
        raise ConfigError(
            parameter,
            "must be a real number (a Python or NumPy number, a 0-d array, a one-element tensor)",
            value,
        ) from err
    return number


def tensor_or_float(tag: str, value: Any) -> Any:
    """Returns a framework tensor of one real element as it is (its value is read off the
    training thread, so no device synchronisation happens here), anything else as a float.

    Only metadata is checked here: one element, a real dtype.

    Raises:
        ConfigError: as :func:`as_float`, for a tensor that breaks a rule or a value that
            is no tensor.
    """
    kind = type(value)
    if kind not in _TENSOR_TYPES:
        if (
            getattr(value, "shape", None) is None
            or isinstance(value, int | float)
            or kind.__module__.startswith("numpy")
            or not callable(getattr(value, "item", None))
        ):
            return as_float(tag, value)
        _TENSOR_TYPES.add(kind)
    shape = value.shape
    if shape:  # a 0-d tensor (a loss) needs no count
        try:
            count = math.prod(int(n) for n in shape)
        except (TypeError, ValueError):
            count = -1
        if count != 1:
            return as_float(tag, value)  # raises, naming the rule
    dtype = value.dtype
    try:
        if dtype in _REAL_DTYPES:
            return value
    except TypeError:  # an unhashable dtype: checked each time
        pass
    complex_dtype = getattr(dtype, "is_complex", None)
    if complex_dtype is None:
        complex_dtype = "complex" in str(dtype)
    if complex_dtype:
        return as_float(tag, value)  # raises, naming the rule
    with contextlib.suppress(TypeError):
        _REAL_DTYPES.add(dtype)
    return value


def check_float32(tag: str, value: float) -> None:
    """Refuses a finite ``value`` past float32's range (called where event files are
    written, for a value past :data:`FLOAT32_MAX`).

    Raises:
        ConfigError: ``value`` is finite.
    """
    if math.isfinite(value):
        raise ConfigError(
            f"value of {tag!r}",
            "must fit TensorBoard's float32 (|value| <= 3.4028235e38), or be inf or nan",
            value,
            hint="Scale it, or log it with formats=('jsonl',) only.",
        )


def as_array(tag: str, values: Any) -> npt.NDArray[np.float64]:
    """Returns a histogram's ``values`` (any array-like of finite numbers) as a new flat
    float64 array.

    Raises:
        ConfigError: ``values`` is not an array of numbers, or holds one that is not finite.
    """
    try:
        array = np.array(values, dtype=np.float64).ravel()
    except (TypeError, ValueError) as err:
        raise ConfigError(f"values of {tag!r}", "must be an array of numbers", values) from err
    if not np.isfinite(array).all():
        raise ConfigError(f"values of {tag!r}", "must all be finite", values)
    return array


def read_together(items: list[Item], limit: float) -> bool:
    """Reads the accelerator tensors queued in ``items`` with one ``torch.stack(...)`` and
    one ``tolist()`` per dtype that has at least :data:`TOGETHER` of them (``tolist``
    gives each element the number its ``item()`` gives), and puts each number in its item
    in place of its tensor, as :meth:`TensorReader.read` would, where every number of the
    dtype is a float in [-limit, limit]. Anything else (a NaN, a number out of range or
    not a float, tensors that do not stack into one element each) is left as it is, for
    ``item()`` and the checks there. Returns whether every value of ``items`` is now a
    float (nothing left to read or check).

    Only tensors on an accelerator are read together: there each ``item()`` is a
    synchronisation and a copy to the host, where one ``stack`` and one ``tolist`` are
    one of each. On the CPU ``item()`` is a plain read and the stack costs more than it
    saves (measured: 280 us to stack 1,000 0-d tensors against 175 us for their
    ``item()`` calls; inside a torch loop with checkpoints every 100 updates the two were
    within noise).
    """
    torch = sys.modules.get("torch")
    if torch is None:
        return False
    tensor_type = torch.Tensor
    on_cpu = TOGETHER_ON_CPU
    # (value, where it goes: a group and its tag, or the items and an index) of every value
    # that is not a float yet
    pending: list[tuple[Any, Any, Any]] = []
    for index, item in enumerate(items):
        kind = item[KIND]
        if kind == SCALARS:
            group = item[PAYLOAD]
            pending += [(v, group, tag) for tag, v in group.items() if type(v) is not float]
        elif kind == SCALAR and type(item[PAYLOAD]) is not float:
            pending.append((item[PAYLOAD], items, index))
    by_dtype: dict[Any, list[tuple[Any, Any, Any]]] = {}
    for entry in pending:
        value = entry[0]
        if type(value) is tensor_type and (on_cpu or not value.is_cpu):
            by_dtype.setdefault(value.dtype, []).append(entry)
    placed = 0
    for entries in by_dtype.values():
        if len(entries) < TOGETHER:
            continue
        try:
            with torch.no_grad():
                values = torch.stack([e[0] for e in entries]).reshape(-1).tolist()
        except Exception:  # each tensor's item() names what is wrong with it
            continue
        # One element each, every one a float in range (NaN fails the comparison too).
        if not (
            len(values) == len(entries)
            and type(values[0]) is float
            and np.abs(np.array(values)).max() <= limit
        ):
            continue
        for (_, holder, key), number in zip(entries, values, strict=True):
            if holder is items:  # a single scalar: its item, with the number
                kind, tag, step, wall_time, _ = items[key]
                items[key] = (kind, tag, step, wall_time, number)
            else:
                holder[key] = number  # a value, not a key: the group's dict keeps its order
        placed += len(entries)
    return placed == len(pending)


Record = Callable[[BaseException, str, int], None]
"""Keeps an error for the training thread: ``record(error, path, points_lost)``."""


class TensorReader:
    """Reads the tensors queued as values, on the writer's background thread.

    Args:
        logdir: the writer's directory, named by the errors it records.
        float32: whether event files are written (a value must then fit a float32).
        guarded: the tags whose values must be finite.
        record: keeps an error for the training thread's next call to raise.
    """

    def __init__(
        self, logdir: str, *, float32: bool, guarded: Collection[str], record: Record
    ) -> None:
        self._logdir = logdir
        self._float32 = float32
        self._guarded = guarded
        self._record = record
        self._limit = float_limit(float32)

    def read(self, items: list[Item], on_device: bool) -> None:
        """Reads the tensors of ``items`` in place (a device synchronisation); applies the
        guards and the float32 rule that need the value. A value that breaks them is
        recorded, to be raised at the training thread's next call, and its point is not
        written.

        A group's dict gets each tensor's number in place of the tensor (its keys, which
        the training thread may still read, stay as they are).
        """
        limit = self._limit
        refused: list[int] = []
        if (on_device or TOGETHER_ON_CPU) and read_together(items, limit):
            return
        for index, item in enumerate(items):
            kind = item[KIND]
            if kind == SCALARS:
                group = item[PAYLOAD]
                for tag, payload in group.items():
                    if type(payload) is not float:
                        try:
                            value = payload.item()  # a one-element tensor's number
                        except Exception:  # _group names the rule broken
                            break
                        # (a NaN or an infinite value fails the range check too)
                        if type(value) is not float or not -limit <= value <= limit:
                            break
                        group[tag] = value  # a value, not a key: the dict keeps its order
                else:
                    continue
                items[index] = self._group(item)
            elif kind == SCALAR and type(item[PAYLOAD]) is not float:
                kind, tag, step, wall_time, payload = item
                number = self._value(tag, payload, step)
                if number is None:
                    refused.append(index)
                else:
                    items[index] = (kind, tag, step, wall_time, number)
        for index in reversed(refused):
            del items[index]

    def _group(self, item: Item) -> Item:
        """:meth:`read` of a group with a value that is not a plain finite number (in
        range): the group as written, a new dict without the points refused."""
        kind, _, step, wall_time, group = item
        dropped = []
        for tag, payload in group.items():
            if type(payload) is not float:
                value = self._value(tag, payload, step)
                if value is None:
                    dropped.append(tag)
                else:
                    group[tag] = value
        if not dropped:
            return item
        return (kind, "", step, wall_time, {t: v for t, v in group.items() if t not in dropped})

    def _value(self, tag: str, payload: Any, step: int) -> float | None:
        """The number of a tensor, or None where it breaks a rule (recorded for the
        training thread)."""
        try:
            value = payload.item()  # a one-element tensor's number
        except Exception:  # as_float below names the rule broken
            value = None
        try:
            if type(value) is not float:  # an int, bool or complex one, or no number
                value = as_float(tag, payload)
            if (value > FLOAT32_MAX or value < -FLOAT32_MAX) and self._float32:
                check_float32(tag, value)
        except ConfigError as err:
            self._record(err, self._logdir, 1)
            return None
        if value - value != 0.0 and tag in self._guarded:
            self._record(NonFiniteError(tag, value, step), self._logdir, 0)
        number: float = value
        return number
