"""GlobalStepCallback on TensorFlow reads the loss, micro-steps and rate in one graph call:
the same numbers as its per-value reads."""

from __future__ import annotations

import numpy as np
import pytest

from globalstep import Clock
from globalstep.summary import SummaryWriter, read_run

keras = pytest.importorskip("keras")
gk = pytest.importorskip("globalstep.integrations.keras")


def _logged(tmp_path, name, learning_rate, *, fused):
    keras.utils.set_random_seed(0)
    rng = np.random.default_rng(0)
    x = rng.normal(size=(64, 4)).astype("float32")
    y = rng.normal(size=(64, 1)).astype("float32")
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
    model.compile(optimizer=keras.optimizers.Adam(learning_rate=learning_rate), loss="mse")
    writer = SummaryWriter(tmp_path / name, formats=("jsonl",))
    callback = gk.GlobalStepCallback(Clock(), writer=writer)
    if not fused:
        callback._fused_reads = lambda: None  # the per-value reads
    model.fit(x, y, batch_size=8, epochs=2, shuffle=False, verbose=0, callbacks=[callback])
    writer.close()
    if fused:  # the one-graph-call path was the one taken
        assert callable(callback._fused)
    run = read_run(tmp_path / name).scalars
    return {tag: [(p.step, p.value) for p in points] for tag, points in run.items()}


@pytest.mark.parametrize("kind", ["schedule", "constant"])
def test_fused_reads_log_what_the_separate_reads_log(tmp_path, kind):
    """Loss and rate at every step 1..16, equal to the per-value reads' and the schedule's."""
    if keras.backend.backend() != "tensorflow":
        pytest.skip("the fused reads are TensorFlow's")
    schedule = keras.optimizers.schedules.CosineDecay(0.01, 20, warmup_target=0.05, warmup_steps=4)
    lr = schedule if kind == "schedule" else 0.01
    fused = _logged(tmp_path, "fused", lr, fused=True)
    separate = _logged(tmp_path, "separate", lr, fused=False)
    assert fused == separate
    rates = fused["lr"]
    assert [s for s, _ in rates] == list(range(1, 17))
    expected = [
        float(np.float32(schedule(s - 1))) if kind == "schedule" else float(np.float32(0.01))
        for s in range(1, 17)
    ]
    assert [r for _, r in rates] == expected
    assert len(set(v for _, v in fused["loss"])) > 1
