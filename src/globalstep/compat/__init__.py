"""The peers' own names, arguments, defaults and dtypes, so that migrating is renaming an import.

``globalstep.compat.tf`` (``tf.compat.v1.train`` decays and global-step functions),
``globalstep.compat.keras`` (``keras.optimizers.schedules``) and ``globalstep.compat.optax``
(``optax`` schedules). Each module is imported on its own; none imports its framework.
"""

__all__: list[str] = []
