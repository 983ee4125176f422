"""Step-keyed metrics: TensorBoard event files and JSONL, restart-safe, off the training thread.

:class:`SummaryWriter` writes; :func:`read_run` and :func:`read_logs` read both formats back
with restarts applied; ``globalstep logs DIR`` summarises and plots them. MLflow and W&B
are writer formats too (``formats=(..., "mlflow")``, or a :class:`Tracker` with options), and
so is any other tracker, through a :class:`TrackerClient` of your own
(``Tracker("comet", client=CometClient)``, see docs/add-a-tracker.md). Non-finite guards,
logging helpers and the progress display live beside them, and the resume audit
(:class:`ResumeAuditor`) that compares a resumed run's points with its crashed attempt's.
"""

from globalstep.summary._audit import Divergence, ResumeAudit, ResumeAuditor, crashed_points
from globalstep.summary._client import TrackerClient
from globalstep.summary._finite import NonFiniteHandler, check_finite
from globalstep.summary._log_helpers import log_every_n_steps
from globalstep.summary._progress import ProgressDisplay, Throughput, ThroughputMeter
from globalstep.summary._reader import (
    Point,
    RunLog,
    find_runs,
    last_standing_step,
    last_wall_time,
    read_logs,
    read_run,
)
from globalstep.summary._tracker import Tracker, has_unsent
from globalstep.summary._writer import FORMATS, StepOrderWarning, SummaryWriter, available_formats

__all__ = [
    "FORMATS",
    "Divergence",
    "NonFiniteHandler",
    "Point",
    "ProgressDisplay",
    "ResumeAudit",
    "ResumeAuditor",
    "RunLog",
    "StepOrderWarning",
    "SummaryWriter",
    "Throughput",
    "ThroughputMeter",
    "Tracker",
    "TrackerClient",
    "available_formats",
    "check_finite",
    "crashed_points",
    "find_runs",
    "has_unsent",
    "last_standing_step",
    "last_wall_time",
    "log_every_n_steps",
    "read_logs",
    "read_run",
]
