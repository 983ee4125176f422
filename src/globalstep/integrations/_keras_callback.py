"""The Keras callback that keeps a clock at ``optimizer.iterations``, logs and checkpoints.

Part of :mod:`globalstep.integrations.keras` (which exports :class:`GlobalStepCallback`).
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from typing import Any

import keras
import numpy as np

from globalstep._clock import Clock
from globalstep._errors import ConfigError, StepError
from globalstep._triggers import Trigger, every
from globalstep.integrations._keras_data import ResumableDataset
from globalstep.integrations._keras_schedule import GlobalStepSchedule
from globalstep.integrations._keras_state import model_state
from globalstep.integrations._keras_variables import sync, to_numpy

__all__ = ["GlobalStepCallback"]


class _TorchRandomState:
    """torch's global generator, which Keras' torch backend draws unseeded dropout from
    (Dropout's SeedGenerator state stays unused there), as a state_dict object.

    ``fit()`` itself draws from it before the first batch (the DataLoader's seed, the
    symbolic build), and a resumed run calls ``fit()`` at other points than an
    uninterrupted one, so the callback sets the generator back to ``at_batch_end`` (the
    state after the previous update, or the restored one) at each ``fit()``'s first batch.
    """

    def __init__(self) -> None:
        self.at_batch_end: Any = None

    def state_dict(self) -> dict[str, Any]:
        import torch

        return {"cpu": torch.get_rng_state().numpy().copy()}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        import torch

        self.at_batch_end = torch.from_numpy(np.array(state["cpu"], dtype=np.uint8))
        torch.set_rng_state(self.at_batch_end)


class _BatchLossMean(keras.metrics.Mean):  # type: ignore[misc]
    """Keras' loss tracker (the epoch's running mean), also keeping the last batch's loss."""

    def __init__(self, name: str = "loss", dtype: Any = None) -> None:
        super().__init__(name=name, dtype=dtype)
        self.last = self.add_variable(shape=(), initializer="zeros", dtype=self.dtype, name="last")

    def update_state(self, values: Any, sample_weight: Any = None) -> None:
        self.last.assign(keras.ops.cast(keras.ops.mean(values), self.dtype))
        super().update_state(values, sample_weight=sample_weight)


