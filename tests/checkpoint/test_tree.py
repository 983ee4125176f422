"""Tests for globalstep.checkpoint.tree."""

import collections
import dataclasses
import sys

import ml_dtypes
import numpy as np
import pytest

from globalstep import (
    Clock,
    ConfigError,
    CorruptCheckpointError,
    MissingDependencyError,
    RestoreMismatchError,
    every,
)
from globalstep.checkpoint import array_nodes, check_key, decode_dtype, unflatten
from globalstep.checkpoint import flatten_tree as flatten
from globalstep.checkpoint._tree.fit import placeholders
from globalstep.checkpoint._tree.leaves import encode_dtype, safetensors_code


def test_flatten_names_arrays_by_path():
    """Arrays are named by their path through dicts, lists and tuples."""
    flat = flatten({"model": {"layers": [np.zeros(1), (np.ones(2),)]}})
    assert list(flat.arrays) == ["model/layers/0", "model/layers/1/0"]


def test_flatten_keeps_non_array_leaves_in_json():
    """Python scalars, strings and None stay in the JSON structure."""
    flat = flatten({"i": 3, "f": 0.5, "s": "x", "n": None, "b": True})
    tree, _ = unflatten(flat.structure, flat.arrays)
    assert tree == {"i": 3, "f": 0.5, "s": "x", "n": None, "b": True}


def test_non_finite_floats_round_trip():
    """NaN and infinities survive the JSON structure."""
    flat = flatten([float("nan"), float("inf"), float("-inf")])
    tree, _ = unflatten(flat.structure, flat.arrays)
    assert np.isnan(tree[0])
    assert tree[1] == float("inf")
    assert tree[2] == float("-inf")


def test_tuples_stay_tuples():
    """A tuple comes back as a tuple and a list as a list."""
    flat = flatten({"t": (1, 2), "l": [1, 2]})
    tree, _ = unflatten(flat.structure, flat.arrays)
    assert tree == {"t": (1, 2), "l": [1, 2]}


def test_object_arrays_are_refused():
    """An array of Python objects is refused, since saving it would need pickle."""
    with pytest.raises(ConfigError, match="must not hold Python objects"):
        flatten({"o": np.array([object()])})


def test_unknown_leaf_types_are_refused():
    """A leaf that is neither data nor stateful is refused, naming its path."""
    with pytest.raises(ConfigError, match=r"a/b: set"):
        flatten({"a": {"b": {1, 2}}})


@pytest.mark.parametrize("key", ["", ".", "..", "a/b", "../x", "a\\b", "x\x00", "__metadata__"])
def test_escaping_keys_are_refused(key):
    """Keys that would escape a directory or make names ambiguous are refused."""
    with pytest.raises(ConfigError, match="keys must be non-empty strings"):
        flatten({key: 1})


def test_non_string_keys_are_refused():
    """Dict keys must be strings."""
    with pytest.raises(ConfigError, match="keys must be"):
        check_key(3)


def test_clock_progress_is_collected():
    """Every clock in the tree has its Progress recorded."""
    clock = Clock("critic")
    clock.tick(4)
    flat = flatten({"c": clock})
    assert flat.clocks[0]["clock"] == "critic"
    assert flat.clocks[0]["step"] == 4


def test_stateful_objects_restore_in_place():
    """Objects with load_state_dict receive their saved state in place."""
    clock, trigger = Clock(), every(3)
    clock.tick(7)
    trigger.should_fire(clock)
    flat = flatten({"clock": clock, "trigger": trigger})
    fresh_clock, fresh_trigger = Clock(), every(3)
    tree, _ = unflatten(
        flat.structure, flat.arrays, {"clock": fresh_clock, "trigger": fresh_trigger}
    )
    assert tree["clock"] is fresh_clock
    assert fresh_clock.step == 7
    assert fresh_trigger.state_dict() == trigger.state_dict()


def test_template_misfit_is_reported():
    """Missing, unexpected and mismatched entries are all named."""
    flat = flatten({"a": np.zeros(2), "b": np.zeros(3), "c": 1})
    template = {"a": np.zeros(2, np.float32), "b": np.zeros(3), "d": 2}
    with pytest.raises(
        RestoreMismatchError, match="missing: d; unexpected: c; mismatched: a"
    ) as info:
        unflatten(flat.structure, flat.arrays, template)
    assert info.value.report.mismatched == ["a: expected float32[2], got float64[2]"]


