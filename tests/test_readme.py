"""Tests that README.md's examples run as written."""

import contextlib
import io
import re
from pathlib import Path

import numpy as np
import pytest

README = Path(__file__).resolve().parents[1] / "README.md"


def python_blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", README.read_text(), re.S)


def test_five_line_loop_runs_and_logs_every_100_steps():
    """The README's loop runs with a stand-in train_step and prints at steps 100 and 200."""
    out = io.StringIO()
    namespace = {"batches": range(250), "train_step": lambda batch, rate: 0.5}
    with contextlib.redirect_stdout(out):
        exec(python_blocks()[0], namespace)
    assert out.getvalue().splitlines() == ["step 100: loss 0.5", "step 200: loss 0.5"]


def test_checkpoint_and_writer_snippets_run(tmp_path, monkeypatch):
    """The checkpoint and summary snippets run, the elided middle replaced by one tick."""
    monkeypatch.chdir(tmp_path)
    import globalstep

    namespace = {"globalstep": globalstep, "clock": globalstep.Clock(steps_per_epoch=1)}
    namespace |= {"weights": np.ones(3), "loss": 0.25}
    checkpoint = python_blocks()[1]
    (summary,) = [
        b for b in python_blocks() if b.startswith('writer = globalstep.SummaryWriter("logs"')
    ]
    exec(checkpoint.replace("...\n", "clock.tick()\n"), namespace)
    assert namespace["manager"].steps() == [1]
    namespace["lr"] = globalstep.ExponentialDecay(0.1, decay_steps=10, rate=0.5)
    exec(summary, namespace)
    namespace["writer"].close()
    namespace["manager"].close()
    assert (tmp_path / "logs").is_dir()


def test_s3_snippet_runs_against_a_local_server(s3_server):
    """The S3 snippet opens a manager and a JSONL writer on the local S3 server."""
    import globalstep

    (block,) = [b for b in python_blocks() if "s3://bucket/run-1/ckpts" in b]
    prefix = s3_server.new_url("readme")
    code = block.replace("s3://bucket/run-1", prefix).replace(
        '{"endpoint_url": "http://127.0.0.1:9000"}', repr(s3_server.options)
    )
    namespace = {"globalstep": globalstep}
    exec(code, namespace)
    namespace["manager"].save(1, {"w": np.ones(2)})
    namespace["writer"].scalar("loss", 0.5, 1)
    namespace["writer"].close()
    namespace["manager"].close()
    assert s3_server.fs.exists(prefix[len("s3://") :] + "/ckpts/step-000000000001/COMMITTED")
    assert s3_server.fs.exists(prefix[len("s3://") :] + "/logs/metrics.jsonl")


# -- the compat table: "you had | you write" ------------------------------------------------
# What each row's "..." stands for, by the name called just before it; a new row whose call
# elides arguments needs its entry here (the test says so).
ELIDED = {
    "exponential_decay": "decay_steps=10, decay_rate=0.5",
    "CosineDecay": "0.1, 100",
    "warmup_cosine_decay_schedule": "0.0, 1.0, 10, 100",
}
STEPS = 130


def compat_rows() -> list[tuple[str, str]]:
    """The table's rows, each (you had, you write), the code without its backticks."""
    rows = re.findall(r"^\| `([^`]+)` \| `([^`]+)` \|$", README.read_text(), re.M)
    assert rows, "README.md has no compat table"
    return rows


def filled(code: str) -> str:
    """``code`` with its ``...`` replaced by the arguments ELIDED gives for the call."""
    if "..." not in code:
        return code
    name = re.search(r"(\w+)\([^()]*\.\.\.", code)
    assert name, f"no call before '...' in {code!r}"
    assert name.group(1) in ELIDED, f"add to ELIDED the arguments '...' stands for in {code!r}"
    return code.replace("...", ELIDED[name.group(1)])


def series(make: object, advance: object, read: object) -> list[float]:
    """The value at steps 0..STEPS-1, advancing the step with ``advance`` between reads."""
    out = []
    for _ in range(STEPS):
        out.append(float(read()))  # type: ignore[operator]
        advance()  # type: ignore[operator]
    return out


