"""Step-keyed metrics: TensorBoard event files and JSONL, restart-safe, off the training thread.

:class:`SummaryWriter` writes; :mod:`globalstep.summary.reader` reads both formats back
with restarts applied; ``globalstep logs DIR`` summarises and plots them. MLflow and W&B
are writer formats too (``formats=(..., "mlflow")``, or a :class:`Tracker` with options), and
so is any other tracker, through a :class:`TrackerClient` of your own
(``Tracker("comet", client=CometClient)``, see docs/add-a-tracker.md). Non-finite guards,
logging helpers and the progress display live beside them.
"""

from globalstep.summary._client import TrackerClient
from globalstep.summary._tracker import Tracker
from globalstep.summary.finite import check_finite
from globalstep.summary.log_helpers import log_every_n_steps
from globalstep.summary.progress import ProgressDisplay, Throughput, ThroughputMeter
from globalstep.summary.reader import Point, RunLog, read_logs, read_run
from globalstep.summary.writer import StepOrderWarning, SummaryWriter, available_formats

__all__ = [
    "Point",
    "ProgressDisplay",
    "RunLog",
    "StepOrderWarning",
    "SummaryWriter",
    "Throughput",
    "ThroughputMeter",
    "Tracker",
    "TrackerClient",
    "available_formats",
    "check_finite",
    "log_every_n_steps",
    "read_logs",
    "read_run",
]
