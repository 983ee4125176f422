"""State trees: flattening into named arrays plus a JSON structure, and back, as one import
(each concept in a module of its own: :mod:`~globalstep.checkpoint.leaves`,
:mod:`~globalstep.checkpoint.flatten`, :mod:`~globalstep.checkpoint.templates`,
:mod:`~globalstep.checkpoint.build`, :mod:`~globalstep.checkpoint.fit`).

A state tree is nested dicts (string keys), lists and tuples whose leaves are NumPy arrays
(any fixed-size dtype, bfloat16 and the float8 types of ``ml_dtypes`` included), NumPy
scalars, Python ``bool``/``int``/``float``/``str``, ``None``, objects with
``state_dict()`` / ``load_state_dict()`` (a :class:`~globalstep.clock.Clock`, triggers, ...),
and framework objects that an :mod:`~globalstep.checkpoint.adapters` adapter takes (torch
modules and tensors, JAX arrays and pytrees, Keras models). A dataclass instance is saved
as a dict of its fields and a namedtuple as a tuple; restored against a template of the
same kind they come back as the template's class (without one, as a dict and a tuple: no
class is ever looked up by a name read from a file). A template's own dicts, lists and
dataclasses that are not frozen are restored in place, their entries set to the restored
values once the whole fit is known. Arrays are named by their path,
``model/layer1/weight``; everything else goes into a JSON node. Nothing is pickled: an array
of Python objects is refused.

Example:
    >>> import numpy as np
    >>> flat = flatten({"w": np.zeros(2, np.float32), "lr": 0.1})
    >>> sorted(flat.arrays), flat.structure["dict"]["lr"]
    (['w'], {'value': 0.1})
"""

from __future__ import annotations

from globalstep.checkpoint.build import RestoreReport, unflatten
from globalstep.checkpoint.fit import Fit, check_fit, fit_template, placeholders
from globalstep.checkpoint.flatten import Flattened, Sharded, array_nodes, flatten, sharded_nodes
from globalstep.checkpoint.leaves import CODE_ITEMSIZE as CODE_ITEMSIZE
from globalstep.checkpoint.leaves import (
    SAFETENSORS_CODES,
    check_key,
    decode_dtype,
    encode_dtype,
    float_from_json,
    float_to_json,
    is_shape,
    is_stateful,
    safetensors_code,
)
from globalstep.checkpoint.templates import template_arrays, template_sharded

__all__ = [
    "SAFETENSORS_CODES",
    "Fit",
    "Flattened",
    "RestoreReport",
    "Sharded",
    "array_nodes",
    "check_fit",
    "check_key",
    "decode_dtype",
    "encode_dtype",
    "fit_template",
    "flatten",
    "float_from_json",
    "float_to_json",
    "is_shape",
    "is_stateful",
    "placeholders",
    "safetensors_code",
    "sharded_nodes",
    "template_arrays",
    "template_sharded",
    "unflatten",
]
