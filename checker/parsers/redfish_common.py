"""Shared pieces of the Redfish parsers: reading fields defensively from a BMC's JSON.

Vendors fill the same DMTF schema very differently (shared/fixtures/redfish MANIFEST rows): a field
may be missing, null, of the wrong type, padded with spaces or a placeholder. These helpers turn each
of those into None, never into a healthy-looking default.
"""

from __future__ import annotations

import datetime as dt
import math
from typing import Any

from checker.parsers.common import clip, int64, plausible

HEALTHS = ("OK", "Warning", "Critical")


def obj(value: object) -> dict[str, Any]:
    """The value if it is a JSON object, else an empty one."""
    return value if isinstance(value, dict) else {}


def text(doc: dict[str, Any], key: str, limit: int = 128) -> str | None:
    """A string field, stripped and clipped; None when missing, null, empty or not a string."""
    value = doc.get(key)
    if not isinstance(value, str):
        return None
    value = value.strip()
    return clip(value, limit) if value else None


def whole(doc: dict[str, Any], key: str) -> int | None:
    """A non-negative integer field (a count, a slot); a bool, a float or a negative is no count."""
    value = doc.get(key)
    if isinstance(value, bool) or not isinstance(value, int):
        return None
    return int64(value) if value >= 0 else None


def number(doc: dict[str, Any], key: str) -> float | None:
    """A finite number field; a bool or a numeric string is not one."""
    value = doc.get(key)
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    number = float(value)
    return number if math.isfinite(number) else None


def status(doc: dict[str, Any]) -> tuple[str | None, str | None]:
    """(Health, State) of a resource's Status; None for what is not served. Health is only ever one of
    the three DMTF values (Resource.Health): anything else is not a health at all."""
    block = obj(doc.get("Status"))
    health = block.get("Health")
    state = text(block, "State", 32)
    return (health if health in HEALTHS else None), state


def created(value: object) -> dt.datetime | None:
    """A Redfish DateTimeOffset ('2022-10-26T15:21:15-05:00', '...Z') as UTC; None for a missing, naive,
    impossible ('0000-00-00T00:00:00Z', HPE iLO's unset clock) or out-of-range time."""
    if not isinstance(value, str):
        return None
    try:
        stamp = dt.datetime.fromisoformat(value.strip())
    except ValueError:
        return None
    if stamp.tzinfo is None:
        return None
    return plausible(stamp.astimezone(dt.UTC))


def odata_id(doc: dict[str, Any]) -> str | None:
    return text(doc, "@odata.id", 512)


def link(doc: dict[str, Any], key: str) -> str | None:
    """The @odata.id of a navigation property ({"Metrics": {"@odata.id": ...}})."""
    return text(obj(doc.get(key)), "@odata.id", 512)
