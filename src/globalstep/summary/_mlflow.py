"""The MLflow client of the ``"mlflow"`` writer format: a ``TrackerClient`` (the generic part
and the protocol: ``_tracker``).

It follows MLflow's own conventions, so that a user's setup works as it is:
``MLFLOW_TRACKING_URI`` says where the tracking server or store is (MLflow's default, a
local ``mlruns`` store, without it); ``MLFLOW_EXPERIMENT_ID`` or ``MLFLOW_EXPERIMENT_NAME``
the experiment (created if missing; MLflow's default experiment without either); a run
started with ``mlflow.start_run()`` on the thread that opens the writer is the run logged
to (and left for the user to end). Otherwise a new MLflow run is created, tagged
``globalstep.logdir`` with the log directory, and ended (``FINISHED``) at the writer's
clean close; a resumed process continues the run its record names and marks it
``RUNNING`` again. Each run logged to is tagged ``globalstep.key`` with the training
run's key, so that a process killed after MLflow made the run and before its id reached
the record is followed by one that finds the run instead of making a second.

The writer's training thread never imports MLflow (a second or more): :func:`prepare`
only checks it is installed and notes the user's active run where MLflow is imported
already (a user who started a run imported it); the client is built, MLflow imported, on
the tracker's sender thread.

MLflow's own HTTP retries would hold the sender for minutes (7 retries, a 120 s timeout by
default) while the tracker format's backoff should be in charge: where the user has not
set them, ``MLFLOW_HTTP_REQUEST_MAX_RETRIES`` is set to 0 and
``MLFLOW_HTTP_REQUEST_TIMEOUT`` to 10 (seconds) for the process when the client is built.

Metrics go as ``log_batch`` (at most 1000 a call, MLflow's limit), each with its step and
its wall time as MLflow's millisecond timestamp. Against a tracking server (MLflow's REST
store) the batch's JSON body is made here, as MLflow's client would make it, and posted
through the store's own endpoint call (its credentials, headers and error handling):
MLflow's client spends about 20-40 us a point building an entity, a protobuf message and
its JSON text, then decoding that text again. Any other store, or an active MLflow model
(whose id MLflow adds to each metric), goes through ``MlflowClient.log_batch``.

MLflow refusing points for good (an invalid metric name) raises
:class:`~globalstep._errors.TrackerRefusedError`; every other failure is retried.
Parameters are MLflow's ``params``: nested mappings flattened with ``.`` (``{"opt":
{"lr": 0.1}}`` is ``opt.lr``), values as text; MLflow cannot change a parameter, so on
resuming only new keys are logged, and one whose value changed is refused (the writer's
warning at close names it).
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable, Mapping
from functools import partial
from typing import Any

from globalstep._errors import TrackerRefusedError
from globalstep._optional import require, require_installed
from globalstep.summary._base import nonfinite_text
from globalstep.summary._client import Point, TrackerClient

__all__ = ["KEY_TAG", "LOGDIR_TAG", "MlflowClient", "flat_params", "prepare"]

LOGDIR_TAG = "globalstep.logdir"
"""The tag of an MLflow run this client created: the writer's log directory."""

KEY_TAG = "globalstep.key"
"""The tag of an MLflow run this client created or logged to: the training run's key."""

_BATCH = 1000  # MLflow's most metrics per log_batch
_PARAM_VALUE = 6000  # MLflow's longest parameter value
_REFUSALS = ("INVALID_PARAMETER_VALUE", "BAD_REQUEST", "RESOURCE_DOES_NOT_EXIST")
_HTTP_DEFAULTS = {"MLFLOW_HTTP_REQUEST_MAX_RETRIES": "0", "MLFLOW_HTTP_REQUEST_TIMEOUT": "10"}
_PURPOSE = 'the "mlflow" writer format'
_HERE: Any = object()  # MlflowClient's default: the run active on the building thread


