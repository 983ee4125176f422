"""The resume audit (issue 35): a resumed Run compares what it logs again with what the
crashed attempt logged, and names the first difference."""

import json
import os
import pathlib
import signal
import subprocess
import sys

import numpy as np
import pytest

from globalstep import ConfigError, ResumeDivergenceWarning, Run
from globalstep.checkpoint import read_ledger
from globalstep.run import GeneratorState
from globalstep.summary import Divergence, ResumeAudit, ResumeAuditor

LOOP = str(pathlib.Path(__file__).with_name("audit_loop.py"))


def _loop(directory, keep_rng, kill_at, audit="true"):
    """Runs audit_loop.py to its end or its SIGKILL; returns the process's output."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    process = subprocess.run(
        [sys.executable, LOOP, str(directory), str(int(keep_rng)), str(kill_at), audit],
        capture_output=True,
        text=True,
        env=env,
    )
    return process


def _ledger_of(directory):
    """The run's ledger, where the resumed attempt records its audit."""
    return directory / "ledger.jsonl"


def _killed_then_resumed(directory, keep_rng, audit="true"):
    """The loop SIGKILLed after update 17 (checkpoint at 10), then run again to its end."""
    killed = _loop(directory, keep_rng, 17, audit)
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    resumed = _loop(directory, keep_rng, -1, audit)
    assert resumed.returncode == 0, resumed.stderr
    return resumed.stdout, json.loads((directory / "audit.json").read_text())


@pytest.mark.slow
def test_a_loop_that_forgets_its_rng_is_told_the_first_differing_step(tmp_path):
    """Its generator not in the state, the resumed attempt draws other data: one
    ResumeDivergenceWarning names loss at step 11, the first step both attempts logged."""
    stdout, record = _killed_then_resumed(tmp_path, keep_rng=False)
    assert record["audit"]["compared"] == 7  # steps 11..17
    tag, step, before, after = record["audit"]["first"]
    assert (tag, step) == ("loss", 11)
    assert before != after
    divergent = [w for w in record["warnings"] if w["category"] == "ResumeDivergenceWarning"]
    assert len(divergent) == 1
    assert f"loss = {after!r} at step 11" in divergent[0]["message"]
    assert f"logged {before!r}" in divergent[0]["message"]
    assert "random generator" in divergent[0]["message"]
    assert "globalstep: audit: 7 steps compared; first difference: loss at step 11" in stdout
    attempts = read_ledger(_ledger_of(tmp_path)).attempts
    assert attempts[-1]["audit_compared"] == 7
    assert attempts[-1]["diverged"] == {"tag": "loss", "step": 11}
    assert attempts[-1]["audit"].startswith("audit: 7 steps compared; first difference: loss")


@pytest.mark.slow
def test_a_loop_that_keeps_its_rng_is_identical(tmp_path):
    """Its generator in the state: the 7 steps both attempts logged (11 to 17) agree."""
    stdout, record = _killed_then_resumed(tmp_path, keep_rng=True)
    assert record["audit"] == {
        "compared": 7,
        "first": None,
        "line": "audit: 7 steps compared, identical",
    }
    assert record["warnings"] == []
    assert "globalstep: audit: 7 steps compared, identical\n" in stdout
    attempts = read_ledger(_ledger_of(tmp_path)).attempts
    assert [a.get("audit") for a in attempts] == [None, "audit: 7 steps compared, identical"]
    assert attempts[-1]["diverged"] is None


@pytest.mark.slow
def test_audit_false_compares_nothing(tmp_path):
    """With audit=False the resumed run neither compares nor warns."""
    stdout, record = _killed_then_resumed(tmp_path, keep_rng=False, audit="false")
    assert record == {"audit": None, "warnings": []}
    assert "audit:" not in stdout


