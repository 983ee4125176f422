"""Is a graph tracer running the calling Python code? ``traced_by()`` answers, for nothing.

``tf.function`` and ``jax.jit`` run a function's Python once, while they trace it into a
graph, and then replay the graph: Python side effects inside happen at tracing only. A
``clock.tick()`` there counts one update for a whole run (step 1 after 5 updates, silently).
The calls that must run once per update ask :func:`traced_by` and refuse with the
traced-safe alternative instead.

No framework is imported here: a framework that the process never imported cannot be
tracing, so each check starts from ``sys.modules`` and costs one dict lookup when that
framework is absent (``tick()`` is on the per-update path).

What is detected:

- TensorFlow: building a ``tf.function`` graph (``tf.inside_function()``), asked only when
  ``tf.executing_eagerly()`` is False, so an eager loop pays one C call. A TF1 graph-mode
  program (eager execution disabled, ``Session.run`` in a Python loop) is not refused: its
  loop runs Python once per update.
- JAX: tracing into a jaxpr (``jax.jit``, and the bodies of ``lax.scan`` / ``while_loop`` /
  ``cond``), found as a ``DynamicJaxprTrace`` on the trace stack. ``jax.grad`` or
  ``jax.vmap`` called eagerly run the Python on every call and are not refused. The check
  reads the trace context of ``jax._src.core`` (jax >= 0.4.36) and falls back to
  ``trace_state_clean()`` on older versions, where every non-eager trace counts.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any, TypeVar

from globalstep._errors import TracingError

__all__ = ["check_eager", "opaque", "traced_by", "traced_error"]

_TF_MODULE = "tensorflow"
_JAX_CORE = "jax._src.core"
TRACER_MODULES = (_TF_MODULE, _JAX_CORE)
"""The modules whose absence from ``sys.modules`` means no tracer runs (the per-update
paths test them inline, before calling :func:`traced_by`)."""

# Resolved once, the first time a call finds the framework imported (a module's functions
# do not change after its import): a lookup on the ``tensorflow`` module object costs
# ~0.5 us, too much to repeat per update.
_tf_eager: Callable[[], bool] | None = None
_tf_inside: Callable[[], bool] = bool
_jax_ctx: Any = None  # jax._src.core.trace_ctx (jax >= 0.4.36)
_jax_eval: Any = None  # jax._src.core.eval_trace, the trace of eager code
_jax_core: Any = None
_modules = sys.modules  # the interpreter's one module table (replacing it is unsupported)


def traced_by() -> str | None:
    """Returns the tracer running the caller's Python, or None when it runs eagerly.

    Returns:
        ``"tf.function"`` while TensorFlow traces a graph function, ``"jax.jit"`` while
        JAX traces into a jaxpr, else None. Neither framework is imported by the call.
    """
    eager = _tf_eager
    if eager is None:
        eager = _find_tf() if _TF_MODULE in _modules else None
    if eager is not None and not eager() and _tf_inside():
        return "tf.function"
    ctx = _jax_ctx
    if ctx is not None:
        if ctx.trace is _jax_eval:  # eager JAX: the fast path
            return None
    elif _JAX_CORE not in _modules or _find_jax() is None:
        return None
    return "jax.jit" if _jax_tracing() else None


_ADVICE = {
    "tf.function": (
        "Keep the step inside the graph (optimizer.iterations, or a tf.Variable the function "
        "assign_add()s) and call {call} after each call of the traced function, outside it."
    ),
    "jax.jit": (
        "Call {call} outside the jitted function, after each call of it; where the traced "
        "code needs the step, pass it in as an argument (or read optax's count from the "
        "optimizer state)."
    ),
}


def traced_error(call: str, tracer: str) -> TracingError:
    """The error for ``call`` made while ``tracer`` traces: what happens, and what to do."""
    advice = _ADVICE.get(tracer, "Call {call} outside the traced function.").format(call=call)
    return TracingError(
        f"{call} was called while {tracer} traces a function: its Python runs once, at "
        f"tracing, not once per update, so the step would stop counting. {advice}",
        call,
        tracer,
    )


def check_eager(call: str) -> None:
    """Raises :class:`~globalstep._errors.TracingError` when a tracer runs the caller.

    Raises:
        TracingError: ``tf.function`` or ``jax.jit`` is tracing.
    """
    tracer = traced_by()
    if tracer is not None:
        raise traced_error(call, tracer)


_F = TypeVar("_F", bound=Callable[..., Any])


def opaque(fn: _F) -> _F:
    """Marks ``fn`` as Python that graph tracers call as written, once per call.

    AutoGraph (on in ``tf.function``) would rewrite it, and its rewrite of globals and
    early returns does not keep this package's meaning; ``torch.compile`` would trace into
    it, specialise on the step it reads and compile again at every update. The marks are
    the ones ``tf.autograph.experimental.do_not_convert`` and ``torch.compiler.disable``
    set, set here without importing either framework: AutoGraph then calls ``fn`` as it
    is, and ``torch.compile`` breaks its graph around the call, which runs in Python on
    every call (``fullgraph=True`` refuses it instead).
    """
    marks: Any = fn
    marks.autograph_info__ = frozenset()
    marks._torchdynamo_disable = True
    marks._torchdynamo_disable_msg = (
        f"globalstep's {fn.__qualname__} runs once per update, as Python, outside the graph"
    )
    return fn


def _find_tf() -> Callable[[], bool] | None:
    global _tf_eager, _tf_inside
    tf = sys.modules.get(_TF_MODULE)
    if tf is None:
        return None
    eager: Callable[[], bool] | None = getattr(tf, "executing_eagerly", None)
    inside: Callable[[], bool] | None = getattr(tf, "inside_function", None)
    if eager is None or inside is None:  # half imported: look again next time
        return None
    _tf_inside = inside
    _tf_eager = eager
    return eager


def _find_jax() -> Any:
    global _jax_core, _jax_ctx, _jax_eval
    core = sys.modules.get(_JAX_CORE)
    if core is None or not hasattr(core, "trace_state_clean"):  # absent or half imported
        return None
    _jax_core = core
    ctx, eval_trace = getattr(core, "trace_ctx", None), getattr(core, "eval_trace", None)
    if ctx is not None and eval_trace is not None:
        _jax_eval = eval_trace
        _jax_ctx = ctx
    return core


def _jax_tracing() -> bool:
    core = _jax_core
    if _jax_ctx is None:  # jax < 0.4.36: a trace stack, clean when eager
        return not core.trace_state_clean()
    stack = getattr(core, "unsafe_get_trace_stack", None)
    if stack is None:  # cannot walk the stack: any non-eager trace counts
        return True
    return "DynamicJaxprTrace" in str(stack(_jax_ctx.trace))


opaque(traced_by)
opaque(check_eager)
