"""What a checkpoint directory's readers ask the manager: steps, documents, summaries.

:class:`Inspection` is the read-only half of
:class:`~globalstep.checkpoint.CheckpointManager` (it inherits it): every method reads,
none writes, and each looks in the fast tier too where the manager has one (see
:mod:`~globalstep.checkpoint._fast_tier`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from globalstep._errors import CheckpointError, ConfigError
from globalstep.checkpoint._directory.catalogue import Catalogue, CheckpointSummary
from globalstep.checkpoint._directory.index import StepIndex, step_of
from globalstep.checkpoint._directory.policy import KeepPolicy, policy_from_config
from globalstep.checkpoint._directory.reading import Reading
from globalstep.checkpoint._fast_tier import Tiers
from globalstep.checkpoint._files.document import Document
from globalstep.checkpoint._files.lazy import CheckpointReader
from globalstep.checkpoint._follower import CheckpointFollower

if TYPE_CHECKING:
    from globalstep.checkpoint._manager import CheckpointManager

__all__ = ["Inspection"]

_T = TypeVar("_T")


class Inspection:
    """The reading methods of a checkpoint manager, over its index, reading and catalogue."""

    policy: KeepPolicy
    _index: StepIndex
    _reading: Reading
    _catalogue: Catalogue
    _tiers: Tiers | None

    def steps(self) -> list[int]:
        """Returns the steps of every committed checkpoint, oldest first (of both tiers)."""
        tiers, own = self._tiers, self._index.steps()
        return own if tiers is None else tiers.steps(own)

    def latest_step(self) -> int | None:
        """Returns the newest committed step (of both tiers), or None when there is none.

        Cheap enough to poll: with 10,000 checkpoints a call on an unchanged directory
        costs one ``stat``.
        """
        tiers, own = self._tiers, self._index.latest()
        return own if tiers is None else tiers.latest(own)

    def incomplete(self) -> dict[int, str]:
        """Returns the entries named like checkpoints that readers ignore, and why.

        These are step directories without their ``COMMITTED`` marker (a save cut short on
        an object store, or a marker deleted by hand), and entries that are not
        directories. ``globalstep ckpt verify`` and ``ckpt ls --all`` report them.
        """
        return self._index.incomplete()

    def metadata(self, step: int | None = None) -> dict[str, Any]:
        """Returns :meth:`document` as a dict, state.json's JSON object (raises as it does)."""
        return self.document(step).to_dict()

    def document(self, step: int | None = None) -> Document:
        """Returns the checked state.json of ``step`` (default: the newest) as its typed
        :class:`~globalstep.checkpoint._files.document.Document`, reading no array; raises
        CheckpointNotFoundError (no such checkpoint) or CorruptCheckpointError (damaged)."""
        return self._read(step, self._reading.load, lambda fast, n: fast.document(n))

    def stored_policy(self) -> KeepPolicy | None:
        """Returns the retention policy recorded by the newest checkpoint's writer, if any."""
        try:
            saved = self.document().manager
            return policy_from_config(saved["keep"]) if isinstance(saved, dict) else None
        except (CheckpointError, ConfigError, KeyError, TypeError):
            return None

    def summaries(self, policy: KeepPolicy | None = None) -> list[CheckpointSummary]:
        """Describes every committed checkpoint, oldest first, reading no array.

        A checkpoint that cannot be read is listed with its ``error``; one pruned while
        being listed is left out.

        Args:
            policy: the policy whose reasons ``kept_because`` gives; default the manager's.
        """
        return self._catalogue.summaries(policy or self.policy)

    def open(self, step: int | None = None) -> CheckpointReader:
        """Opens a checkpoint lazily: arrays are memory-mapped and read when indexed.

        Without ``step``, a checkpoint pruned while being opened is replaced by the newest
        one still there.

        Raises:
            CheckpointNotFoundError: no committed checkpoint (or none for ``step``).
            CorruptCheckpointError: the checkpoint is damaged; the message names it.
        """
        return self._read(step, self._reading.reader, lambda fast, n: fast.open(n))

    def verify(self, step: int | None = None) -> None:
        """Checks every checksum of ``step`` (default: the newest).

        Raises:
            CheckpointNotFoundError: no committed checkpoint (or none for ``step``).
            CorruptCheckpointError: a file is damaged; the message names it.
        """
        self._read(step, self._reading.verify, lambda fast, n: fast.verify(n))

    def _read(
        self,
        step: int | None,
        action: Callable[[int], _T],
        fast: Callable[[CheckpointManager, int], _T],
    ) -> _T:
        """``action(n)`` on ``step`` (default: the newest) of this directory, or
        ``fast(fast_manager, n)`` where the fast tier holds it (see ``_fast_tier``)."""
        tiers = self._tiers
        if tiers is None:
            return self._reading.read(step, action)[1]
        return tiers.read(
            step,
            lambda n: fast(tiers.fast, n),
            lambda n: self._reading.read(n, action),
            self._index.steps,
        )[2]

    def follow(
        self,
        *,
        after: int | None = None,
        timeout_seconds: float | None = None,
        poll_seconds: float = 1.0,
    ) -> CheckpointFollower:
        """Iterates over checkpoints as a live run commits them, for an evaluator.

        Like TensorFlow's ``tf.train.checkpoints_iterator`` and Keras'
        ``SidecarEvaluator``: each newly committed checkpoint is yielded once, opened (a
        :class:`CheckpointReader`, whose memory map keeps the arrays readable even if the
        writer prunes the checkpoint afterwards), in step order. Checkpoints the writer
        pruned before they could be opened are skipped with a :class:`CheckpointWarning`
        and listed in the iterator's ``missed``.

        Args:
            after: yield checkpoints with a step above this; default: start with the
                newest checkpoint present (as TensorFlow does).
            timeout_seconds: stop when no new checkpoint came for this long; None waits
                for ever.
            poll_seconds: how often to look for a new checkpoint.

        Raises:
            ConfigError: an argument is out of range.

        Example:
            >>> import numpy as np, tempfile
            >>> from globalstep.checkpoint import CheckpointManager
            >>> directory = tempfile.mkdtemp()
            >>> with CheckpointManager(directory) as writer:
            ...     writer.save(5, {"w": np.ones(2)})
            >>> reader = CheckpointManager(directory, read_only=True)
            >>> [r.step for r in reader.follow(timeout_seconds=0.0, poll_seconds=0.01)]
            [5]
        """
        if after is not None:
            after = step_of(after)
        return CheckpointFollower(self._reading, after, timeout_seconds, poll_seconds)
