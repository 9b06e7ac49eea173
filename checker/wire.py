"""The change-based wire format (issue 17): a report sent as the sections that changed since a base the
centre holds, with a digest of each unchanged one, rebuilt centrally into the full report.

Defined once here and used by both sides: the agent encodes (`encode_delta`), the centre rebuilds
(`rebuild`) from the base it holds, and both digest a section the same way (`section_digest` of
`section_values`: sha256 of the section's JSON without default values, keys sorted), so a field or
section the centre's schema added since an agent was built digests the same on both sides.
A report without `encoding` is a full report (checker.schemas.Report), so old agents keep working;
a delta is the `ReportDelta` envelope, sent only to a centre that named a base. A delta the centre
cannot prove it rebuilds exactly (an unknown base, a digest that differs) is refused with "send
full", never merged on a guess. Pure: pydantic, orjson and the report schema only.
"""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Iterable
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
        default_factory=dict,
        description="Section name to its whole new value, without default values (null: the section is now absent).",
    )
    unchanged: dict[str, Digest] = Field(
        default_factory=dict, description="Section name to the digest of its value, the same as in the base."
    )
    digest: Digest = Field(description="state_digest of the rebuilt report (the digest of each section named).")

    @model_validator(mode="after")
    def _each_section_at_most_once(self) -> ReportDelta:
        """A section named in neither is one the agent's (older) schema lacks: taken at its default."""
        problems = []
        if unknown := sorted((set(self.changed) | set(self.unchanged)) - set(SECTIONS)):
            problems.append(f"unknown sections {unknown}")
        if both := sorted(set(self.changed) & set(self.unchanged)):
            problems.append(f"sections both changed and unchanged {both}")
        if problems:
            raise ValueError("; ".join(problems))
        return self


def canonical(value: Any) -> bytes:
    return orjson.dumps(value, option=orjson.OPT_SORT_KEYS)


def section_digest(value: Any) -> str:
    """sha256 of a section's JSON (as `section_values` gives it), keys sorted."""
    return hashlib.sha256(canonical(value)).hexdigest()


def sections_known(report: Report) -> tuple[str, ...]:
    """The sections the schema a report was built with knows: an agent older than the centre knows fewer."""
    return ("collectors", *type(report.observations).model_fields)


def section_values(report: Report, names: Iterable[str] | None = None) -> dict[str, Any]:
    """A report's sections as both sides digest and send them: `model_dump(mode="json", exclude_defaults=True)`,
    so a field a newer schema added (at its default) is in neither side's JSON; a section at its default is
    None (`collectors`: {}). `names`: only these sections (default: every one the report's schema knows)."""
    wanted = tuple(names) if names is not None else sections_known(report)
    observed = {name: True for name in wanted if name != "collectors"}
    include: dict[str, Any] = {"observations": observed} if observed else {}
    if "collectors" in wanted:
        include["collectors"] = True
    document = report.model_dump(mode="json", exclude_defaults=True, include=include) if include else {}
    values = document.get("observations", {})
    return {name: document.get("collectors", {}) if name == "collectors" else values.get(name) for name in wanted}


def state_digest(digests: dict[str, str]) -> str:
    """The whole state's digest: sha256 over the section digests, by name (the sections the delta names)."""
    return section_digest(digests)


class SentState(Model):
    """What the agent keeps of a report it sent (a base, once the centre names it): its id, capture time and
    per-section digests (a few KB), never the report."""

    report_id: uuid.UUID
    captured_at: Timestamp
    digests: dict[str, Digest]


def sent_state(report: Report, values: dict[str, Any] | None = None) -> SentState:
    values = section_values(report) if values is None else values
    digests = {name: section_digest(value) for name, value in values.items()}
    return SentState(report_id=report.report_id, captured_at=report.captured_at, digests=digests)


def encode_delta(
    report: Report, base: SentState | Report, *, values: dict[str, Any] | None = None, state: SentState | None = None
) -> dict[str, Any]:
    """The report as a delta against `base` (a report the centre said it holds, or what the agent kept of it), as
    JSON. `values` and `state`: the report's `section_values` and `sent_state`, when already computed."""
    held = sent_state(base) if isinstance(base, Report) else base
    values = section_values(report) if values is None else values
    digests = (state or sent_state(report, values)).digests
    changed = {name: value for name, value in values.items() if held.digests.get(name) != digests[name]}
    unchanged = {name: digests[name] for name in values if name not in changed}
    return {
        "schema_version": report.schema_version,
        "encoding": "delta",
        "report_id": str(report.report_id),
        "host": report.host.model_dump(mode="json"),
        "captured_at": report.captured_at.isoformat(),
        "interval_s": report.interval_s,
        "base": {"report_id": str(held.report_id), "captured_at": held.captured_at.isoformat()},
        "changed": changed,
        "unchanged": unchanged,
        "digest": state_digest(digests),
    }


def is_delta(payload: object) -> bool:
    """Whether a decoded payload is a delta (full reports carry no `encoding`)."""
    return isinstance(payload, dict) and payload.get("encoding") == "delta"


def rebuild(delta: ReportDelta, base: dict[str, Any]) -> Report:
    """The full report a delta stands for, from its base's JSON (a stored report body).

    Each unchanged section's digest is checked against the base's; a section the delta does not name
    (one the agent's older schema does not have) is taken at its default, as that agent's full report
    would carry it. The rebuilt report is validated before any changed value is digested, and the
    digests are of its `section_values`, the same on both sides whatever fields the centre's schema added.
    Raises SendFull when the base does not prove the same state (an unchanged section whose digest
    differs, or a whole that does not digest to `delta.digest`), MalformedDelta when a changed
    section does not validate (its errors name the section and field, as `changed.<section>.…`).
    """
    try:
        held = section_values(Report.model_validate(base), delta.unchanged)
    except ValidationError as error:  # a stored body the schema no longer reads: nothing to merge onto
        count = error.error_count()
        raise SendFull(f"the base report {delta.base.report_id} no longer validates ({count} errors)") from None
    for name, digest in delta.unchanged.items():
        if section_digest(held[name]) != digest:
            raise SendFull(f"section {name} differs from the base report {delta.base.report_id}")
    values: dict[str, Any] = {**held, **delta.changed}
    document = {
        "schema_version": delta.schema_version,
        "report_id": str(delta.report_id),
        "host": delta.host.model_dump(mode="json"),
        "captured_at": delta.captured_at,
        "interval_s": delta.interval_s,
        "collectors": values.get("collectors", {}),
        "observations": {name: values[name] for name in SECTIONS[1:] if name in values},
    }
    try:
        report = Report.model_validate(document)
    except (ValidationError, ValueError, TypeError, RecursionError) as error:
        errors = (
            [f"changed.{_delta_location(item['loc'])}: {item['msg']}" for item in error.errors()[:20]]
            if isinstance(error, ValidationError)
            else [f"changed: {type(error).__name__}: {str(error)[:200]}"]
        )
        raise MalformedDelta(errors) from None
    digests = dict(delta.unchanged)
    digests.update((name, section_digest(value)) for name, value in section_values(report, delta.changed).items())
    if state_digest(digests) != delta.digest:
        raise SendFull("the rebuilt report does not match the delta's digest")
    return report


def _delta_location(loc: tuple[Any, ...]) -> str:
    """A rebuilt report's error location as the delta's: observations.edac.x is changed.edac.x."""
    parts = [str(p) for p in loc]
    if parts[:1] == ["observations"]:
        parts = parts[1:]
    return ".".join(parts) or "report"
