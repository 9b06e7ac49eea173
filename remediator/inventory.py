"""Host inventory: where each host is and what it is, from a CSV file or the API.

Reports register hosts by name; inventory says where they stand (datacenter,
row, rack, slot), their hardware class, cluster and labels.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Callable
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator
from sqlalchemy import select
from sqlalchemy.orm import Session

from core import audit
from core.errors import InvalidInput
from core.vocabulary import HOSTNAME_MAX_LENGTH, HOSTNAME_PATTERN
from remediator.models import Host

CSV_COLUMNS = ("hostname", "hardware_class", "datacenter", "row", "rack", "slot", "cluster", "labels")


class HostInventory(BaseModel):
    model_config = ConfigDict(extra="forbid", str_strip_whitespace=True)

    hostname: str = Field(min_length=1, max_length=HOSTNAME_MAX_LENGTH, pattern=HOSTNAME_PATTERN)
    hardware_class: str = Field("unknown", max_length=64)
    datacenter: str = Field("unknown", max_length=64)
    row: str = Field("", max_length=32)
    rack: str = Field("", max_length=64)
    slot: str = Field("", max_length=32)
    cluster: str = Field("", max_length=64)
    labels: dict[str, str] = Field(default_factory=dict)

    @field_validator("labels", mode="before")
    @classmethod
    def _labels_from_text(cls, value: Any) -> Any:
        """CSV cells carry labels as key=value;key=value."""
        if isinstance(value, str):
            pairs = [p for p in value.split(";") if p.strip()]
            labels = {}
            for pair in pairs:
                key, sep, val = pair.partition("=")
                if not sep or not key.strip():
                    raise ValueError(f"label {pair!r} is not key=value")
                labels[key.strip()] = val.strip()
            return labels
        return value


class InventoryError(Exception):
    pass


def parse_csv(text: str, *, source: str = "inventory") -> list[HostInventory]:
    """Every row, or an InventoryError listing each bad row by line and field."""
    reader = csv.DictReader(io.StringIO(text))
    if reader.fieldnames is None or "hostname" not in reader.fieldnames:
        raise InventoryError(
            f"{source}:1: the header must name a 'hostname' column (columns: {', '.join(CSV_COLUMNS)})"
        )
    unknown = [name for name in reader.fieldnames if name not in CSV_COLUMNS]
    if unknown:
        raise InventoryError(f"{source}:1: unknown column(s) {', '.join(unknown)} (known: {', '.join(CSV_COLUMNS)})")
    rows: list[HostInventory] = []
    problems: list[str] = []
    lines: dict[str, int] = {}
    for row in reader:
        line = reader.line_num
        values = {k: v for k, v in row.items() if k is not None and v not in (None, "")}
        try:
            host = HostInventory.model_validate(values)
            if host.hostname in lines:
                problems.append(f"{source}:{line}: hostname: {host.hostname!r} is also on line {lines[host.hostname]}")
                continue
            lines[host.hostname] = line
            rows.append(host)
        except ValidationError as error:
            for item in error.errors():
                field = ".".join(str(p) for p in item["loc"])
                problems.append(f"{source}:{line}: {field}: {item['msg']}")
    if problems:
        raise InventoryError("\n".join(problems))
    return rows


def apply_inventory(
    session: Session, rows: list[HostInventory], *, actor: str, on_row: Callable[[], None] | None = None
) -> tuple[int, int]:
    """Create or update hosts; returns (created, updated). A hostname twice in one import is refused:
    which of its rows is the host would be a guess. `on_row` is called as each row is applied
    (`fleetfix hosts import`'s progress)."""
    names = [r.hostname for r in rows]
    seen: dict[str, int] = {}
    for index, name in enumerate(names):
        if name in seen:
            raise InvalidInput(
                f"{index}.hostname: {name!r} is also row {seen[name]}: one row per host",
                detail=[{"field": f"{index}.hostname", "message": f"duplicate of row {seen[name]}"}],
            )
        seen[name] = index
    existing = {h.hostname: h for h in session.scalars(select(Host).where(Host.hostname.in_(names)))}
    created = updated = 0
    for row in rows:
        if on_row is not None:
            on_row()
        fields = row.model_dump()
        host = existing.get(row.hostname)
        if host is None:
            session.add(Host(**fields))
            created += 1
            continue
        changed = {k: v for k, v in fields.items() if getattr(host, k) != v}
        if changed:
            for key, value in changed.items():
                setattr(host, key, value)
            updated += 1
    audit.record(
        session,
        actor=actor,
        action="remediator.inventory.imported",
        object_type="inventory",
        object_id=len(rows),
        detail={"created": created, "updated": updated},
    )
    session.flush()
    return created, updated
