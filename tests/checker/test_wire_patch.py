"""The patch of a delta report's section (checker.wire_patch): applied to the base's value it gives the agent's
value exactly, and a patch that does not fit the value is refused naming where."""

from __future__ import annotations

import copy
import datetime as dt
from typing import Any

import orjson
import pytest

from checker.sim import SimulatedFleet
from checker.wire import section_values
from checker.wire_patch import PatchError, apply_patch, diff

START = dt.datetime(2026, 6, 1, tzinfo=dt.UTC)
LONG = "what did not change, long enough that a patch below is shorter than the whole"


def round_trip(old: Any, new: Any) -> dict[str, Any]:
    patch = diff(old, new)
    assert patch is not None
    patch = orjson.loads(orjson.dumps(patch))  # as it travels
    patched = apply_patch(copy.deepcopy(old), patch, "s")
    assert orjson.dumps(patched, option=orjson.OPT_SORT_KEYS) == orjson.dumps(new, option=orjson.OPT_SORT_KEYS)
    return patch


def test_every_section_of_a_simulated_fleet_patches_back_exactly() -> None:
    fleet = SimulatedFleet(30, seed=11, fault_fraction=0.5)
    first = fleet.reports(START)
    fleet.reports(START + dt.timedelta(minutes=1))
    later = fleet.reports(START + dt.timedelta(minutes=2))
    patched = 0
    for before, after in zip(first, later, strict=True):
        old, new = section_values(before), section_values(after)
        for name in old:
            if isinstance(old[name], dict | list) and isinstance(new[name], type(old[name])):
                round_trip(old[name], new[name])
                patched += 1
    assert patched > 30 * 10


@pytest.mark.parametrize(
    ("old", "new", "patch"),
    [
        ({"a": 1, "b": 2}, {"a": 1, "c": 3}, {"s": {"c": 3}, "d": ["b"]}),  # a key set, a key deleted
        ({"x": {"y": "p", "z": LONG}}, {"x": {"y": "q", "z": LONG}}, {"s": {"x/y": "q"}}),  # a path below
        ({"n": 123456789}, {"n": 123456799}, {"a": {"n": 10}}),  # a counter by its increment
        ({"n": 5}, {"n": 6}, {"s": {"n": 6}}),  # an increment no shorter than the value: set
        ([1, 2, 3], [1, 2], {"n": 2}),  # an array cut
        ([1, 2], [1, 2, 3, 4], {"n": 4, "s": {"2": 3, "3": 4}}),  # an array grown
        ([100000, 200000, 300000], [100500, 200500, 300500], {"a": [500, 500, 500]}),  # a row of counters
        (
            {"r": [{"c": [100, 200, 300, 400, 500, 600], "z": LONG}]},
            {"r": [{"c": [100, 200, 300, 400, 500, 600, 700], "z": LONG}]},
            {"p": {"r/0/c": {"n": 7, "s": {"6": 700}}}},
        ),
        ({"a/b": {"~c": 1, "z": LONG}}, {"a/b": {"~c": 2, "z": LONG}}, {"s": {"a~1b/~0c": 2}}),  # / and ~ escaped
        ({"": {"x": 1, "z": LONG}}, {"": {"x": 2, "z": LONG}}, {"s": {"/x": 2}}),  # the key "" is a segment too
        ({"v": 1}, {"v": True}, {"s": {"v": True}}),  # 1 and true differ in JSON
        ({"v": 0.0}, {"v": -0.0}, {"s": {"v": -0.0}}),  # so do 0.0 and -0.0
    ],
    ids=[
        "keys",
        "path",
        "increment",
        "short",
        "cut",
        "grow",
        "row",
        "deeper-length",
        "escaped",
        "empty-key",
        "bool",
        "zero",
    ],
)
def test_each_operation_patches_back_exactly(old: Any, new: Any, patch: dict[str, Any]) -> None:
    assert round_trip(old, new) == patch


def test_a_value_that_is_not_an_object_or_array_is_not_patched() -> None:
    assert diff(None, {"a": 1}) is None
    assert diff({"a": 1}, [1]) is None


BASE = {"rows": [{"name": "LOC", "per_cpu": [10, 20]}], "count": 3, "label": "x"}


@pytest.mark.parametrize(
    ("patch", "where"),
    [
        ([], "patched.interrupts: a patch is an object of operations"),
        ({"x": {}}, "patched.interrupts: unknown patch operations ['x']"),
        ({"s": []}, "patched.interrupts: p and s are objects, d an array"),
        ({"s": {"rows/1/name": "x"}}, "patched.interrupts.rows: index 1 is beyond the array's 1 items"),
        ({"s": {"rows/01/name": "x"}}, "patched.interrupts.rows: '01' is not an index of an array"),
        ({"s": {"missing/name": "x"}}, "patched.interrupts.missing: not in the base's value"),
        ({"d": [5]}, "patched.interrupts: '5' is not a path"),
        ({"p": {"count": {"s": {}}}}, "patched.interrupts.count: the base's value is not an object or array"),
        ({"a": {"label": 1}}, "patched.interrupts.label: adds an integer to an integer"),
        ({"a": {"count": True}}, "patched.interrupts.count: adds an integer to an integer"),
        ({"a": [1]}, "patched.interrupts.a: an array of increments, alone, one for each item of an array"),
        ({"d": ["rows/0/per_cpu/0"]}, "patched.interrupts.rows.0.per_cpu.0: d deletes an object's key"),
        ({"d": ["nothing"]}, "patched.interrupts.nothing: not in the base's value"),
        ({"n": 2}, "patched.interrupts.n: the length of an array"),
        (
            {"p": {"rows": {"n": 3, "s": {"2": {}, "0": {}}}}},
            "patched.interrupts.rows.n: the array grows to 3 but not every",
        ),
        ({"p": {"rows": {"n": -1}}}, "patched.interrupts.rows.n: the length of an array"),
        ({"p": {"rows/0/per_cpu": {"a": [1, "2"]}}}, "patched.interrupts.rows.0.per_cpu.1: adds an integer"),
    ],
    ids=[
        "not-object",
        "unknown-op",
        "set-not-object",
        "index-beyond",
        "index-leading-zero",
        "path-missing",
        "path-not-text",
        "patch-a-number",
        "add-to-text",
        "add-a-bool",
        "add-row-length",
        "delete-array-item",
        "delete-missing",
        "length-of-object",
        "grown-with-hole",
        "negative-length",
        "row-of-text",
    ],
)
def test_a_patch_that_does_not_fit_the_base_is_refused_naming_where(patch: Any, where: str) -> None:
    with pytest.raises(PatchError) as raised:
        apply_patch(copy.deepcopy(BASE), patch, "patched.interrupts")
    assert str(raised.value).startswith(where)
