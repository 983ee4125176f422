"""``fit()`` over a resumable Keras dataset, continuing a restored run inside its epoch.

Part of :mod:`globalstep.integrations.keras` (which exports :func:`fit`).
"""

from __future__ import annotations

from typing import Any

from globalstep._errors import ConfigError
from globalstep.integrations._keras_data import ResumableDataset

__all__ = ["fit"]


def fit(
    model: Any,
    data: ResumableDataset,
    *,
    epochs: int,
    callbacks: Any = (),
    **kwargs: Any,
) -> list[Any]:
    """``model.fit`` over a :class:`ResumableDataset`, continuing inside a restored epoch.

    Where the data's position is inside epoch ``e`` at batch ``k``, a first ``fit()`` runs
    the epoch's remaining batches (``initial_epoch=e``), then a second the later epochs,
    so every batch is the one an uninterrupted run would see. (Plain ``model.fit(data,
    epochs=n)`` runs whole epochs only; see :class:`ResumableDataset`.)

    Returns:
        The ``History`` of each ``fit()`` call made.

    Raises:
        ConfigError: ``data`` is not a ResumableDataset, or ``epochs`` is not an int >= 1.
    """
    if not isinstance(data, ResumableDataset):
        raise ConfigError("data", "must be a ResumableDataset", data)
    if isinstance(epochs, bool) or not isinstance(epochs, int) or epochs < 1:
        raise ConfigError("epochs", "must be an int >= 1", epochs)
    for name in ("x", "y", "steps_per_epoch", "initial_epoch", "batch_size"):
        if name in kwargs:
            raise ConfigError(name, "is set by fit() from the data; leave it out", kwargs[name])
    kwargs.setdefault("shuffle", False)  # the data shuffles itself, by (seed, epoch)
    with data.streaming():
        return _fit_stream(model, data, epochs, list(callbacks), kwargs)


def _fit_stream(
    model: Any, data: ResumableDataset, epochs: int, callbacks: list[Any], kwargs: Any
) -> list[Any]:
    spe = data.steps_per_epoch
    epoch, k = divmod(data.position, spe)
    histories = []
    if k and epoch < epochs:
        histories.append(
            model.fit(
                data,
                epochs=epoch + 1,
                initial_epoch=epoch,
                steps_per_epoch=spe - k,
                callbacks=callbacks,
                **kwargs,
            )
        )
        epoch += 1
    if epoch < epochs:
        histories.append(
            model.fit(
                data,
                epochs=epochs,
                initial_epoch=epoch,
                steps_per_epoch=spe,
                callbacks=callbacks,
                **kwargs,
            )
        )
    return histories
