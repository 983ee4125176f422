"""The peers' own names, arguments, defaults and dtypes, so that migrating is renaming an import.

``globalstep.compat.tf`` (``tf.compat.v1.train`` decays and global-step functions, TF's
``Checkpoint``/``CheckpointManager``, ``log_every_n``/``log_first_n``),
``globalstep.compat.keras`` (``keras.optimizers.schedules``), ``globalstep.compat.optax``
(``optax`` schedules), ``globalstep.compat.torch`` (``torch.optim.lr_scheduler``'s
schedules as closed forms) and ``globalstep.compat.transformers`` (Hugging Face's
``get_*_schedule*`` functions). Each module is imported on its own, or on first use as an
attribute (``globalstep.compat.tf``); none imports its framework.

Example:
    >>> import globalstep
    >>> globalstep.compat.tf.exponential_decay(0.1, 0, decay_steps=10, decay_rate=0.5)()
    0.10000000149011612
"""

import importlib
from typing import Any

__all__: list[str] = []

_MODULES = ("keras", "optax", "tf", "torch", "transformers")


def __getattr__(name: str) -> Any:
    """Imports ``globalstep.compat.<name>`` on first use (``globalstep.compat.tf``, ...)."""
    if name in _MODULES:
        return importlib.import_module(f"globalstep.compat.{name}")
    raise AttributeError(f"module 'globalstep.compat' has no attribute {name!r}")


def __dir__() -> list[str]:
    """The compat modules, each imported on first use."""
    return sorted(_MODULES)
