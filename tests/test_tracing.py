"""A per-update call traced by tf.function or jax.jit is refused; torch.compile runs it.

``tf.function`` and ``jax.jit`` run a function's Python once, at tracing: a ``clock.tick()``
there would count one update for a whole run. It raises TracingError at the first call,
naming the traced-safe way. ``torch.compile`` breaks its graph around the tick, which then
counts once per call, without a compilation per step.
"""

import subprocess
import sys

import pytest

from globalstep import Clock, Run, TracingError
from globalstep._tracing import traced_by


def test_traced_by_imports_no_framework_and_says_none():
    """Without TensorFlow or JAX imported, traced_by() answers None and imports neither."""
    code = (
        "import sys; from globalstep import Clock; from globalstep._tracing import traced_by;"
        "c = Clock(); c.tick(); c.tick(3); assert traced_by() is None and c.step == 4;"
        "print(sorted(m for m in ('tensorflow', 'jax', 'torch') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def _run(tmp_path):
    run = Run(tmp_path, progress=False, writer_options={"formats": ("jsonl",)})
    run.restore()
    return run


def test_tick_inside_tf_function_is_refused_at_the_first_call(tmp_path):
    """tick() (one update and n), and Run.update, inside @tf.function raise at the first
    call, saying where the step lives instead; eager calls around it count as before."""
    tf = pytest.importorskip("tensorflow")
    clock = Clock()

    @tf.function
    def train_step(x):
        clock.tick()
        return x * 2.0

    with pytest.raises(TracingError, match=r"clock\.tick\(\) was called while tf\.function") as e:
        train_step(tf.constant(1.0))
    assert "optimizer.iterations" in str(e.value)
    assert (e.value.call, e.value.tracer) == ("clock.tick()", "tf.function")
    assert clock.step == 0

    @tf.function
    def five(x):
        clock.tick(5)
        return x

    with pytest.raises(TracingError, match="outside it"):
        five(tf.constant(1.0))

    with _run(tmp_path) as run:

        @tf.function
        def logged(x):
            run.update()
            return x

        with pytest.raises(TracingError, match=r"tf\.function"):
            logged(tf.constant(1.0))
        assert run.step == 0
        run.update()  # eager: counts
        assert run.step == 1
    clock.tick()
    assert (clock.step, traced_by()) == (1, None)


def test_tick_inside_jax_jit_is_refused(tmp_path):
    """tick() and Run.update inside jax.jit raise; eager jax.grad and jax.vmap, whose
    Python runs at every call, are not refused."""
    jax = pytest.importorskip("jax")
    import jax.numpy as jnp

    clock = Clock()

    def loss(w):
        clock.tick()
        return jnp.sum(w**2)

    with pytest.raises(TracingError, match=r"while jax\.jit traces") as e:
        jax.jit(loss)(jnp.ones(2))
    assert "optax's count" in str(e.value)
    assert clock.step == 0
    with pytest.raises(TracingError, match=r"jax\.jit"):
        jax.jit(jax.grad(loss))(jnp.ones(2))
    jax.grad(loss)(jnp.ones(2))
    jax.vmap(loss)(jnp.ones((3, 2)))
    assert clock.step == 2

    def scanned(carry, _):
        clock.tick()
        return carry, None

    with pytest.raises(TracingError):
        jax.lax.scan(scanned, 0.0, None, length=3)

    with _run(tmp_path) as run:
        with pytest.raises(TracingError, match=r"clock\.tick\(\) was called while jax\.jit"):
            jax.jit(lambda x: (run.update(), x)[1])(1.0)
        assert run.step == 0


def test_tick_under_torch_compile_counts_once_per_call():
    """Under torch.compile the tick runs as Python at every call (12 calls, step 12), with
    one compilation before it and one after instead of one per step; fullgraph=True, which
    allows no Python outside the graph, refuses it."""
    torch = pytest.importorskip("torch")
    clock = Clock()
    graphs = []

    def backend(graph, example_inputs):
        graphs.append(graph)
        return graph.forward

    torch._dynamo.reset()

    @torch.compile(backend=backend)
    def step(x):
        y = x * 2
        clock.tick()
        return y + 1

    for _ in range(12):
        assert torch.equal(step(torch.ones(3)), torch.full((3,), 3.0))
    assert clock.step == 12
    assert len(graphs) <= 2, f"{len(graphs)} compilations for 12 calls"

    @torch.compile(backend=backend, fullgraph=True)
    def whole(x):
        clock.tick()
        return x + 1

    with pytest.raises(Exception, match=r"Clock\.tick runs once per update"):
        whole(torch.ones(3))
    assert clock.step == 12
