"""Tests for globalstep.checkpoint._tree.adapters and adapted nodes in state trees."""

import fake_framework as fw
import numpy as np
import pytest

from globalstep import (
    CheckpointManager,
    Clock,
    ConfigError,
    CorruptCheckpointError,
    MissingDependencyError,
    RestoreMismatchError,
)
from globalstep.checkpoint import flatten_tree as flatten
from globalstep.checkpoint import template_arrays, unflatten
from globalstep.checkpoint._tree import adapters

adapters.register("fake_framework", "fake_framework_adapters")


class _Named(adapters.Adapter):
    name = "fake_framework.Named"

    def matches(self, obj):
        return False

    def save(self, obj):
        return None


def test_builtin_objects_find_no_adapter():
    """Plain Python containers are never offered to an adapter."""
    assert adapters.find({"a": 1}) is None
    assert adapters.find([1]) is None


def test_unregistered_framework_object_is_refused_with_its_type():
    """A framework object no adapter takes is refused, naming its module and type."""
    with pytest.raises(ConfigError, match=r"model: fake_framework\.Opaque"):
        flatten({"model": fw.Opaque()})


def test_adapted_object_is_saved_under_its_adapter_name():
    """The node names the adapter and keeps the array's path-based key."""
    flat = flatten({"model": fw.Tensor([1.0, 2.0])})
    node = flat.structure["dict"]["model"]
    assert node["adapted"] == "fake_framework.Tensor"
    assert list(flat.arrays) == ["model/data"]


def test_restore_fills_a_shared_template_in_place_and_applies_after_the_fit():
    """The template's memory is filled by the reader and apply() runs once the fit is known."""
    import fake_framework_adapters as fa

    flat = flatten({"t": fw.Tensor([1.0, 2.0])})
    target = fw.Tensor([0.0, 0.0])
    into = template_arrays(flat.structure, {"t": target})
    np.copyto(into["t/data"], flat.arrays["t/data"])  # what the reader does
    fa.LOADS.clear()
    tree, report = unflatten(flat.structure, {"t/data": into["t/data"]}, {"t": target})
    assert report.ok
    assert tree["t"] is target
    np.testing.assert_array_equal(target.data, [1.0, 2.0])
    assert fa.LOADS == ["tensor"]


def test_immutable_kind_is_replaced_by_restore():
    """An adapter's restore() value stands for an immutable template in the restored tree,
    and in the template's own dict (restored in place)."""
    flat = flatten({"f": fw.Frozen([3.0])})
    before = fw.Frozen([0.0])
    template = {"f": before}
    tree, _ = unflatten(flat.structure, flat.arrays, template)
    assert isinstance(tree["f"], fw.Frozen)
    assert tree["f"] is not before
    assert tree is template
    np.testing.assert_array_equal(tree["f"].data, [3.0])
    np.testing.assert_array_equal(before.data, [0.0])


def test_no_apply_when_the_fit_fails():
    """A misfit elsewhere raises before any adapter's apply() runs."""
    import fake_framework_adapters as fa

    flat = flatten({"t": fw.Tensor([1.0]), "n": np.zeros(2)})
    fa.LOADS.clear()
    with pytest.raises(RestoreMismatchError, match="n: expected float64"):
        unflatten(flat.structure, flat.arrays, {"t": fw.Tensor([0.0]), "n": np.zeros(3)})
    assert fa.LOADS == []


def test_check_only_restore_does_not_call_restore_or_apply():
    """With apply=False the template objects come back unchanged."""
    flat = flatten({"f": fw.Frozen([3.0])})
    template = {"f": fw.Frozen([0.0])}
    tree, report = unflatten(flat.structure, flat.arrays, template, apply=False)
    assert report.ok
    assert tree["f"] is template["f"]


def test_inner_misfit_is_reported_with_its_path():
    """A shape change inside an adapted object names the flattened path."""
    flat = flatten({"t": fw.Tensor([1.0, 2.0])})
    _, report = unflatten(flat.structure, flat.arrays, {"t": fw.Tensor([0.0])}, partial=True)
    assert report.mismatched == ["t/data: expected float32[1], got float32[2]"]


def test_template_of_another_kind_is_a_mismatch():
    """A template object the named adapter does not take is reported, not restored."""
    flat = flatten({"t": fw.Tensor([1.0])})
    _, report = unflatten(flat.structure, flat.arrays, {"t": np.zeros(1)}, partial=True)
    assert report.mismatched == ["t: expected ndarray, got a fake_framework.Tensor"]


def test_restore_without_template_rebuilds():
    """Without a template the adapter's rebuild() makes the object."""
    flat = flatten({"t": fw.Tensor([5.0])})
    tree, _ = unflatten(flat.structure, flat.arrays)
    assert isinstance(tree["t"], fw.Tensor)
    np.testing.assert_array_equal(tree["t"].data, [5.0])


def test_unknown_adapter_name_is_corruption():
    """A node naming no known adapter is a corrupt checkpoint, never an import."""
    structure = {"adapted": "os.system", "state": {"value": 1}}
    with pytest.raises(CorruptCheckpointError, match=r"no adapter named 'os\.system'"):
        unflatten(structure, {})