def _attempt(directory, rng_seed, kill_after=None, audit=True, keep=True):
    """One in-process attempt of a small loop; with kill_after it stops without closing
    (its logs flushed), as a crashed attempt leaves them."""
    rng = np.random.default_rng(rng_seed)
    weights = np.zeros(2)
    state = {"w": weights, "rng": GeneratorState(rng)} if keep else {"w": weights}
    run = Run(
        directory,
        total_steps=20,
        save_every=5,
        progress=False,
        writer_options={"formats": ("jsonl",)},
        handle_signals=False,
        audit=audit,
    )
    run.restore(state)
    while not run.done:
        weights += rng.normal(size=2)
        run.update(loss=float(weights.sum()))
        if run.step == kill_after:
            run.writer.flush()
            run.checkpoints.close()  # the lock goes, as a killed process's does
            run.writer.close()
            return run
    run.close()
    return run


def test_a_tolerance_takes_small_differences_as_equal(tmp_path, capsys):
    """audit=<tolerance> takes values within it as equal: a resume whose only change is a
    rounding of 1e-9 is identical under audit=1e-6, and told at step 6 under True."""
    _attempt(tmp_path / "a", 0, kill_after=8)
    _attempt(tmp_path / "b", 0, kill_after=8)
    for directory in (tmp_path / "a", tmp_path / "b"):  # the crashed values, nudged
        path = directory / "logs" / "metrics.jsonl"
        lines = []
        for line in path.read_text().splitlines():
            record = json.loads(line)
            if record.get("step", 0) > 5:
                record["value"] += 1e-9
            lines.append(json.dumps(record))
        path.write_text("\n".join(lines) + "\n")
    tolerant = _attempt(tmp_path / "a", 0, audit=1e-6)
    assert tolerant.audit == ResumeAudit(3, None)
    with pytest.warns(ResumeDivergenceWarning, match=r"loss = .* at step 6"):
        exact = _attempt(tmp_path / "b", 0)
    assert exact.audit.compared == 3
    assert (exact.audit.first.tag, exact.audit.first.step) == ("loss", 6)


def test_a_new_run_has_no_audit(tmp_path):
    """A run that resumed nothing has run.audit None."""
    assert _attempt(tmp_path, 0).audit is None


def test_a_resume_with_nothing_logged_past_the_checkpoint_has_no_audit(tmp_path):
    """A run stopped at its checkpoint leaves nothing to compare: run.audit stays None."""
    _attempt(tmp_path, 0, kill_after=5)
    assert _attempt(tmp_path, 0).audit is None


@pytest.mark.parametrize("value", [-1.0, float("nan"), float("inf"), "exact", None, [0.1]])
def test_a_bad_audit_option_is_refused(tmp_path, value):
    """audit must be a bool or a finite number >= 0; anything else is named."""
    with pytest.raises(ConfigError, match=r"`audit` must be True \(equal floats\), False"):
        Run(tmp_path, audit=value)


def test_the_auditor_compares_only_steps_both_attempts_logged():
    """Points the crashed attempt did not log are not compared; the audit ends past the last
    point it logged, and counts steps (not values)."""
    auditor = ResumeAuditor({("loss", 3): 1.0, ("lr", 3): 0.5, ("loss", 4): 2.0})
    assert not auditor.see([(4, "", 3, 0.0, {"loss": 1.0, "lr": 0.5, "new": 9.0})])
    assert auditor.result() == ResumeAudit(1, None)
    assert auditor.see([(4, "", 5, 0.0, {"loss": 7.0})])  # past step 4: done
    assert auditor.result() == ResumeAudit(1, None)


def test_the_auditor_names_the_first_difference_only():
    """Exact by default: -0.0 differs from 0.0, NaN equals NaN; the first difference stays."""
    auditor = ResumeAuditor({("a", 1): 0.0, ("a", 2): float("nan"), ("a", 3): 1.0})
    auditor.see([(0, "a", 1, 0.0, -0.0), (0, "a", 2, 0.0, float("nan")), (0, "a", 3, 0.0, 2.0)])
    assert auditor.done
    assert auditor.result() == ResumeAudit(3, Divergence("a", 1, 0.0, -0.0))
    assert "first difference: a at step 1 (before the crash 0.0, now -0.0)" in (
        auditor.result().line()
    )
