"""The change-based wire format (issue 17): a report sent as the sections that changed since a base the
centre holds, with a digest of each unchanged one, rebuilt centrally into the full report.

Defined once here and used by both sides: the agent encodes (`encode_delta`), the centre rebuilds
(`rebuild`) from the base it holds, and both digest a section the same way (`section_digest`: sha256
of the section's JSON, keys sorted). A report without `encoding` is a full report (checker.schemas.Report),
so old agents keep working; a delta is the `ReportDelta` envelope, sent only to a centre that named a base.
A delta the centre cannot prove it rebuilds exactly (an unknown base, a digest that differs) is refused
with "send full", never merged on a guess. Pure: pydantic, orjson and the report schema only.
"""

from __future__ import annotations

import hashlib
import uuid
from typing import Annotated, Any, Literal

import orjson
from pydantic import Field, ValidationError, model_validator

from checker.schemas import SCHEMA_VERSION, HostIdentity, Int64, Model, Observations, Report, Timestamp

# The report's sections as the wire format sends or digests them: the collector runs and each observation.
SECTIONS: tuple[str, ...] = ("collectors", *Observations.model_fields)
Digest = Annotated[str, Field(pattern=r"^[0-9a-f]{64}$", description="sha256 of the section's canonical JSON.")]


class SendFull(Exception):
    """The centre cannot rebuild this delta exactly: the agent sends its report in full instead."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class MalformedDelta(Exception):
    """A delta that is wrong in itself (not just against the centre's state): `errors` name each field."""

    def __init__(self, errors: list[str]) -> None:
        super().__init__("; ".join(errors))
        self.errors = errors


class ReportBase(Model):
    """The full state a delta is relative to: a stored report of the host, as the centre named it."""

    report_id: uuid.UUID
    captured_at: Timestamp


class ReportDelta(Model):
    """One check cycle as the sections that changed since `base`; the rest by digest."""

    schema_version: Literal[1] = SCHEMA_VERSION
    encoding: Literal["delta"] = "delta"
    report_id: uuid.UUID = Field(description="The rebuilt report's id (idempotency key, as a full report's).")
    host: HostIdentity
    captured_at: Timestamp
    interval_s: Int64 = Field(60, ge=1, le=86400)
    base: ReportBase
    changed: dict[str, Any] = Field(
        default_factory=dict, description="Section name to its whole new value (null: the section is now absent)."
    )
    unchanged: dict[str, Digest] = Field(
        default_factory=dict, description="Section name to the digest of its value, the same as in the base."
    )
    digest: Digest = Field(description="state_digest of the whole rebuilt report (every section's digest).")

    @model_validator(mode="after")
    def _every_section_once(self) -> ReportDelta:
        problems = []
        if unknown := sorted((set(self.changed) | set(self.unchanged)) - set(SECTIONS)):
            problems.append(f"unknown sections {unknown}")
        if both := sorted(set(self.changed) & set(self.unchanged)):
            problems.append(f"sections both changed and unchanged {both}")
        if missing := [s for s in SECTIONS if s not in self.changed and s not in self.unchanged]:
            problems.append(f"sections neither changed nor unchanged {missing}")
        if problems:
            raise ValueError("; ".join(problems))
        return self


def canonical(value: Any) -> bytes:
    return orjson.dumps(value, option=orjson.OPT_SORT_KEYS)


def section_digest(value: Any) -> str:
    """sha256 of a section's JSON (as `Report.model_dump(mode="json")` gives it), keys sorted."""
    return hashlib.sha256(canonical(value)).hexdigest()


def sections_of(document: dict[str, Any]) -> dict[str, Any]:
    """A full report's JSON (model_dump(mode="json")) as its sections."""
    return {"collectors": document.get("collectors", {}), **{s: document["observations"].get(s) for s in SECTIONS[1:]}}


def state_digest(digests: dict[str, str]) -> str:
    """The whole state's digest: sha256 over the section digests, by name."""
    return section_digest({name: digests[name] for name in SECTIONS})


def encode_delta(report: Report, base: Report) -> dict[str, Any]:
    """The report as a delta against `base` (a report the centre said it holds), as JSON."""
    now, then = sections_of(report.model_dump(mode="json")), sections_of(base.model_dump(mode="json"))
    digests = {name: section_digest(value) for name, value in now.items()}
    changed, unchanged = {}, {}
    for name in SECTIONS:
        if digests[name] == section_digest(then[name]):
            unchanged[name] = digests[name]
        else:
            changed[name] = now[name]
    return {
        "schema_version": report.schema_version,
        "encoding": "delta",
        "report_id": str(report.report_id),
        "host": report.host.model_dump(mode="json"),
        "captured_at": report.captured_at.isoformat(),
        "interval_s": report.interval_s,
        "base": {"report_id": str(base.report_id), "captured_at": base.captured_at.isoformat()},
        "changed": changed,
        "unchanged": unchanged,
        "digest": state_digest(digests),
    }


def is_delta(payload: object) -> bool:
    """Whether a decoded payload is a delta (full reports carry no `encoding`)."""
    return isinstance(payload, dict) and payload.get("encoding") == "delta"


def rebuild(delta: ReportDelta, base: dict[str, Any]) -> Report:
    """The full report a delta stands for, from its base's JSON (a stored report body).

    Raises SendFull when the base does not prove the same state (an unchanged section whose digest
    differs, or a whole that does not digest to `delta.digest`), MalformedDelta when a changed
    section does not validate (its errors name the section and field, as `changed.<section>.…`).
    """
    try:
        held = sections_of(Report.model_validate(base).model_dump(mode="json"))
    except ValidationError as error:  # a stored body the schema no longer reads: nothing to merge onto
        count = error.error_count()
        raise SendFull(f"the base report {delta.base.report_id} no longer validates ({count} errors)") from None
    digests: dict[str, str] = {}
    values: dict[str, Any] = {}
    for name in SECTIONS:
        if name in delta.unchanged:
            digests[name] = section_digest(held[name])
            if digests[name] != delta.unchanged[name]:
                raise SendFull(f"section {name} differs from the base report {delta.base.report_id}")
            values[name] = held[name]
        else:
            values[name] = delta.changed[name]
            digests[name] = section_digest(values[name])
    if state_digest(digests) != delta.digest:
        raise SendFull("the rebuilt report does not match the delta's digest")
    document = {
        "schema_version": delta.schema_version,
        "report_id": str(delta.report_id),
        "host": delta.host.model_dump(mode="json"),
        "captured_at": delta.captured_at,
        "interval_s": delta.interval_s,
        "collectors": values["collectors"],
        "observations": {name: values[name] for name in SECTIONS[1:]},
    }
    try:
        return Report.model_validate(document)
    except ValidationError as error:
        raise MalformedDelta(
            [f"changed.{_delta_location(item['loc'])}: {item['msg']}" for item in error.errors()[:20]]
        ) from None


def _delta_location(loc: tuple[Any, ...]) -> str:
    """A rebuilt report's error location as the delta's: observations.edac.x is changed.edac.x."""
    parts = [str(p) for p in loc]
    if parts[:1] == ["observations"]:
        parts = parts[1:]
    return ".".join(parts) or "report"
