"""Several processes: steps that agree across ranks, one writer rank, reduced metrics, a
shared step counter, and a stop signal that stops every rank at one common update.

Everything here works without a process group (one process: rank 0 of 1); a framework's
engine is imported only by the calls that need it, once a group is initialised.
"""

from globalstep.distributed._agreement import (
    REDUCE_OPS,
    SharedStepCounter,
    StepAgreement,
    assert_steps_agree,
    broadcast_int,
    gather_floats,
    initialised,
    is_writer,
    rank,
    reduce_metrics,
    store,
    world_size,
)
from globalstep.distributed._preemption import (
    DEFAULT_STOP_SIGNALS,
    SAME_DELIVERY_SECONDS,
    Preemption,
    check_signals,
    exit_status,
)

__all__ = [
    "DEFAULT_STOP_SIGNALS",
    "REDUCE_OPS",
    "SAME_DELIVERY_SECONDS",
    "Preemption",
    "SharedStepCounter",
    "StepAgreement",
    "assert_steps_agree",
    "broadcast_int",
    "check_signals",
    "exit_status",
    "gather_floats",
    "initialised",
    "is_writer",
    "rank",
    "reduce_metrics",
    "store",
    "world_size",
]
