"""Framework integrations: the step inside torch, Keras and JAX training code.

Each submodule imports its framework when it is imported itself, never before:
``globalstep.integrations.torch``, ``.keras`` and ``.jax``. Checkpoint adapters for each
framework's objects live in its submodule and are loaded by
:mod:`globalstep.checkpoint._tree.adapters` the first time such an object is saved or restored.
"""
