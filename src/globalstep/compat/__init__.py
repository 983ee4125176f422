"""The peers' own names, arguments, defaults and dtypes, so that migrating is renaming an import.

``globalstep.compat.tf`` (``tf.compat.v1.train`` decays and global-step functions, TF's
``Checkpoint``/``CheckpointManager``, ``log_every_n``/``log_first_n``),
``globalstep.compat.keras`` (``keras.optimizers.schedules``), ``globalstep.compat.optax``
(``optax`` schedules) and ``globalstep.compat.torch`` (``torch.optim.lr_scheduler``'s
schedules as closed forms). Each module is imported on its own; none imports its framework.
"""

__all__: list[str] = []
