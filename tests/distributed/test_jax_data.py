"""2 -> 1 -> 2 JAX processes mid-epoch with the resumable data (``ResumableOrder``): each
process draws its share of one epoch's order, a distributed checkpoint holds every
process's position, and a restore on another process count splits the rest of the epoch
over the new processes: every sample of the epoch drawn exactly once across the attempts.
"""

from __future__ import annotations

import json
from collections import Counter

import pytest

pytest.importorskip("jax")

from jax_spawn import finish, start

pytestmark = pytest.mark.slow  # three starts of jax.distributed


def test_two_then_one_then_two_processes_draw_each_sample_once(tmp_path):
    drawn: Counter[int] = Counter()
    for phase, size, batches in (("a", 2, "2"), ("b", 1, "3"), ("c", 2, "rest")):
        children = start("jax_data.py", size, [str(tmp_path), phase, batches], tmp_path / phase)
        statuses = finish(children)
        logs = [(tmp_path / f"{phase}-{r}.log").read_text(errors="replace") for r in range(size)]
        assert statuses == [0] * size, logs
        for rank in range(size):
            seen = json.loads((tmp_path / f"drawn-{phase}-{rank}.json").read_text())
            drawn.update(seen["drawn"])
            if phase == "c":
                assert seen["epoch"] == 1, seen  # the epoch ended on both
        counts = [
            len(json.loads((tmp_path / f"drawn-{phase}-{r}.json").read_text())["drawn"])
            for r in range(size)
        ]
        print(f"phase {phase}: {size} process(es) drew {counts}")
    assert drawn == Counter(range(37))