class GlobalStepCallback(keras.callbacks.Callback):  # type: ignore[misc]
    """Keeps a clock at ``optimizer.iterations``; logs and checkpoints keyed by it.

    After each batch whose update was applied (every batch, or every
    ``gradient_accumulation_steps``-th) the clock ticks, and the callback asserts that it
    equals ``optimizer.iterations``; writes ``loss`` (that batch's own loss) and ``lr``
    (the rate that update used) at the clock's step after the update, the first update's
    at step 1 (the convention of every logged value, see :mod:`globalstep._clock`: the
    step ``optimizer.iterations`` holds after ``apply_gradients``, as Keras' TensorBoard
    callback logs it); and lets the manager's ``save_every`` decide whether to save
    :meth:`state`.

    Args:
        clock: the run's clock (a new one if None).
        writer: where to write the per-update scalars, or None.
        manager: where to save, or None.
        save_every: when to save: a duration (``100``, ``"1ep"``) or a Trigger; default
            every 100 updates.
        data: the run's :class:`ResumableDataset`, whose position is saved.
        extra: more entries for the checkpoint tree.
        rate_tag: the tag of the rate: ``"lr"``, as ``Run``, the demo and the guides log
            it; ``"learning_rate"`` keeps the name the callback wrote before (its curves
            were then one step earlier, from step 0).

    Raises:
        ConfigError: an argument of the wrong kind.
    """

    __module__ = "globalstep.integrations.keras"  # its public home, as reprs and pickles name it

    def __init__(
        self,
        clock: Clock | None = None,
        *,
        writer: Any = None,
        manager: Any = None,
        save_every: Any = 100,
        data: ResumableDataset | None = None,
        extra: Mapping[str, Any] | None = None,
        rate_tag: str = "lr",
    ) -> None:
        super().__init__()
        if clock is not None and not isinstance(clock, Clock):
            raise ConfigError("clock", "must be a globalstep Clock or None", clock)
        if not isinstance(rate_tag, str) or not rate_tag.strip() or rate_tag == "loss":
            raise ConfigError("rate_tag", "must be a non-empty tag other than 'loss'", rate_tag)
        if data is not None and not isinstance(data, ResumableDataset):
            raise ConfigError("data", "must be a ResumableDataset or None", data)
        self.clock = clock if clock is not None else Clock()
        self.writer = writer
        self.manager = manager
        self.data = data
        self.extra = dict(extra or {})
        self.rate_tag = rate_tag
        self._save: Trigger = save_every if isinstance(save_every, Trigger) else every(save_every)
        self._rate_fn: Any = None
        self._plain_iterations: bool | None = None  # optimizer.iterations not overridden
        self._fused: Any = None  # the TensorFlow reads in one graph call, False: none
        self._fused_optimizer: Any = None  # the optimizer they read
        self._torch = _TorchRandomState() if keras.backend.backend() == "torch" else None

    def set_model(self, model: Any) -> None:
        if model is not getattr(self, "model", None):
            self._fused = self._plain_iterations = None  # another model: read from it anew
        super().set_model(model)
        tracker = getattr(model, "_loss_tracker", None)
        if tracker is not None and not isinstance(tracker, _BatchLossMean):
            model._loss_tracker = _BatchLossMean(name=tracker.name, dtype=tracker.dtype)

    # -- state

    def state(self) -> dict[str, Any]:
        """The checkpoint tree: model (variables and optimizer), clock, data position, and on
        the torch backend torch's global generator (unseeded dropout draws from it)."""
        tree: dict[str, Any] = {"model": model_state(self.model), "clock": self.clock}
        if self._torch is not None:
            tree["torch_random"] = self._torch
        if self.data is not None:
            tree["data"] = self.data
        tree.update(self.extra)
        return tree

    def restore(self, model: Any, **kwargs: Any) -> bool:
        """Restores the newest checkpoint into ``model``, the clock and the data, if any.

        Returns:
            Whether a checkpoint was restored.
        """
        if self.manager is None or self.manager.latest_step() is None:
            return False
        self.set_model(model)
        self.manager.restore(self.state(), **kwargs)
        return True

    # -- steps

    def _accumulation(self) -> int:
        return int(self.model.optimizer.gradient_accumulation_steps or 1)

    def _iterations(self) -> int:
        iterations = self.model.optimizer.iterations
        if isinstance(iterations, keras.Variable):
            return int(to_numpy(iterations))
        return int(keras.ops.convert_to_numpy(iterations))

    def _check(self, iterations: int | None = None) -> None:
        """Raises unless the clock is at ``optimizer.iterations`` (read if not given)."""
        if iterations is None:
            iterations = self._iterations()
        if iterations != self.clock.step:
            raise StepError(
                f"the clock ({self.clock.name!r}) is at step {self.clock.step} but "
                f"optimizer.iterations is {iterations}: they must count the same updates. "
                "Restore both from one checkpoint (GlobalStepCallback.restore), or start "
                "both at 0.",
                self.clock.step,
            )

    def on_train_begin(self, logs: Any = None) -> None:
        if self._torch is not None and self._torch.at_batch_end is None:
            import torch

            self._torch.at_batch_end = torch.get_rng_state()  # a fresh run
        sync(self.model)
        self._check()
        self._save.skip_past(self.clock)  # fire only at boundaries still ahead
        if self.data is not None:
            self.data.begin((self.params or {}).get("steps"))
        progress = self.clock.progress()
        if progress.step_in_epoch and self.data is None:
            warnings.warn(
                f"resuming at step {progress.step}, inside epoch {progress.epoch} (batch "
                f"{progress.step_in_epoch}): the data is not a ResumableDataset, so fit() "
                "restarts this epoch from its first batch.",
                UserWarning,
                stacklevel=2,
            )

    def _rate(self, micro_step: int) -> float | None:
        lr = self.model.optimizer._learning_rate
        if isinstance(lr, GlobalStepSchedule):
            return float(lr.at_iterations(micro_step))
        if isinstance(lr, keras.optimizers.schedules.LearningRateSchedule):
            step = keras.ops.convert_to_tensor(micro_step)
            backend = keras.backend.backend()
            if backend == "jax":  # the value the jitted update computed
                import jax

                if self._rate_fn is None:
                    self._rate_fn = jax.jit(lambda s: lr(s))
                return float(self._rate_fn(step))
            if backend == "tensorflow":  # the value the traced update computed
                import tensorflow as tf

                if self._rate_fn is None:
                    # One graph call instead of the schedule's ~17 eager ops (1.35 of the
                    # callback's 1.74 ms a batch, profiled on a 32-64-1 MLP).
                    self._rate_fn = tf.function(lambda s: lr(s), autograph=False)
                return float(self._rate_fn(step).numpy())
            return float(keras.ops.convert_to_numpy(lr(step)))
        try:
            constant = self.model.optimizer.learning_rate
            if isinstance(constant, keras.Variable):  # a fixed rate (TF's warns in NumPy)
                return float(to_numpy(constant))
            return float(keras.ops.convert_to_numpy(constant))
        except (TypeError, ValueError):
            return None

    def _fused_reads(self) -> tuple[int, float, float] | None:
        """On TensorFlow, (micro-steps, the batch's loss, the rate its update used) read
        by one graph call: three eager reads and the schedule's eager ops cost several
        times that after each batch. None where it does not apply (another backend, no
        batch-loss tracker, a rate that is neither a Keras schedule nor a variable)."""
        optimizer = self.model.optimizer
        if self._fused is None or self._fused_optimizer is not optimizer:  # (recompiled)
            self._fused, self._fused_optimizer = False, optimizer
            tracker = getattr(self.model, "_loss_tracker", None)
            lr: Any = getattr(optimizer, "_learning_rate", None)
            schedule = isinstance(lr, keras.optimizers.schedules.LearningRateSchedule)
            if (
                keras.backend.backend() == "tensorflow"
                and isinstance(tracker, _BatchLossMean)
                and not isinstance(lr, GlobalStepSchedule)
                and (schedule or isinstance(lr, keras.Variable))
            ):
                import tensorflow as tf

                counter, last = optimizer._iterations.value, tracker.last.value

                def reads() -> Any:
                    micro = counter.read_value()
                    rate = lr(micro - 1) if schedule else lr.value.read_value()
                    return micro, tf.cast(last.read_value(), tf.float64), tf.cast(rate, tf.float64)

                self._fused = tf.function(reads, autograph=False)
        if self._fused is False:
            return None
        micro, loss, rate = self._fused()
        return int(micro.numpy()), float(loss.numpy()), float(rate.numpy())

    def on_train_batch_begin(self, batch: int, logs: Any = None) -> None:
        if self._torch is not None and batch == 0:  # each fit()'s first batch
            import torch

            torch.set_rng_state(self._torch.at_batch_end)

    def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
        if self._torch is not None:
            import torch

            self._torch.at_batch_end = torch.get_rng_state()
        sync(self.model)
        if self.data is not None:
            self.data.position += 1
        fused = self._fused_reads() if self.writer is not None else None
        if fused is not None:
            micro, loss, fused_rate = fused
        else:
            micro = int(to_numpy(self.model.optimizer._iterations))
        if micro % self._accumulation():
            return  # a micro-batch: gradients accumulated, no update applied
        self.clock.tick()
        if self._plain_iterations is None:
            self._plain_iterations = (
                type(self.model.optimizer).iterations is keras.optimizers.Optimizer.iterations
            )
        if self._plain_iterations:  # optimizer.iterations is micro // accumulation: no read
            self._check(micro // self._accumulation())
        else:
            self._check()
        if self.writer is not None:
            # Observed for the update just applied: at the step after it (the clock's,
            # optimizer.iterations), with the rate that update used.
            scalars: dict[str, float] = {}
            if fused is not None:
                scalars["loss"] = loss
                rate: float | None = fused_rate
            else:
                tracker = getattr(self.model, "_loss_tracker", None)
                if isinstance(tracker, _BatchLossMean):
                    scalars["loss"] = float(to_numpy(tracker.last))
                rate = self._rate(micro - 1)
            if rate is not None:
                scalars[self.rate_tag] = rate
            self.writer.scalars(scalars, step=self.clock.step)
        if self.manager is not None and self._save.should_fire(self.clock):
            if self.writer is not None:
                self.writer.flush()  # the curves are durable up to the newest checkpoint
            self.manager.save(self.clock, self.state())

    def on_epoch_end(self, epoch: int, logs: Any = None) -> None:
        if self.data is None or self.data.position % self.data.steps_per_epoch == 0:
            self.clock.end_epoch()