def prepare() -> Callable[[], TrackerClient]:
    """On the thread that opens the writer: checks MLflow is installed and notes the run
    active there, without importing MLflow; returns what builds the client (on the
    sender thread).

    Raises:
        MissingDependencyError: the ``mlflow`` extra is not installed.
    """
    require_installed("mlflow", "mlflow", _PURPOSE)
    mlflow = sys.modules.get("mlflow")  # not imported: no run was started
    active = mlflow.active_run() if mlflow is not None else None
    return partial(MlflowClient, active.info.run_id if active is not None else None)


def flat_params(params: Mapping[str, Any], prefix: str = "") -> dict[str, str]:
    """Returns ``params`` flattened as MLflow parameters: keys joined with ``.``, values
    as text (JSON for lists, ``str`` otherwise).

    Example:
        >>> flat_params({"lr": 0.1, "opt": {"name": "sgd", "betas": [0.9, 0.99]}})
        {'lr': '0.1', 'opt.name': 'sgd', 'opt.betas': '[0.9, 0.99]'}
    """
    out: dict[str, str] = {}
    for key, value in params.items():
        name = f"{prefix}.{key}" if prefix else str(key)
        if isinstance(value, Mapping) and value:
            out.update(flat_params(value, name))
        elif isinstance(value, list | tuple):
            out[name] = json.dumps(value)
        else:
            out[name] = str(value)
    return out


def _batch_json(run_id: str, points: list[Point]) -> str:
    """The body of MLflow's ``log-batch`` request for ``points``, as its client writes it
    (``message_to_json`` of a ``LogBatch``: a non-finite value as ``"NaN"``,
    ``"Infinity"``, ``"-Infinity"``; the timestamp in milliseconds)."""
    metrics = [
        {
            "key": tag,
            "value": value if value - value == 0.0 else nonfinite_text(value),
            "timestamp": round(wall_time * 1000),
            "step": step,
        }
        for tag, step, value, wall_time in points
    ]
    return json.dumps({"run_id": run_id, "metrics": metrics})


def _batch_endpoint(client: Any) -> Callable[[str], Any] | None:
    """The REST store's own call of its ``log-batch`` endpoint, taking the JSON body; None
    where the client's store is not MLflow's REST store itself (a file or SQL store, a
    plugin's) or this MLflow version has no such call."""
    try:
        from mlflow.protos.service_pb2 import LogBatch
        from mlflow.store.tracking.rest_store import RestStore

        store = client._tracking_client.store
        if type(store) is not RestStore:
            return None
        return partial(store._call_endpoint, LogBatch)
    except Exception:  # another MLflow version's internals
        return None


def _model_id() -> str | None:
    """MLflow's active model's id (added to each metric by its client), or None."""
    try:
        from mlflow.tracking.fluent import get_active_model_id
    except ImportError:
        return None
    return get_active_model_id()


def _refusal(err: Exception) -> bool:
    """Whether MLflow's error refuses the request for good (not worth a retry)."""
    return getattr(err, "error_code", None) in _REFUSALS


