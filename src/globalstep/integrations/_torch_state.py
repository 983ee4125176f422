"""Torch state in checkpoint trees: tensors, modules, optimizers, generators, the process RNG.

The adapters here are registered with :mod:`globalstep.checkpoint._tree.adapters` when this module
is imported, which the registry does the first time a torch object is saved or a torch node
restored. Nothing is pickled: a tensor becomes a NumPy array of the same bits (bfloat16 and
the float8 kinds through ``ml_dtypes``; ``complex32`` as pairs of float16), restored in place
into the template's tensor, on the template's device.
"""

from __future__ import annotations

import random
import sys
from collections.abc import Mapping
from typing import Any

import numpy as np
import torch

from globalstep._errors import ConfigError, CorruptCheckpointError
from globalstep.checkpoint import Adapter, Sharded, add_adapter

__all__ = [
    "GeneratorAdapter",
    "ModuleAdapter",
    "OptimizerAdapter",
    "RNGState",
    "TensorAdapter",
]


class RNGState:
    """The process's random generators, as one object to put into a checkpoint tree.

    Saves and restores Python's ``random``, NumPy's global generator (``np.random.seed``),
    torch's CPU generator (dropout, ``torch.randn``) and, where CUDA is initialised, every
    CUDA device's generator, so that a resumed run draws the numbers an uninterrupted one
    would.

    Args:
        cuda: include CUDA generators; default: when CUDA is available.

    Example:
        >>> import random, torch
        >>> rng = RNGState()
        >>> saved = rng.state_dict()
        >>> a = (random.random(), torch.rand(1).item())
        >>> rng.load_state_dict(saved)
        >>> (random.random(), torch.rand(1).item()) == a
        True
    """

    globalstep_per_rank = True
    """Each rank of a distributed checkpoint saves its own (see ``checkpoint.perrank``)."""

    def __init__(self, *, cuda: bool | None = None) -> None:
        if cuda is not None and not isinstance(cuda, bool):
            raise ConfigError("cuda", "must be a bool or None", cuda)
        self._cuda = torch.cuda.is_available() if cuda is None else cuda

    def __repr__(self) -> str:
        return f"RNGState(cuda={self._cuda})"

    def state_dict(self) -> dict[str, Any]:
        """Returns every generator's state as arrays and numbers (no pickle)."""
        version, words, gauss = random.getstate()
        name, keys, pos, has_gauss, cached = np.random.get_state(legacy=True)
        state: dict[str, Any] = {
            "python": {
                "version": version,
                "state": np.array(words, dtype=np.uint32),
                "gauss": gauss,
            },
            "numpy": {
                "name": name,
                "keys": np.asarray(keys, dtype=np.uint32).copy(),
                "pos": int(pos),
                "has_gauss": int(has_gauss),
                "cached_gaussian": float(cached),
            },
            "torch": torch.get_rng_state().numpy().copy(),
        }
        if self._cuda:
            state["cuda"] = [s.numpy().copy() for s in torch.cuda.get_rng_state_all()]
        return state

    def reseed(self, seed: int) -> None:
        """Seeds every generator afresh from ``seed`` (an int in [0, 2**64)): Python's,
        NumPy's global one, torch's CPU one and, where included, every CUDA device's, each
        from its own word of ``numpy.random.SeedSequence(seed)``.

        Raises:
            ConfigError: ``seed`` is not an int in [0, 2**64).
        """
        if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < 2**64:
            raise ConfigError("seed", "must be an int in [0, 2**64)", seed)
        words = np.random.SeedSequence(seed).generate_state(4, np.uint64)
        random.seed(int(words[0]))
        np.random.seed(int(words[1]) % 2**32)
        torch.manual_seed(int(words[2]))
        if self._cuda:
            torch.cuda.manual_seed_all(int(words[3]))

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Puts back the generators' states saved by :meth:`state_dict`.

        Raises:
            ConfigError: the state is malformed, or it holds CUDA generators for another
                number of devices than this process has (``RNGState(cuda=False)`` to skip).
        """
        try:
            py, npy = state["python"], state["numpy"]
            words = tuple(int(w) for w in np.asarray(py["state"]).tolist())
            gauss = py["gauss"]
            python_state = (int(py["version"]), words, None if gauss is None else float(gauss))
            numpy_state = (
                str(npy["name"]),
                np.asarray(npy["keys"], dtype=np.uint32),
                int(npy["pos"]),
                int(npy["has_gauss"]),
                float(npy["cached_gaussian"]),
            )
            torch_state = torch.from_numpy(np.array(state["torch"], dtype=np.uint8))
        except (KeyError, TypeError, ValueError) as err:
            raise ConfigError(
                "state", "must be a mapping from RNGState.state_dict()", type(state).__name__
            ) from err
        cuda = state.get("cuda") if self._cuda else None
        if cuda is not None and len(cuda) != torch.cuda.device_count():
            raise ConfigError(
                "state['cuda']",
                f"must hold one generator per CUDA device ({torch.cuda.device_count()})",
                len(cuda),
                hint="Pass RNGState(cuda=False) to restore the CPU generators only.",
            )
        try:
            random.setstate(python_state)
            np.random.set_state(numpy_state)
            torch.set_rng_state(torch_state)
        except (TypeError, ValueError, RuntimeError) as err:
            raise ConfigError(
                "state", "must be a mapping from RNGState.state_dict()", repr(err)
            ) from err
        if cuda is not None:
            torch.cuda.set_rng_state_all(
                [torch.from_numpy(np.array(s, dtype=np.uint8)) for s in cuda]
            )


# --- tensors ---------------------------------------------------------------------------

# Torch dtypes NumPy lacks, stored as their ml_dtypes twin (the safetensors codes BF16, F8_*),
# through an integer view of the same width.
_ML_DTYPES = {
    "bfloat16": torch.int16,
    "float8_e4m3fn": torch.uint8,
    "float8_e4m3fnuz": torch.uint8,
    "float8_e5m2": torch.uint8,
    "float8_e5m2fnuz": torch.uint8,
    "float8_e8m0fnu": torch.uint8,
}
_NUMPY_KINDS = {
    torch.bool,
    torch.uint8,
    torch.int8,
    torch.int16,
    torch.int32,
    torch.int64,
    torch.uint16,
    torch.uint32,
    torch.uint64,
    torch.float16,
    torch.float32,
    torch.float64,
    torch.complex64,
    torch.complex128,
}


def _dtype_name(dtype: Any) -> str:
    return str(dtype).removeprefix("torch.")


def _raw_dtype(name: str) -> Any:
    dtype = getattr(torch, name, None)
    if not isinstance(dtype, torch.dtype):
        raise CorruptCheckpointError(f"state.json: unknown torch dtype {name!r}")
    return dtype


def _plain(tensor: Any) -> Any:
    """The tensor as a CPU tensor without conjugate or negative bits (a view where it can)."""
    if tensor.is_quantized or tensor.layout != torch.strided:
        raise ConfigError(
            "state",
            "tensors must be dense and not quantized",
            f"{tensor.layout}, {tensor.dtype}",
            hint="Save tensor.to_dense() or tensor.dequantize() instead.",
        )
    t = tensor.detach()
    if t.device.type != "cpu":
        t = t.cpu()
    return t.resolve_conj().resolve_neg()


def _as_numpy(t: Any) -> Any:
    """A CPU tensor's bits as a NumPy array (sharing its memory) or, for a dtype NumPy has no
    twin of, ``{"torch_dtype", "shape", "bytes"}`` with the raw bytes."""
    if t.dtype in _NUMPY_KINDS:
        return t.numpy()
    name = _dtype_name(t.dtype)
    if name in _ML_DTYPES:
        import ml_dtypes

        return t.view(_ML_DTYPES[name]).numpy().view(getattr(ml_dtypes, name))
    flat = t.reshape(-1) if t.is_contiguous() else t.contiguous().reshape(-1)
    return {"torch_dtype": name, "shape": list(t.shape), "bytes": flat.view(torch.uint8).numpy()}


def _from_numpy(state: Any) -> Any:
    """The CPU tensor :func:`_as_numpy` stored (sharing the array's memory where writable)."""
    if isinstance(state, Mapping):
        dtype = _raw_dtype(str(state["torch_dtype"]))
        raw = np.asarray(state["bytes"], dtype=np.uint8)
        raw = raw if raw.flags.writeable and raw.flags.c_contiguous else raw.copy()
        return torch.from_numpy(raw).view(dtype).reshape([int(d) for d in state["shape"]])
    array = np.asarray(state)
    if not ((array.flags.writeable and array.flags.c_contiguous) or array.ndim == 0):
        array = np.ascontiguousarray(array).copy()
    name = array.dtype.name
    if name in _ML_DTYPES:
        view = np.dtype(np.int16 if name == "bfloat16" else np.uint8)
        return torch.from_numpy(array.view(view)).view(getattr(torch, name))
    if not array.flags.writeable:
        array = array.copy()
    return torch.from_numpy(array)


def _shares_memory(t: Any, state: Any) -> bool:
    array = state["bytes"] if isinstance(state, Mapping) else state
    return (
        isinstance(array, np.ndarray)
        and t.device.type == "cpu"
        and array.__array_interface__["data"][0] == t.data_ptr()
        and t.is_contiguous()
        and array.nbytes == t.numel() * t.element_size()
    )


def _is_dtensor(obj: Any) -> bool:
    """True for a ``torch.distributed.tensor.DTensor`` (imported only if already loaded)."""
    module = sys.modules.get("torch.distributed.tensor")
    dtensor = getattr(module, "DTensor", None)
    return dtensor is not None and isinstance(obj, dtensor)


def _sharded(obj: Any) -> Sharded:
    return Sharded(obj, _dtype_name(obj.dtype), tuple(int(d) for d in obj.shape))


class TensorAdapter(Adapter):
    """``torch.Tensor``: its bits as a NumPy array, restored in place on its own device.

    A ``DTensor`` (FSDP2's parameters) is a :class:`~globalstep.checkpoint._tree.flatten.Sharded`
    leaf: each rank writes its own shard (see :mod:`globalstep.checkpoint._ranks.coordinated`).
    """

    name = "torch.Tensor"

    def matches(self, obj: Any) -> bool:
        return isinstance(obj, torch.Tensor)

    def save(self, obj: Any) -> Any:
        if _is_dtensor(obj):
            return _sharded(obj)
        return _as_numpy(_plain(obj))

    def template(self, obj: Any) -> Any:
        if _is_dtensor(obj):
            return _sharded(obj)
        if obj.device.type == "cpu" and not (obj.is_conj() or obj.is_neg()):
            return _as_numpy(_plain(obj))  # a view: the reader fills the tensor itself
        return _as_numpy(torch.empty_like(obj, device="cpu").resolve_conj().resolve_neg())

    def apply(self, obj: Any, state: Any) -> None:
        if state is obj:  # a sharded tensor, filled in place
            return
        if isinstance(state, torch.Tensor):
            with torch.no_grad():
                obj.copy_(state.reshape(obj.shape))
            return
        if not _shares_memory(obj, state):
            with torch.no_grad():
                obj.copy_(_from_numpy(state).reshape(obj.shape))

    def rebuild(self, state: Any) -> Any:
        if isinstance(state, torch.Tensor):  # a sharded tensor, read whole
            return state
        return _from_numpy(state)


# --- modules -------------------------------------------------------------------------------

_COMPILED = "_orig_mod."


def _unwrap(module: Any) -> Any:
    """The module under ``torch.compile`` and DDP / DataParallel wrappers."""
    while True:
        if type(module).__name__ == "OptimizedModule" and hasattr(module, "_orig_mod"):
            module = module._orig_mod
        elif isinstance(module, torch.nn.DataParallel | torch.nn.parallel.DistributedDataParallel):
            module = module.module
        else:
            return module


def _canonical(key: str) -> str:
    """A state-dict key without the ``_orig_mod.`` of compiled submodules."""
    return key.replace(_COMPILED, "") if _COMPILED in key else key


def _module_state(module: Any) -> dict[str, Any]:
    own = _unwrap(module).state_dict()
    state = {_canonical(k): v for k, v in own.items()}
    if len(state) != len(own):
        raise ConfigError("state", "module keys must stay distinct without '_orig_mod.'", list(own))
    return state


class ModuleAdapter(Adapter):
    """``torch.nn.Module``: its state dict with the keys of the unwrapped module.

    ``torch.compile``'s ``_orig_mod.`` and DDP's ``module.`` prefixes are not stored, so a
    checkpoint of a wrapped model restores into the bare one and the other way round.
    """

    name = "torch.nn.Module"

    def matches(self, obj: Any) -> bool:
        return isinstance(obj, torch.nn.Module)

    def save(self, obj: Any) -> Any:
        return _module_state(obj)

    def apply(self, obj: Any, state: Any) -> None:
        inner = _unwrap(obj)
        keys = {_canonical(k): k for k in inner.state_dict(keep_vars=True)}
        inner.load_state_dict({keys.get(k, k): v for k, v in state.items()}, strict=True)


# --- optimizers ------------------------------------------------------------------------------


class _Opaque:
    """A subtree whose shape the fit check leaves alone (an optimizer's state before its
    first step is empty, and schedulers add their own keys to param groups)."""

    def __init__(self, value: Any) -> None:
        self._value = value

    def state_dict(self) -> Any:
        return self._value

    def load_state_dict(self, state: Any) -> None:
        del state  # the adapter's apply() puts the state in


class OptimizerAdapter(Adapter):
    """``torch.optim.Optimizer``: per-parameter state under string keys, and param groups.

    The fit check compares the number of groups and of parameters per group; the state and
    the groups' options are restored whatever they hold (a fresh optimizer has no state yet).
    """

    name = "torch.optim.Optimizer"

    def matches(self, obj: Any) -> bool:
        return isinstance(obj, torch.optim.Optimizer)

    def save(self, obj: Any) -> Any:
        sd = obj.state_dict()
        groups = [
            {
                "params": list(g["params"]),
                "options": _Opaque({k: v for k, v in g.items() if k != "params"}),
            }
            for g in sd["param_groups"]
        ]
        return {
            "state": _Opaque({str(k): v for k, v in sd["state"].items()}),
            "param_groups": groups,
        }

    def template(self, obj: Any) -> Any:
        groups = [
            {"params": list(range(len(g["params"]))), "options": _Opaque(None)}
            for g in obj.param_groups
        ]
        return {"state": _Opaque(None), "param_groups": groups}

    def apply(self, obj: Any, state: Any) -> None:
        obj.load_state_dict(self.rebuild(state))

    def rebuild(self, state: Any) -> Any:
        try:
            return {
                "state": {int(k): v for k, v in state["state"].items()},
                "param_groups": [
                    {**g["options"], "params": list(g["params"])} for g in state["param_groups"]
                ],
            }
        except (KeyError, TypeError, ValueError, AttributeError) as err:
            raise CorruptCheckpointError(
                f"state.json: malformed optimizer state ({err!r})"
            ) from err


# --- generators ------------------------------------------------------------------------------


class GeneratorAdapter(Adapter):
    """``torch.Generator``: its device and state bytes, set back with ``set_state``."""

    name = "torch.Generator"
    per_rank = True
    reseeds = True

    def matches(self, obj: Any) -> bool:
        return isinstance(obj, torch.Generator)

    def save(self, obj: Any) -> Any:
        return {"device": str(obj.device), "state": obj.get_state().numpy().copy()}

    def apply(self, obj: Any, state: Any) -> None:
        obj.set_state(torch.from_numpy(np.array(state["state"], dtype=np.uint8)))

    def rebuild(self, state: Any) -> Any:
        generator = torch.Generator(device=str(state["device"]))
        self.apply(generator, state)
        return generator

    def reseed(self, obj: Any, seed: int) -> None:
        obj.manual_seed(seed)


for _adapter in (TensorAdapter(), ModuleAdapter(), OptimizerAdapter(), GeneratorAdapter()):
    add_adapter(_adapter)
