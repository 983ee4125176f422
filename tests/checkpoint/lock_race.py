"""A writer process for the lock race: takes the lock at each round's barrier, reports."""

from globalstep import LockError
from globalstep.checkpoint import CheckpointManager


def race(url, options, rounds, start, attempted, released, results):
    """Opens a writer on ``url`` at each of ``rounds`` barriers; puts what happened."""
    outcomes = []
    for _ in range(rounds):
        start.wait()
        manager = None
        try:
            manager = CheckpointManager(url, storage_options=options)
            outcomes.append("held")
        except LockError:
            outcomes.append("locked")
        except Exception as err:  # reported to the test, which fails on it
            outcomes.append(repr(err))
        attempted.wait()
        if manager is not None:
            manager.close()
        released.wait()
    results.put(outcomes)