def test_partial_keeps_template_values():
    """With partial=True what does not fit keeps the template's value."""
    flat = flatten({"a": np.ones(2), "c": 1})
    template = {"a": np.zeros(3), "d": 2}
    tree, report = unflatten(flat.structure, flat.arrays, template, partial=True)
    assert tree["a"] is template["a"]
    assert tree["d"] == 2
    assert "c" not in tree
    assert not report.ok


def test_placeholders_take_no_memory():
    """Placeholders have the saved shape and dtype but share one element."""
    flat = flatten({"a": np.zeros((1000, 1000), np.float32)})
    stand_in = placeholders(flat.structure)["a"]
    assert stand_in.shape == (1000, 1000)
    assert stand_in.strides == (0, 0)


@pytest.mark.parametrize(
    "dtype",
    [np.float32, ">f8", "M8[ns]", "U3", [("x", "<i4"), ("y", ">f8")], ml_dtypes.bfloat16],
)
def test_dtype_descriptions_round_trip(dtype):
    """Every dtype description reads back as the little-endian dtype."""
    original = np.dtype(dtype)
    assert decode_dtype(encode_dtype(original)) == original.newbyteorder("<")


@pytest.mark.parametrize("descr", ["|O", {"ml_dtypes": "no_such"}, 7, [["a"]]])
def test_bad_dtype_descriptions_are_corrupt(descr):
    """A dtype description that is not a dtype, or names objects, is corruption."""
    with pytest.raises(CorruptCheckpointError, match="dtype"):
        decode_dtype(descr)


def test_safetensors_codes():
    """Native dtypes get their safetensors code, others are stored as raw bytes."""
    assert safetensors_code(np.dtype(ml_dtypes.bfloat16)) == "BF16"
    assert safetensors_code(np.dtype(np.float32)) == "F32"
    assert safetensors_code(np.dtype(np.complex128)) == "U8"


@pytest.mark.parametrize(
    "structure",
    [[], {"dict": 3}, {"list": {}}, {"value": [1]}, {"float": "big"}, {"dict": {}, "list": []}],
)
def test_malformed_structure_is_corrupt(structure):
    """A malformed structure raises CorruptCheckpointError."""
    with pytest.raises(CorruptCheckpointError, match=r"state.json"):
        unflatten(structure, {})


def test_bfloat16_without_ml_dtypes_names_the_extra(monkeypatch):
    """Restoring a bfloat16 dtype without ml_dtypes says which extra to install."""
    monkeypatch.setitem(sys.modules, "ml_dtypes", None)
    with pytest.raises(MissingDependencyError, match=r"pip install 'globalstep\[bf16\]'"):
        decode_dtype({"ml_dtypes": "bfloat16"})


def test_ml_dtypes_name_that_is_not_an_identifier_is_corrupt():
    """An ml_dtypes name that is not an identifier is refused before any lookup."""
    with pytest.raises(CorruptCheckpointError, match="bad dtype"):
        decode_dtype({"ml_dtypes": "__class__.mro"})


@pytest.mark.parametrize(
    ("structure", "match"),
    [
        (
            {"list": [{"array": "a", "dtype": "<f8", "shape": []}] * 2},
            "bad or repeated array key 'a'",
        ),
        ({"dict": []}, "dict at <root> is not an object"),
        ({"dict": {"x": {"tuple": {}}}}, "tuple at <root>/x is not a list"),
    ],
)
def test_malformed_array_index_is_corrupt(structure, match):
    """Listing the arrays of a malformed structure raises CorruptCheckpointError."""
    with pytest.raises(CorruptCheckpointError, match=match):
        array_nodes(structure)


def test_array_node_naming_no_array_is_corrupt():
    """A structure naming an array the file lacks is a malformed tree, not a KeyError."""
    structure = {"array": "gone", "dtype": "<f8", "shape": []}
    with pytest.raises(CorruptCheckpointError, match="malformed tree"):
        unflatten(structure, {})


