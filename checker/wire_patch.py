"""The patch of a delta report's section (checker.wire, issue 17): what moved in a section since the base, as
changed keys of objects and changed items of arrays by index, counters by their increment.

A patch of a section's value (an object or array, as checker.wire.section_values gives it) is an object of
operations, each keyed by a path below the value it patches: segments joined by "/", "~" and "/" in a key
written "~0" and "~1" (as in a JSON Pointer, RFC 6901, without its leading "/"); an array's items by decimal
index. Applied in this order:

    "n": length         the value's new length (an array): cut, or grown by the items "s" then sets
    "a": [int, ...]     one increment per item of the value (an array of integers), alone with nothing else
    "p": {path: patch}  patch the object or array at path (used for an array whose length changes)
    "a": {path: int}    add to the integer at path (a counter whose increment is shorter than its value)
    "s": {path: value}  set the value at path (an object's key, new or not; an array's item)
    "d": [path, ...]    delete an object's key

Every segment but the last names an object or array the value has. The patched section is proved by the
delta's digest (checker.wire.rebuild), so a patch that applies but does not give the agent's value is a
"send full", never taken. Pure: stdlib and orjson.
"""

from __future__ import annotations

from typing import Any

import orjson

OPERATIONS = frozenset({"n", "a", "p", "s", "d"})
_INDEXES = [str(index) for index in range(4096)]  # an interrupts row has at most 4096 CPUs (checker.schemas)


class PatchError(ValueError):
    """A patch that does not fit the value it patches: `where` is its path (from the section's name)."""

    def __init__(self, where: str, problem: str) -> None:
        super().__init__(f"{where}: {problem}")
        self.where = where
        self.problem = problem


def same(old: Any, new: Any) -> bool:
    """Equal as JSON. Python's == first (values it finds different are different JSON too), then the canonical
    bytes: 1, 1.0 and true differ there, and -0.0 and 0.0, which == takes for equal. Both run in C."""
    return bool(old == new) and _canonical(old) == _canonical(new)


def _canonical(value: Any) -> bytes:
    return orjson.dumps(value, option=orjson.OPT_SORT_KEYS)


def diff(old: Any, new: Any) -> dict[str, Any] | None:
    """The patch that turns `old` into `new` (both objects, or both arrays), or None: not patchable."""
    nested = _nested(old, new)
    return None if nested is None else _flat(nested)


def _nested(old: Any, new: Any) -> dict[str, Any] | None:
    """The patch with every path one segment long (a deeper change under "p")."""
    sets: dict[str, Any] = {}
    deeper: dict[str, Any] = {}
    added: dict[str, int] = {}
    patch: dict[str, Any] = {}
    if isinstance(old, dict) and isinstance(new, dict):
        for key, value in new.items():
            if key not in old:
                sets[key] = value
            elif not same(old[key], value):
                _one(old[key], value, key, sets, deeper, added)
        if gone := [key for key in old if key not in new]:
            patch["d"] = gone
    elif isinstance(old, list) and isinstance(new, list):
        if len(old) == len(new) and _counters(old, new):
            return _counter_row(old, new)
        for index, value in enumerate(new):
            if index >= len(old):
                sets[str(index)] = value
            elif not same(old[index], value):
                _one(old[index], value, str(index), sets, deeper, added)
        if len(new) != len(old):
            patch["n"] = len(new)
    else:
        return None
    for op, members in (("p", deeper), ("a", added), ("s", sets)):
        if members:
            patch[op] = members
    return patch


def _counters(old: list[Any], new: list[Any]) -> bool:
    """Both arrays of integers only (not booleans): type() of each item, in C."""
    return {*map(type, old), *map(type, new)} <= {int}


def _counter_row(old: list[int], new: list[int]) -> dict[str, Any]:
    """A row of counters (an interrupt's per-CPU counts): the cells that moved by their increments, or every
    cell's increment, whichever is shorter. Comprehensions only: a 256-CPU host has rows of 256 cells."""
    steps = [now - before for before, now in zip(old, new, strict=True)]
    names = _INDEXES if len(steps) <= len(_INDEXES) else [str(index) for index in range(len(steps))]
    cells = {"a": {name: step for name, step in zip(names, steps, strict=False) if step}}
    row = {"a": steps}
    return row if len(orjson.dumps(row)) < len(orjson.dumps(cells)) else cells


def _one(old: Any, new: Any, key: str, sets: dict[str, Any], deeper: dict[str, Any], added: dict[str, int]) -> None:
    """One moved member: an integer by its increment when that is shorter, an object or array patched deeper
    when that is shorter than setting it whole."""
    if type(old) is int and type(new) is int:
        if len(str(new - old)) < len(str(new)):
            added[key] = new - old
        else:
            sets[key] = new
        return
    inner = _nested(old, new)
    if inner is not None and len(orjson.dumps(inner)) < len(orjson.dumps(new)):
        deeper[key] = inner
    else:
        sets[key] = new


