"""The tree codec: state trees flattened into named arrays plus a JSON structure, and back
(``leaves``: keys, dtypes, stateful objects; ``flatten``; ``build``: ``unflatten``; ``fit``:
a template's fit; ``templates``: the adapters' glue; ``adapters``: framework objects).

A state tree is nested dicts (string keys), lists and tuples whose leaves are NumPy arrays
(any fixed-size dtype, bfloat16 and the float8 types of ``ml_dtypes`` included), NumPy
scalars, Python ``bool``/``int``/``float``/``str``, ``None``, objects with
``state_dict()`` / ``load_state_dict()`` (a :class:`~globalstep._clock.Clock`, triggers, ...),
and framework objects that an :mod:`~globalstep.checkpoint._tree.adapters` adapter takes (torch
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
    >>> from globalstep.checkpoint import flatten_tree as flatten
    >>> flat = flatten({"w": np.zeros(2, np.float32), "lr": 0.1})
    >>> sorted(flat.arrays), flat.structure["dict"]["lr"]
    (['w'], {'value': 0.1})
"""