def test_placeholders_refuse_a_bad_shape():
    """A negative or non-integer saved shape is corrupt, naming the array."""
    with pytest.raises(CorruptCheckpointError, match="bad shape for 'a'"):
        placeholders({"array": "a", "dtype": "<f8", "shape": [2.5]})


def test_every_kind_of_misfit_is_reported():
    """Stateful, array, dict and sequence misfits and sequence lengths are all reported."""
    clock = Clock()
    flat = flatten(
        {"c": clock, "a": np.zeros(2), "d": {"x": 1}, "s": [1, 2], "t": (1,), "long": [1, 2]}
    )
    template = {"c": 0, "a": 0, "d": 0, "s": 0, "t": (1, 2), "long": [1]}
    tree, report = unflatten(flat.structure, flat.arrays, template, partial=True)
    assert report.mismatched == [
        "c: expected int, got a stateful object",
        "a: expected int, got an array",
        "d: expected int, got a dict",
        "s: expected int, got a list",
    ]
    assert report.missing == ["t/1"]
    assert report.unexpected == ["long/1"]
    assert tree == {"c": 0, "a": 0, "d": 0, "s": 0, "t": (1, 2), "long": [1]}
    assert str(report).startswith("missing: t/1; unexpected: long/1; mismatched: c: ")


def test_stateful_object_without_template_comes_back_as_its_state():
    """Without a template a saved stateful object is returned as its state_dict()."""
    clock = Clock()
    clock.tick(3)
    flat = flatten({"clock": clock})
    tree, _ = unflatten(flat.structure, flat.arrays)
    assert isinstance(tree["clock"], dict)
    assert tree["clock"].keys() == clock.state_dict().keys()
    assert tree["clock"]["step"] == 3


Pair = collections.namedtuple("Pair", "weights count")


@dataclasses.dataclass
class Moments:
    """A user's own dataclass holding optimizer state."""

    mean: np.ndarray
    count: int
    seen: float = dataclasses.field(init=False, default=0.0)


@dataclasses.dataclass(frozen=True)
class Frozen:
    """A frozen dataclass."""

    scale: float
    table: np.ndarray


def test_namedtuple_comes_back_as_the_templates_class():
    """A namedtuple restores as its template's class; without a template, as a tuple."""
    flat = flatten({"p": Pair(np.ones(2), 3)})
    tree, _ = unflatten(flat.structure, flat.arrays, {"p": Pair(np.zeros(2), 0)})
    assert type(tree["p"]) is Pair
    assert tree["p"].count == 3
    assert np.array_equal(tree["p"].weights, np.ones(2))
    bare, _ = unflatten(flat.structure, flat.arrays)
    assert type(bare["p"]) is tuple


def test_dataclass_round_trips_into_its_template():
    """A dataclass saves as its fields (non-init ones too) and restores as the template's
    class, its arrays written into the template's own in place."""
    saved = Moments(np.arange(3.0), 7)
    saved.seen = 2.5
    flat = flatten({"m": saved})
    assert flat.structure["dict"]["m"]["dict"]["count"] == {"value": 7}
    template = Moments(np.zeros(3), 0)
    tree, _ = unflatten(flat.structure, flat.arrays, {"m": template})
    assert type(tree["m"]) is Moments
    assert (tree["m"].count, tree["m"].seen) == (7, 2.5)
    assert tree["m"].mean is template.mean
    assert np.array_equal(template.mean, np.arange(3.0))


def test_dataclass_without_template_comes_back_as_a_dict():
    """Without a template a dataclass comes back as a dict of its fields (no class is looked
    up by name)."""
    flat = flatten({"f": Frozen(0.5, np.ones(1))})
    tree, _ = unflatten(flat.structure, flat.arrays)
    assert tree["f"]["scale"] == 0.5
    assert np.array_equal(tree["f"]["table"], np.ones(1))


def test_frozen_dataclass_restores():
    """A frozen dataclass restores as a new instance of its class."""
    flat = flatten(Frozen(0.5, np.ones(2)))
    tree, _ = unflatten(flat.structure, flat.arrays, Frozen(1.0, np.zeros(2)))
    assert isinstance(tree, Frozen)
    assert tree.scale == 0.5