def _flat(nested: dict[str, Any]) -> dict[str, Any]:
    """A nested patch with paths joined where that is shorter: a deeper patch with one member (or a few
    under a short key) is folded into its parent's operations, its paths prefixed; one that sets a length,
    adds to every item of an array or has many members stays one ("p")."""
    if isinstance(nested.get("a"), list):
        return {"a": nested["a"]}
    flat: dict[str, Any] = {"n": nested["n"]} if "n" in nested else {}
    ops: dict[str, Any] = {"p": {}, "a": {}, "s": {}, "d": []}
    for key, inner in nested.get("p", {}).items():
        path = _escape(key)
        child = _flat(inner)
        members = sum(len(v) for op, v in child.items() if op != "n")
        if "n" in child or isinstance(child.get("a"), list) or (len(path) + 1) * members > len(path) + 5 * len(child):
            ops["p"][path] = child
            continue
        for op, values in child.items():
            if op == "d":
                ops["d"].extend(f"{path}/{inner_path}" for inner_path in values)
            else:
                ops[op].update((f"{path}/{inner_path}", value) for inner_path, value in values.items())
    ops["a"].update((_escape(key), step) for key, step in nested.get("a", {}).items())
    ops["s"].update((_escape(key), value) for key, value in nested.get("s", {}).items())
    ops["d"].extend(_escape(key) for key in nested.get("d", []))
    flat.update((op, members) for op, members in ops.items() if members)
    return flat


def _escape(key: str) -> str:
    return key.replace("~", "~0").replace("/", "~1") if "~" in key or "/" in key else key


def apply_patch(value: Any, patch: Any, where: str) -> Any:
    """`value` (which this may change in place) with `patch` applied; PatchError naming where for a patch that
    does not fit it (an unknown operation, a path the value does not have, an integer to add to that is not
    one, an array left with a hole)."""
    if not isinstance(patch, dict):
        raise PatchError(where, "a patch is an object of operations")
    if unknown := sorted(set(patch) - OPERATIONS):
        raise PatchError(where, f"unknown patch operations {unknown[:5]}")
    if not isinstance(value, dict | list):
        raise PatchError(where, "the base's value is not an object or array (the section is sent whole)")
    deeper, added, sets, gone = (patch.get(op, empty) for op, empty in (("p", {}), ("a", {}), ("s", {}), ("d", [])))
    if not isinstance(deeper, dict) or not isinstance(sets, dict) or not isinstance(gone, list):
        raise PatchError(where, "p and s are objects, d an array")
    if isinstance(added, list):
        if not isinstance(value, list) or len(added) != len(value) or len(patch) != 1:
            raise PatchError(f"{where}.a", "an array of increments, alone, one for each item of an array")
        for index, step in enumerate(added):
            value[index] = _add(value[index], step, f"{where}.{index}")
        return value
    if not isinstance(added, dict):
        raise PatchError(f"{where}.a", "an object of increments (or an array of them)")
    hole = _Hole()
    if "n" in patch:
        length = patch["n"]
        if not isinstance(value, list) or type(length) is not int or not 0 <= length <= len(value) + len(sets):
            raise PatchError(f"{where}.n", "the length of an array: from 0 to its items and those set")
        value[length:] = []
        value.extend([hole] * (length - len(value)))
    for path, inner in deeper.items():
        parent, key, at = _walk(value, path, where)
        parent[key] = apply_patch(parent[key], inner, at)
    for path, step in added.items():
        parent, key, at = _walk(value, path, where)
        parent[key] = _add(parent[key], step, at)
    for path, item in sets.items():
        parent, key, _ = _walk(value, path, where, new=True)
        parent[key] = item
    for path in gone:
        parent, key, at = _walk(value, path, where)
        if not isinstance(parent, dict):
            raise PatchError(at, "d deletes an object's key, not an array's item")
        del parent[key]
    if isinstance(value, list) and any(item is hole for item in value):
        raise PatchError(f"{where}.n", f"the array grows to {len(value)} but not every new item is set")
    return value


class _Hole:
    """An item of a grown array that "s" has not set yet."""


def _add(current: Any, step: Any, at: str) -> int:
    if type(current) is not int or type(step) is not int:
        raise PatchError(at, "adds an integer to an integer")
    return current + step


def _walk(value: Any, path: Any, where: str, *, new: bool = False) -> tuple[Any, Any, str]:
    """The container of `path`'s last segment, its key (an index for an array) and where that is. `new`: the
    last segment may be a key the object does not have yet."""
    if not isinstance(path, str):  # "" is a path: the key "" of an object
        raise PatchError(where, f"{str(path)[:64]!r} is not a path")
    segments = [s.replace("~1", "/").replace("~0", "~") if "~" in s else s for s in path.split("/")]
    parent = value
    at = where
    for depth, segment in enumerate(segments):
        key: Any = segment
        if isinstance(parent, list):
            key = _index(segment, len(parent), at)
        elif not isinstance(parent, dict) or (segment not in parent and not (new and depth == len(segments) - 1)):
            raise PatchError(f"{at}.{segment[:64]}", "not in the base's value")
        at = f"{at}.{str(key)[:64]}"
        if depth == len(segments) - 1:
            return parent, key, at
        parent = parent[key]
    raise AssertionError("unreachable")


def _index(segment: str, length: int, at: str) -> int:
    if not (segment.isascii() and segment.isdigit() and (segment == "0" or segment[0] != "0")):
        raise PatchError(at, f"{segment[:20]!r} is not an index of an array")
    if int(segment) >= length:
        raise PatchError(at, f"index {segment[:20]} is beyond the array's {length} items")
    return int(segment)
