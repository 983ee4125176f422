"""A child process for the SIGKILL tests: saves state_for_step(n) for n = 1, 2, ... forever.

Run as ``python save_loop.py DIRECTORY [STORAGE_OPTIONS_JSON]``; prints ``ready`` once the
manager holds the lock.
"""

import json
import pathlib
import sys


def main(directory: str, options: str | None = None) -> None:
    """Saves in a loop until killed, resuming after the newest committed step."""
    sys.path.insert(0, str(pathlib.Path(__file__).parent))
    from ckpt_helpers import state_for_step

    from globalstep.checkpoint import CheckpointManager

    storage_options = None if options is None else json.loads(options)
    with CheckpointManager(directory, max_to_keep=3, storage_options=storage_options) as manager:
        step = (manager.latest_step() or 0) + 1
        print("ready", flush=True)
        while True:
            manager.save(step, state_for_step(step))
            step += 1


if __name__ == "__main__":
    main(*sys.argv[1:])