def test_dataclass_misfit_is_reported():
    """A field the checkpoint lacks is reported missing and keeps the template's value."""
    flat = flatten({"f": {"scale": 2.0}})
    with pytest.raises(RestoreMismatchError, match="missing: f/table"):
        unflatten(flat.structure, flat.arrays, {"f": Frozen(1.0, np.zeros(1))})
    tree, _ = unflatten(flat.structure, flat.arrays, {"f": Frozen(1.0, np.zeros(1))}, partial=True)
    assert tree["f"].scale == 2.0


def test_stateful_dataclass_saves_through_state_dict():
    """A dataclass with state_dict() is saved through it, not field by field."""

    @dataclasses.dataclass
    class Counter:
        n: int = 0

        def state_dict(self):
            return {"total": self.n}

        def load_state_dict(self, state):
            self.n = state["total"]

    flat = flatten({"c": Counter(4)})
    assert "stateful" in flat.structure["dict"]["c"]
    target = Counter()
    unflatten(flat.structure, flat.arrays, {"c": target})
    assert target.n == 4


def test_sharded_leaf_inside_a_dataclass_template_is_found():
    """A sharded value held by a dataclass in the template is found where the saved
    structure has its sharded node (the same walk as for arrays)."""
    from globalstep.checkpoint import Sharded
    from globalstep.checkpoint._tree.templates import template_sharded

    @dataclasses.dataclass
    class Holder:
        w: object

    value = Sharded(object(), np.dtype(np.float32), (4,))
    structure = {"dict": {"h": {"dict": {"w": {"sharded": "h/w"}}}}}
    assert template_sharded(structure, {"h": Holder(value)}) == {"h/w": value.value}
    assert template_sharded(structure, {"h": Holder(np.zeros(4))}) == {"h/w": None}


def test_check_fit_finds_what_template_arrays_finds():
    """The fit check's walk returns the template arrays that template_arrays finds:
    through dicts, lists, tuples and dataclasses, misfits included under partial."""
    from globalstep.checkpoint import template_arrays
    from globalstep.checkpoint._tree.fit import check_fit

    saved = {"m": Moments(np.arange(3.0), 7), "l": [np.ones(2), (np.zeros((2, 2), np.int32),)]}
    flat = flatten(saved)
    template = {"m": Moments(np.zeros(3), 0), "l": [np.zeros(2), (np.zeros((3, 3), np.int32),)]}
    found = check_fit(flat.structure, template, partial=True)
    expected = template_arrays(flat.structure, template)
    assert sorted(found) == sorted(expected) == ["l/0", "l/1/0", "m/mean"]
    assert all(found[k] is expected[k] for k in found)


def test_check_fit_refuses_a_misfit_and_a_bad_shape():
    """Without partial a misfit raises as unflatten does; a bad saved shape is corrupt."""
    from globalstep.checkpoint._tree.fit import check_fit

    flat = flatten({"w": np.zeros(2, np.float32)})
    with pytest.raises(RestoreMismatchError, match=r"w: expected float32\[3\], got float32\[2\]"):
        check_fit(flat.structure, {"w": np.zeros(3, np.float32)})
    with pytest.raises(RestoreMismatchError, match="w: expected float64"):
        check_fit(flat.structure, {"w": np.zeros(2, np.float64)})
    with pytest.raises(CorruptCheckpointError, match="bad shape"):
        check_fit({"array": "a", "dtype": "<f8", "shape": [True]}, np.zeros(1))


def test_check_fit_refuses_a_read_only_view_of_a_foreign_buffer():
    """A read-only template array over another library's buffer misfits, as in unflatten."""
    from globalstep.checkpoint._tree.fit import check_fit

    flat = flatten({"w": np.zeros(4, np.uint8)})
    foreign = np.frombuffer(memoryview(bytes(4)), np.uint8)
    with pytest.raises(RestoreMismatchError, match="read-only view"):
        check_fit(flat.structure, {"w": foreign})


def _same_tree(a, b):
    """True when two trees have the same types and values, and the very same arrays."""
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return a is b
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_same_tree(a[k], b[k]) for k in a)
    if isinstance(a, list | tuple):
        return len(a) == len(b) and all(map(_same_tree, a, b))
    return bool(a == b)