def ours(code: str) -> list[float]:
    """Runs a "you write" cell verbatim (``...`` filled) after `import globalstep`."""
    import globalstep

    clock = globalstep.Clock()
    made = eval(filled(code), {"globalstep": globalstep, "lr": 0.1, "clock": clock})
    if isinstance(made, globalstep.compat.tf.DecayedLearningRate):
        return series(made, clock.tick, made)
    step = [0]

    def advance() -> None:
        step[0] += 1

    return series(made, advance, lambda: made(step[0]))


def peer(code: str) -> list[float]:
    """Runs a "you had" cell (``...`` filled) with the peer imported, stepping it as its
    users do: TF's global-step variable, a call with the step, a torch scheduler's step()."""
    top = code.split(".")[0]
    import importlib

    module = pytest.importorskip({"tf": "tensorflow"}.get(top, top))
    namespace: dict[str, object] = {top: module, "lr": 0.1}
    if top == "tf":
        namespace["global_step"] = variable = module.Variable(0, dtype=module.int64)
        made = eval(filled(code), namespace)
        return series(made, lambda: variable.assign_add(1), lambda: made().numpy())
    if top == "torch":
        importlib.import_module("torch.optim.lr_scheduler")
        param = module.nn.Parameter(module.zeros(1))
        namespace["opt"] = opt = module.optim.SGD([param], lr=0.1)
        made = eval(filled(code), namespace)

        def advance() -> None:
            opt.step()
            made.step()

        return series(made, advance, lambda: opt.param_groups[0]["lr"])
    if top == "optax":
        import os

        os.environ.setdefault("JAX_PLATFORMS", "cpu")
    made = eval(filled(code), namespace)
    step = [0]

    def advance() -> None:
        step[0] += 1

    return series(made, advance, lambda: made(step[0]))


@pytest.mark.parametrize(("had", "write"), compat_rows(), ids=[r[1] for r in compat_rows()])
def test_compat_table_row_runs_and_matches_the_peer(had, write):
    """A row's "you write" cell runs verbatim and gives the peer's values at every step."""
    mine = ours(write)
    assert len(set(mine)) > 1  # the schedule moves over the steps compared
    if had.startswith("torch."):
        # PyTorch multiplies the rate step after step (lr *= gamma) in float64; the closed
        # form agrees to the last bit or two (StepLR at step 120: 1.0000000000000003e-05
        # against PyTorch's 1.0000000000000004e-05).
        assert mine == pytest.approx(peer(had), rel=1e-13, abs=0)
    else:
        assert mine == peer(had)


def test_evaluator_snippet_follows_the_run(tmp_path, monkeypatch):
    """The evaluator snippet yields each checkpoint of a finished run once, then stops."""
    monkeypatch.chdir(tmp_path)
    import globalstep

    with globalstep.CheckpointManager("ckpts", max_to_keep=None) as manager:
        for step in (10, 20):
            manager.save(step, {"model": {"w": np.full(2, float(step))}})
    seen = []
    code = python_blocks()[2].replace("timeout_seconds=600", "after=0, timeout_seconds=0")
    exec(code, {"globalstep": globalstep, "evaluate": lambda w, step: seen.append((w[0], step))})
    assert seen == [(10.0, 10), (20.0, 20)]


def test_jax_quick_start_runs_and_resumes(tmp_path, monkeypatch):
    """The JAX snippet trains to step 100; run again, it restores step 100 and stops."""
    pytest.importorskip("jax")
    pytest.importorskip("optax")
    monkeypatch.chdir(tmp_path)
    (block,) = [b for b in python_blocks() if "integrations.jax import" in b]
    first: dict[str, object] = {}
    exec(block, first)
    assert first["clock"].step == 100  # type: ignore[attr-defined]
    again: dict[str, object] = {}
    exec(block, again)
    assert again["clock"].step == 100  # type: ignore[attr-defined]
    assert (again["params"]["w"] == first["params"]["w"]).all()  # type: ignore[index]
