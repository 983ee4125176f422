"""Run: the parts of a training loop wired so that checkpoints, curves and the step agree.

A :class:`Run` holds a :class:`~globalstep._clock.Clock` (and any other named clocks), the
schedules, a :class:`~globalstep.checkpoint.CheckpointManager` in ``<directory>/checkpoints``,
a :class:`~globalstep.summary.SummaryWriter` in ``<directory>/logs`` and a progress display.
It owns no training loop and hides nothing: each part is an attribute that works alone
(``run.clock``, ``run.schedules``, ``run.checkpoints``, ``run.writer``, ``run.progress``).
What it adds is the wiring between them, which is where runs go wrong after a crash:

- :meth:`Run.restore` restores the newest checkpoint into the state tree, or leaves the tree
  as it is for a new run; the order in which the writer is opened does not matter (the
  writer marks the restart at the first step it writes again).
- Before a checkpoint at step S commits, every scalar logged at steps <= S is flushed and
  fsynced, so a crash at any moment loses only points after the newest checkpoint, which
  the resumed run writes again.
- SIGINT (Ctrl-C), SIGTERM and SIGUSR1 (what schedulers send before pre-emption; the
  Run's ``stop_signals``) save a checkpoint after the update in flight and exit with
  status 128 + the signal's number (130, 143, 138); on several ranks a signal to any rank
  stops every rank at one common update (see :class:`Ranks`). A second signal (a second
  or more after the first) exits at once. Leaving the ``with`` block normally saves a
  final checkpoint.
- The run's configuration (schedules, the clocks' batch size and steps per epoch, and the
  ``config`` given) is stored with each checkpoint; resuming with another one warns with
  the differences (:class:`ConfigDriftWarning`), or raises with ``strict=True``.
- A resume is audited: the values logged again for the steps the crashed attempt had
  logged past its checkpoint are compared with that attempt's; ``audit: N steps compared,
  identical`` where they agree, else one :class:`ResumeDivergenceWarning` names the first
  tag and step that differ (``Run(audit=...)``, ``run.audit``).
- An opt-in :class:`Rollback` policy restores the newest checkpoint when the loss is not
  finite or spikes, skips a few batches and goes on; on several ranks every rank decides on
  every rank's loss together, and all roll back to the same step.
- One tick per update: :meth:`Run.update` ticks the clock unless an owner claimed its
  ticks (``attach`` does, see :meth:`Clock.claim_ticks
  <globalstep._clock.Clock.claim_ticks>`), and refuses a clock advanced elsewhere.
- No stale checkpoint: a loop that builds a new state tree per update (JAX, optax,
  ``w = w - lr * g``) hands it over with ``run.update(..., state=tree)``; a save of the
  restored tree, every array unchanged after updates, is refused with that advice. Dicts,
  lists and dataclasses that are not frozen are restored in place (counters kept in them
  go on from the checkpoint's); a save still holding a restored value that only a rebuilt
  tuple or frozen dataclass holds, the objects passed holding another, is refused too.

The data position (``run.data_position``, the batches drawn so far, read with
:meth:`Run.next_batch`) is state of its own, saved with the checkpoint and never derived
from the step: a rollback moves it on while the step goes back.

Example:
    A complete NumPy loop: shuffled mini-batches, a noise term from a saved random
    generator, a cosine schedule, a checkpoint every 50 updates, two scalars per update.
    Run the function again on the same directory and it resumes where it stopped.

    >>> import tempfile
    >>> import numpy as np
    >>> from globalstep import Clock, CosineDecay, Run
    >>> from globalstep.run import GeneratorState
    >>> inputs = np.random.default_rng(0).normal(size=(100, 3))
    >>> targets = inputs @ np.array([1.0, -2.0, 0.5])
    >>> def train(directory):
    ...     weights, noise = np.zeros(3), np.random.default_rng(1)
    ...     with Run(directory, total_steps=200, save_every=50,
    ...              clock=Clock(steps_per_epoch=5, batch_size=20),
    ...              schedules={"lr": CosineDecay(0.1, decay_steps=200)},
    ...              config={"model": "linear"}, progress=False) as run:
    ...         run.restore({"weights": weights, "noise": GeneratorState(noise)})
    ...         while not run.done:
    ...             epoch, index = divmod(run.next_batch(), 5)
    ...             order = np.random.default_rng([7, epoch]).permutation(100)
    ...             rows = order[index * 20:(index + 1) * 20]
    ...             error = inputs[rows] @ weights - targets[rows]
    ...             lr = run.value("lr")  # the rate of update number run.step
    ...             gradient = 2 * inputs[rows].T @ error / 20 + 1e-3 * noise.normal(size=3)
    ...             weights -= lr * gradient
    ...             run.update(loss=float(np.mean(error**2)), lr=lr)
    ...     return weights
    >>> directory = tempfile.mkdtemp()
    >>> weights = train(directory)  # doctest: +ELLIPSIS
    globalstep: new run in ...
    globalstep: finished at step 200; checkpoint saved in ...
    >>> np.round(weights, 2)
    array([ 1. , -2. ,  0.5])
    >>> _ = train(directory)  # doctest: +ELLIPSIS
    globalstep: resumed from step 200 ...
    globalstep: the run is complete (step 200 of 200); pass a larger total_steps to go on

The parts, one module each: :mod:`~globalstep.run._run` (the Run: wiring only),
:mod:`~globalstep.run._options` (the arguments checked; the checkpoint and writer options
as values), :mod:`~globalstep.run._ranks` (:class:`Ranks` and what a rank does),
:mod:`~globalstep.run._config` (the stored configuration and its drift),
:mod:`~globalstep.run._rollback` (:class:`Rollback` and its watch),
:mod:`~globalstep.run._signals` (the stop signals) and :mod:`~globalstep.run._generator`
(:class:`GeneratorState`). When to save is the part that the CheckpointManager's
``save_every`` uses too: :class:`~globalstep.checkpoint._save_trigger.SaveTrigger`.
"""

from globalstep._errors import ConfigDriftWarning, ResumeDivergenceWarning
from globalstep.run._config import config_differences as config_differences  # as before
from globalstep.run._generator import GeneratorState
from globalstep.run._ranks import Ranks
from globalstep.run._rollback import Rollback
from globalstep.run._run import Run

__all__ = [
    "ConfigDriftWarning",
    "GeneratorState",
    "Ranks",
    "ResumeDivergenceWarning",
    "Rollback",
    "Run",
]