def test_fit_builds_the_restored_tree_when_every_array_fills_in_place():
    """Where every template array is read into in place, the fit check's own tree is the
    one unflatten builds (dicts, lists, tuples, namedtuples, values; the same arrays)."""
    from globalstep.checkpoint._tree.fit import fit_template

    saved = {
        "a": np.ones(2),
        "l": [np.arange(3.0), (np.ones(1, np.int32), 5)],
        "p": Pair(np.ones(2), 3),
    }
    flat = flatten(saved)
    template = {
        "a": np.zeros(2),
        "l": [np.zeros(3), (np.zeros(1, np.int32), 0)],
        "p": Pair(np.zeros(2), 0),
    }
    fit = fit_template(flat.structure, template)
    assert fit.final
    tree, report = fit.restored(dict(fit.targets))
    expected, _ = unflatten(flat.structure, fit.targets, template)
    assert report.ok
    assert _same_tree(tree, expected)
    assert tree["a"] is template["a"]
    assert type(tree["p"]) is Pair
    assert (tree["l"][1][1], tree["p"].count) == (5, 3)


def test_fit_tree_is_declined_where_the_arrays_read_are_not_the_targets():
    """Fit.restored returns None where an array was read into a new buffer, or one is
    missing or extra."""
    from globalstep.checkpoint._tree.fit import fit_template

    flat = flatten({"a": np.ones(2), "b": np.ones(2)})
    fit = fit_template(flat.structure, {"a": np.zeros(2), "b": np.zeros(2)})
    assert fit.restored({"a": fit.targets["a"], "b": np.ones(2)}) is None
    assert fit.restored({"a": fit.targets["a"]}) is None
    assert fit.restored({**fit.targets, "c": np.ones(1)}) is None
    assert fit.restored(dict(fit.targets)) is not None


def test_fit_tree_with_an_unexpected_array_is_declined():
    """Under partial, an array the template lacks is still read: the restore rebuilds."""
    from globalstep.checkpoint._tree.fit import fit_template

    flat = flatten({"w": np.ones(2), "x": np.ones(1)})
    fit = fit_template(flat.structure, {"w": np.zeros(2)}, partial=True)
    arrays = {"w": fit.targets["w"], "x": np.ones(1)}
    assert fit.restored(arrays) is None


def _read_only(array):
    array.flags.writeable = False
    return array


@pytest.mark.parametrize(
    ("saved", "template"),
    [
        (np.ones(4), np.zeros(8)[::2]),  # not C-contiguous: read elsewhere, copied over
        (np.ones(4), np.zeros(4, ">f8")),  # the other byte order: converted, copied over
        (np.ones(4), _read_only(np.zeros(4))),  # read-only: a new array is returned
        (np.float32(1), np.zeros((), np.float32)),  # a NumPy scalar is returned
        (np.float32(1), np.float32(0)),
        (Moments(np.ones(3), 1), Moments(np.zeros(3), 0)),  # a dataclass: filled after the read
        (Clock(), Clock()),  # a stateful object: load_state_dict after the read
    ],
)
def test_fit_tree_is_not_final_where_the_restore_must_rebuild(saved, template):
    """Copies, new arrays, NumPy scalars, dataclasses and stateful objects are left to
    unflatten after the read."""
    from globalstep.checkpoint._tree.fit import fit_template

    flat = flatten({"x": saved})
    assert not fit_template(flat.structure, {"x": template}).final


# --------------------------------------------------------------- containers filled in place


def test_dicts_and_lists_are_restored_in_place():
    """The template's own dicts and lists, nested ones too, receive the restored values:
    a loop that goes on counting in what it passed counts from the checkpoint (issue 33)."""
    saved = {
        "w": np.arange(2.0),
        "meta": {"updates": 15, "loss": 0.25, "inner": {"name": "b", "seen": [3, 4.5]}},
        "history": [1, {"best": 0.5}, np.float32(2)],
    }
    flat = flatten(saved)
    w, inner, seen = np.zeros(2), {"name": "a", "seen": [0, 0.0]}, [0, 0.0]
    inner["seen"] = seen
    meta = {"updates": 0, "loss": 0.0, "inner": inner}
    best = {"best": 9.0}
    history = [0, best, np.float32(0)]
    template = {"w": w, "meta": meta, "history": history}
    tree, report = unflatten(flat.structure, flat.arrays, template)
    assert report.ok
    assert tree is template
    assert tree["w"] is w
    assert tree["meta"] is meta
    assert tree["history"] is history
    assert meta["inner"] is inner
    assert inner["seen"] is seen
    assert history[1] is best
    assert meta == {"updates": 15, "loss": 0.25, "inner": {"name": "b", "seen": [3, 4.5]}}
    assert history[:2] == [1, {"best": 0.5}]
    assert type(history[2]) is np.float32
    assert history[2] == 2
    assert w.tolist() == [0.0, 1.0]
    meta["updates"] += 1  # counted in the dict passed: what the next save holds
    assert flatten(template).structure["dict"]["meta"]["dict"]["updates"] == {"value": 16}


