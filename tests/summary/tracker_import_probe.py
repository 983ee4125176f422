"""A Run with the MLflow format whose import of ``mlflow`` is held, for test_tracker_thread.

Run as ``python tracker_import_probe.py LOGDIR CLOSE_SECONDS``, in a fresh interpreter
(``mlflow`` not imported yet). A finder on ``sys.meta_path`` holds the execution of
``mlflow`` on any thread but the main one until the main thread releases it, and notes
which thread imported it; the main thread (the training thread) makes a Run with the
format, restores and makes its first updates while the import is held, then releases
it, closes the Run and prints one JSON line: the importing threads, whether the updates
returned while the import was held, and the warnings the close gave.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import json
import sys
import threading
import types
import warnings

importers: list[str] = []
release = threading.Event()
holding = threading.Event()


class _HeldLoader(importlib.abc.Loader):
    def __init__(self, loader: importlib.abc.Loader) -> None:
        self._loader = loader

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType | None:
        return self._loader.create_module(spec)

    def exec_module(self, module: types.ModuleType) -> None:
        importers.append(threading.current_thread().name)
        if threading.current_thread() is not threading.main_thread():
            holding.set()
            release.wait()  # the main thread never waits here (it would hang the probe)
        self._loader.exec_module(module)


class _Hold(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):  # type: ignore[no-untyped-def]
        if name != "mlflow":
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(name, path, target)
            if spec is not None and spec.loader is not None:
                spec.loader = _HeldLoader(spec.loader)
                return spec
        return None


def main(logdir: str, close_seconds: float) -> None:
    assert "mlflow" not in sys.modules
    sys.meta_path.insert(0, _Hold())

    import torch

    from globalstep import Run
    from globalstep.summary import Tracker

    model = torch.nn.Linear(2, 1)
    mlflow = Tracker("mlflow", close_seconds=close_seconds)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with Run(
            logdir,
            progress=False,
            handle_signals=False,
            save_every=2,
            config={"lr": 0.1},
            writer_options={"formats": ("jsonl", mlflow)},
        ) as run:
            run.restore({"model": model})
            for _ in range(3):
                run.update(loss=torch.tensor(0.5), lr=0.1)
            run.writer.flush()
            returned_while_held = not release.is_set()
            holding.wait()  # the sender thread has reached the import
            release.set()
    print(
        json.dumps(
            {
                "importers": importers,
                "main": threading.main_thread().name,
                "returned_while_held": returned_while_held,
                "warnings": [str(w.message) for w in caught],
            }
        )
    )


if __name__ == "__main__":
    main(sys.argv[1], float(sys.argv[2]))
