"""Refusals: the errors a :class:`~globalstep.run.Run` raises about how it is used.

Each names what was asked, the rule, and what to do instead; they live apart so that the
Run's methods stay its wiring.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, NoReturn

from globalstep import distributed
from globalstep._clock import Clock
from globalstep._errors import ConfigError
from globalstep._unchanged import Unchanged

if TYPE_CHECKING:
    from globalstep.run._stale import RebuiltLeaf

__all__ = ["not_restored", "not_the_writer", "rebuilt_state", "stale_state", "ticked_elsewhere"]


def not_restored() -> NoReturn:
    """An update before ``restore()``."""
    raise ConfigError(
        "restore",
        "must be called before the first update",
        None,
        hint="Call run.restore(state): it resumes from the newest checkpoint, or starts "
        "a new run with the state as it is.",
    )


def ticked_elsewhere(clock: Clock, ticked_to: int) -> NoReturn:
    """A clock advanced outside ``Run.update`` since the last update (at ``ticked_to``)."""
    raise ConfigError(
        "clock",
        "must be ticked once per update, by Run.update or by one owner; it was advanced "
        f"from step {ticked_to} to {clock.step} since the last update, outside it",
        clock,
        hint="Each update would count twice. Remove the other tick (clock.tick(), a "
        "callback's or hook's), or let it own the ticks with "
        "clock.claim_ticks('<what ticks it>') and Run.update leaves the tick to it "
        "(globalstep.integrations.torch.attach and the follow() of "
        "globalstep.integrations.keras or .tensorflow claim their clock themselves).",
    )


def not_the_writer() -> NoReturn:
    """``run.writer`` asked for on a rank that does not write."""
    raise ConfigError(
        "writer",
        "is open on the writer rank only",
        f"rank {distributed.rank()}",
        hint="Guard the call with `if run.is_writer:`, or pass the values to "
        "run.update (reduced across ranks with Ranks(reduce=...)).",
    )


def stale_state(check: Unchanged, step: int) -> NoReturn:
    """A save at ``step`` of the tree ``restore()`` returned, every array unchanged."""
    raise ConfigError(
        "state",
        f"must change while updates are applied: the tree to save at step {step} is "
        f"the one restore() returned at step {check.step}, every array unchanged, so the "
        "checkpoint would hold stale arrays (and a resumed run would restart from them)",
        check.paths,
        hint="If the loop builds a new tree at each update (JAX, optax, "
        "`w = w - lr * g`), pass it: run.update(..., state=new_tree); or change the "
        "restored arrays in place (`w -= lr * g`).",
    )


def rebuilt_state(leaves: list[RebuiltLeaf], restored: int, step: int) -> NoReturn:
    """A save at ``step`` of plain values that restore() (at ``restored``) could put only
    in containers it rebuilt, the objects passed to it still holding other values."""
    raise ConfigError(
        "state",
        "must not keep values restore() could not put in the objects passed: the tree to "
        f"save at step {step} still holds the values restored at step {restored} in "
        "containers restore() rebuilt (a tuple, a namedtuple, a frozen dataclass or a "
        "read-only mapping cannot be filled in place) while the objects passed hold other "
        "values; a loop counting in those would be saved with the restored values, stale",
        [str(leaf) for leaf in leaves],
        hint="Keep the values the loop changes in a dict, a list or a dataclass that is "
        "not frozen (restore() fills those in place), or pass the tree as it changes: "
        "run.update(..., state=new_tree). If they are meant to stay as restored, read "
        "them from the tree restore() returned and hand it over once: "
        "run.update(..., state=run.state).",
    )