def test_dataclasses_with_mutable_fields_are_restored_in_place():
    """A dataclass that is not frozen is the template's own object after the restore, its
    fields (non-init ones too) set in place; a frozen one is rebuilt."""
    saved = Moments(np.arange(3.0), 7)
    saved.seen = 2.5
    flat = flatten({"m": saved, "f": Frozen(0.5, np.ones(1)), "p": Pair(np.ones(1), 4)})
    moments, frozen, pair = Moments(np.zeros(3), 0), Frozen(1.0, np.zeros(1)), Pair(np.zeros(1), 0)
    template = {"m": moments, "f": frozen, "p": pair}
    tree, _ = unflatten(flat.structure, flat.arrays, template)
    assert tree["m"] is moments
    assert (moments.count, moments.seen) == (7, 2.5)
    assert moments.mean.tolist() == [0.0, 1.0, 2.0]
    # Immutable containers cannot change: new ones, in the template's own dict.
    assert tree["f"] is not frozen
    assert template["f"] is tree["f"]
    assert tree["f"].scale == 0.5
    assert frozen.scale == 1.0
    assert tree["p"] is not pair
    assert type(tree["p"]) is Pair
    assert tree["p"].count == 4


def test_a_list_in_a_tuple_is_filled_in_place():
    """A tuple is rebuilt, but the dict and list it holds are the template's, filled."""
    flat = flatten(({"n": 3}, [1, 2], 5))
    counts, items = {"n": 0}, [0, 0]
    tree, _ = unflatten(flat.structure, flat.arrays, (counts, items, 0))
    assert tree == ({"n": 3}, [1, 2], 5)
    assert tree[0] is counts
    assert tree[1] is items


def test_a_misfit_leaves_the_templates_containers_untouched():
    """A strict restore that does not fit raises before any container is filled; under
    partial=True the entries that fit are filled, the others follow the report."""
    flat = flatten({"meta": {"updates": 15, "extra": 1}, "l": [1, 2, 3], "x": np.ones(2)})
    meta, items = {"updates": 0, "mine": "kept"}, [0, 0]
    template = {"meta": meta, "l": items, "x": np.zeros(3)}
    with pytest.raises(RestoreMismatchError, match="missing: meta/mine"):
        unflatten(flat.structure, flat.arrays, template)
    assert meta == {"updates": 0, "mine": "kept"}
    assert items == [0, 0]
    tree, report = unflatten(flat.structure, flat.arrays, template, partial=True)
    assert tree is template
    assert tree["meta"] is meta
    assert tree["l"] is items
    # Unexpected entries are not added, missing ones keep the template's value.
    assert meta == {"updates": 15, "mine": "kept"}
    assert items == [1, 2]
    assert sorted(report.unexpected) == ["l/2", "meta/extra"]
    assert report.missing == ["meta/mine"]
    assert template["x"].tolist() == [0.0, 0.0, 0.0]  # mismatched: left as it is


def test_the_fit_tree_fills_the_template_when_it_is_returned():
    """The fast path (Fit.restored, no second walk) fills the containers too, and only
    when it returns the tree."""
    from globalstep.checkpoint._tree.fit import fit_template

    flat = flatten({"w": np.ones(2), "meta": {"n": 4}})
    meta = {"n": 0}
    fit = fit_template(flat.structure, {"w": np.zeros(2), "meta": meta})
    assert fit.final
    assert meta == {"n": 0}
    assert fit.restored({"w": np.ones(2)}) is None
    assert meta == {"n": 0}
    tree, _ = fit.restored(fit.targets)
    assert tree["meta"] is meta
    assert meta == {"n": 4}