def test_non_string_adapter_name_is_corruption():
    """An adapter name that is not a string is a corrupt checkpoint."""
    with pytest.raises(CorruptCheckpointError, match="bad adapter name 3"):
        adapters.named(3)


def test_missing_framework_reads_the_plain_state(monkeypatch):
    """Without the framework installed, a template-free restore gives the plain state."""
    registry = adapters.Registry()
    registry.register("absentfw", "globalstep_absent_module_for_tests")
    monkeypatch.setattr(adapters, "_REGISTRY", registry)

    def missing(name):
        raise MissingDependencyError("absentfw", "absentfw", "restoring absentfw objects")

    monkeypatch.setattr(registry, "named", missing)
    structure = {"adapted": "absentfw.Thing", "state": {"value": 7}}
    tree, _ = unflatten(structure, {})
    assert tree == 7


def test_duplicate_adapter_name_is_refused():
    """Two adapters cannot share a name."""
    registry = adapters.Registry()
    registry.add(_Named())
    with pytest.raises(ConfigError, match="names must be unique"):
        registry.add(_Named())


def test_root_with_a_dot_is_refused():
    """A framework root is one module name."""
    with pytest.raises(ConfigError, match="`root` must be a module name without dots"):
        adapters.Registry().register("a.b", "x")


def test_loader_that_fails_to_import_finds_nothing():
    """An integration module that cannot be imported leaves the object to the usual rules."""
    registry = adapters.Registry()
    registry.register("fake_framework", "globalstep_absent_module_for_tests")
    assert registry.find(fw.Tensor([1.0])) is None


def test_manager_round_trip_through_disk(tmp_path):
    """A CheckpointManager saves and restores an adapted object in place."""
    clock = Clock()
    clock.tick()
    manager = CheckpointManager(tmp_path / "c")
    manager.save(clock, {"clock": clock, "t": fw.Tensor([1.5, 2.5])})
    manager.close()
    target = fw.Tensor([0.0, 0.0])
    with CheckpointManager(tmp_path / "c") as reader:
        reader.restore({"clock": Clock(), "t": target})
    np.testing.assert_array_equal(target.data, [1.5, 2.5])


def test_partial_restore_leaves_a_misfitting_object_untouched():
    """With partial=True an adapted object that does not fit keeps its own values."""
    import fake_framework_adapters as fa

    flat = flatten({"t": fw.Tensor([1.0, 2.0]), "ok": fw.Tensor([4.0])})
    target, ok = fw.Tensor([9.0]), fw.Tensor([0.0])
    fa.LOADS.clear()
    unflatten(flat.structure, flat.arrays, {"t": target, "ok": ok}, partial=True)
    np.testing.assert_array_equal(target.data, [9.0])
    np.testing.assert_array_equal(ok.data, [4.0])
    assert fa.LOADS == ["tensor"]


class Lazy:
    """An object that creates its second array only when it builds."""

    __module__ = "lazy_example"

    def __init__(self, built=False):
        self.values = {"a": np.zeros(2)} | ({"b": np.zeros(3)} if built else {})
        self.kept = {}

    def build(self):
        self.values["b"] = np.zeros(3)
        if "b" in self.kept:
            np.copyto(self.values["b"], self.kept.pop("b"))


class _LazyAdapter(adapters.Adapter):
    name = "lazy_example.Lazy"

    def matches(self, obj):
        return isinstance(obj, Lazy)

    def save(self, obj):
        return dict(obj.values)

    def template(self, obj):
        return adapters.OpenTemplate({k: v.copy() for k, v in obj.values.items()})

    def apply(self, obj, state):
        for key, value in state.items():
            if key in obj.values:
                np.copyto(obj.values[key], value)
            else:
                obj.kept[key] = value

    def pending(self, obj):
        return sorted(obj.kept)


adapters.add(_LazyAdapter(), roots=("lazy_example",))


def test_open_template_defers_what_the_object_creates_later():
    """Saved keys an OpenTemplate lacks are deferred, not unexpected: handed to apply(),
    listed in the report, and pending() says which still wait."""
    saved = Lazy(built=True)
    saved.values["a"][:] = 1.0
    saved.values["b"][:] = 2.0
    flat = flatten({"lazy": saved})
    target = Lazy()
    _, report = unflatten(flat.structure, flat.arrays, {"lazy": target})
    assert report.ok
    assert report.deferred == ["lazy/b"]
    assert report.pending() == ["lazy/b"]
    assert target.values["a"].tolist() == [1.0, 1.0]
    target.build()
    assert report.pending() == []
    assert target.values["b"].tolist() == [2.0, 2.0, 2.0]


def test_a_misfitting_open_template_keeps_no_deferred_values():
    """An object that does not fit is left untouched, and defers nothing."""
    saved = Lazy(built=True)
    saved.values["a"] = np.ones(5)
    flat = flatten({"lazy": saved})
    target = Lazy()
    _, report = unflatten(flat.structure, flat.arrays, {"lazy": target}, partial=True)
    assert report.mismatched == ["lazy/a: expected float64[2], got float64[5]"]
    assert report.deferred == []
    assert report.pending() == []
    assert target.kept == {}