class MlflowClient:
    """Sends a tracker format's points to MLflow (see the module docstring).

    Args:
        active_run: the id of the user's MLflow run to log to, or None; by default the
            run active on the thread that builds the client (see :func:`prepare`).

    Its methods run on the tracker's sender thread.

    Raises:
        MissingDependencyError: the ``mlflow`` extra is not installed.
    """

    name = "mlflow"

    def __init__(self, active_run: str | None = _HERE) -> None:
        mlflow = require("mlflow", "mlflow", _PURPOSE)
        for variable, value in _HTTP_DEFAULTS.items():
            os.environ.setdefault(variable, value)
        from mlflow.tracking import MlflowClient as Client

        self._client = Client()
        self._post_batch = _batch_endpoint(self._client)
        if active_run is _HERE:
            active = mlflow.active_run()
            active_run = active.info.run_id if active is not None else None
        self._active: str | None = active_run
        self._run_id: str | None = None
        self._owned = False

    def open(self, run_id: str | None, *, logdir: str, key: str) -> str:
        """Continues ``run_id`` (marked ``RUNNING`` again if it is one this client made),
        or logs to the active run, or continues the run tagged with ``key`` (made by a
        process killed before it recorded the id), or creates a run in the experiment
        the environment names, tagged with ``key`` and the log directory."""
        if run_id is None and self._active is None:
            run_id = self._tagged(key)
        if run_id is not None:
            run = self._call(self._client.get_run, run_id)
            self._owned = LOGDIR_TAG in run.data.tags
            if self._owned and run.info.status != "RUNNING":
                self._call(self._client.update_run, run_id, status="RUNNING")
        elif self._active is not None:
            run_id, self._owned = self._active, False
            self._call(self._client.set_tag, run_id, KEY_TAG, key)
        else:
            experiment = self._experiment()
            tags = {LOGDIR_TAG: os.path.abspath(logdir), KEY_TAG: key}
            run = self._call(self._client.create_run, experiment, tags=tags)
            run_id, self._owned = run.info.run_id, True
        self._run_id = run_id
        return run_id

    def _tagged(self, key: str) -> str | None:
        """The id of the run of this experiment tagged with ``key``, or None."""
        runs = self._call(
            self._client.search_runs,
            [self._experiment()],
            filter_string=f"tags.`{KEY_TAG}` = '{key}'",
            max_results=1,
        )
        return str(runs[0].info.run_id) if runs else None

    def _experiment(self) -> str:
        """The experiment's id: MLFLOW_EXPERIMENT_ID, or MLFLOW_EXPERIMENT_NAME's
        (created if missing), or MLflow's default ("0")."""
        chosen = os.environ.get("MLFLOW_EXPERIMENT_ID")
        if chosen:
            return chosen
        name = os.environ.get("MLFLOW_EXPERIMENT_NAME")
        if not name:
            return "0"
        found = self._call(self._client.get_experiment_by_name, name)
        if found is not None:
            return str(found.experiment_id)
        return str(self._call(self._client.create_experiment, name))

    def send(self, points: list[Point]) -> None:
        """Logs the points as metrics, in batches of MLflow's limit."""
        from mlflow.entities import Metric

        run_id = self._open_run()
        post = self._post_batch if self._post_batch is not None and not _model_id() else None
        for start in range(0, len(points), _BATCH):
            chunk = points[start : start + _BATCH]
            if post is not None:
                self._call(post, _batch_json(run_id, chunk))
                continue
            metrics = [
                Metric(tag, value, round(wall_time * 1000), step)
                for tag, step, value, wall_time in chunk
            ]
            self._call(self._client.log_batch, run_id, metrics=metrics)

    def set_params(self, params: Mapping[str, Any]) -> None:
        """Logs the parameters MLflow does not hold yet; refuses those that changed.

        Raises:
            TrackerRefusedError: a parameter's value differs from the one MLflow holds
                (the others are logged), or MLflow refused one.
        """
        from mlflow.entities import Param

        run_id = self._open_run()
        held = self._call(self._client.get_run, run_id).data.params
        wanted = {k: v[:_PARAM_VALUE] for k, v in flat_params(params).items()}
        new = [Param(k, v) for k, v in wanted.items() if k not in held]
        for start in range(0, len(new), 100):  # MLflow's most params per log_batch
            self._call(self._client.log_batch, run_id, params=new[start : start + 100])
        changed = sorted(k for k, v in wanted.items() if k in held and held[k] != v)
        if changed:
            shown = ", ".join(f"{k}: {held[k]!r} -> {wanted[k]!r}" for k in changed)
            raise TrackerRefusedError(
                f"MLflow cannot change a run's parameters; kept the old values of {shown}"
            )

    def close(self) -> None:
        """Ends the run as ``FINISHED`` where this client made it (not the user's run)."""
        if self._run_id is not None and self._owned:
            self._call(self._client.set_terminated, self._run_id, "FINISHED")

    def _open_run(self) -> str:
        if self._run_id is None:
            raise RuntimeError("MlflowClient.open() must be called first")
        return self._run_id

    @staticmethod
    def _call(method: Any, *args: Any, **kwargs: Any) -> Any:
        """Calls MLflow; a refusal for good becomes :class:`TrackerRefusedError`."""
        try:
            return method(*args, **kwargs)
        except Exception as err:
            if _refusal(err):
                raise TrackerRefusedError(f"MLflow refused the request: {err}") from err
            raise
