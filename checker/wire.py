"""The change-based wire format (issue 17): a report sent as what changed since a base the centre holds,
with one digest over the unchanged sections, rebuilt centrally into the full report.

Defined once here and used by both sides: the agent encodes (`encode_delta`), the centre rebuilds
(`rebuild`) from the base it holds, and both digest a section the same way (`section_digest` of
`section_values`: sha256 of the section's JSON without default values, keys sorted), so a field or
section the centre's schema added since an agent was built digests the same on both sides.
A section that moved is sent whole (`changed`) or, when smaller, as a patch of its base value
(`patched`, checker.wire_patch: changed keys of objects, changed items of arrays, counters by increment).
A report without `encoding` is a full report (checker.schemas.Report), so old agents keep working;
a delta is the `ReportDelta` envelope, sent only to a centre that named a base. A delta the centre
cannot prove it rebuilds exactly (an unknown base, a digest that differs) is refused with "send
full", never merged on a guess. Pure: pydantic, orjson and the report schema only.
"""

from __future__ import annotations

import base64
import hashlib
import uuid
from collections.abc import Iterable
from typing import Annotated, Any, Literal

import orjson
from pydantic import Field, ValidationError, model_validator

from checker.schemas import (
    HOSTNAME_MAX_LENGTH,
    HOSTNAME_PATTERN,
    SCHEMA_VERSION,
    Int64,
    Model,
    Observations,
    Report,
    Timestamp,
)
from checker.wire_patch import PatchError, apply_patch, diff, same

# The report's sections as the wire format sends or digests them: the collector runs and each observation.
SECTIONS: tuple[str, ...] = ("collectors", *Observations.model_fields)
Digest = Annotated[str, Field(pattern=r"^[0-9a-f]{64}$", description="sha256 of the section's canonical JSON.")]
WireDigest = Annotated[
    str,
    Field(
        pattern=r"^[A-Za-z0-9_-]{22}$",
        description="The first 16 bytes of a sha256, base64url without padding (checker.wire.wire_digest).",
    ),
]


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


class DeltaHost(Model):
    """The report's host as a delta sends it: the hostname, and each other field of HostIdentity only when it
    differs from the base's (a reboot's boot_id, an upgrade's agent_version); a field not sent is the base's."""

    hostname: str = Field(min_length=1, max_length=HOSTNAME_MAX_LENGTH, pattern=HOSTNAME_PATTERN)
    machine_id: str | None = Field(None, max_length=64)
    boot_id: str | None = Field(None, max_length=64)
    agent_version: str | None = Field(None, max_length=64)


class ReportDelta(Model):
    """One check cycle as the sections that changed since `base`, whole or patched; the rest, named nowhere, are
    the base's, proved by one digest."""

    schema_version: Literal[1] = SCHEMA_VERSION
    encoding: Literal["delta"] = "delta"
    report_id: uuid.UUID = Field(description="The rebuilt report's id (idempotency key, as a full report's).")
    host: DeltaHost
    captured_at: Timestamp
    interval_s: Int64 = Field(60, ge=1, le=86400)
    base: ReportBase
    changed: dict[str, Any] = Field(
        default_factory=dict,
        description="Section name to its whole new value, without default values (null: the section is now absent).",
    )
    patched: dict[str, dict[str, Any]] = Field(
        default_factory=dict, description="Section name to a patch of its value in the base (checker.wire.diff)."
    )
    unchanged_digest: WireDigest = Field(
        description="state_digest of the sections named in neither `changed` nor `patched` (the base's)."
    )
    digest: WireDigest = Field(description="state_digest of the rebuilt report.")

    @model_validator(mode="after")
    def _each_section_at_most_once(self) -> ReportDelta:
        problems = []
        if unknown := sorted((set(self.changed) | set(self.patched)) - set(SECTIONS)):
            problems.append(f"unknown sections {unknown}")
        if both := sorted(set(self.changed) & set(self.patched)):
            problems.append(f"sections both changed and patched {both}")
        if problems:
            raise ValueError("; ".join(problems))
        return self


def canonical(value: Any) -> bytes:
    return orjson.dumps(value, option=orjson.OPT_SORT_KEYS)


def section_digest(value: Any) -> str:
    """sha256 of a section's JSON (as `section_values` gives it), keys sorted."""
    return hashlib.sha256(canonical(value)).hexdigest()


def wire_digest(value: Any) -> str:
    """A digest as the wire carries it: the first 128 bits of the sha256 of `value`'s canonical JSON,
    base64url (22 characters, against 64 hex). Enough: two different states of one host digest the same
    with a chance of 2**-128 per comparison; an agent that forged a match gains nothing it could not do
    by sending a full report, which the centre takes on its word alike."""
    return base64.urlsafe_b64encode(hashlib.sha256(canonical(value)).digest()[:16]).rstrip(b"=").decode()


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


def state_digest(digests: dict[str, str], values: dict[str, Any]) -> str:
    """The digest of a state: wire_digest of the object section name to section digest, over the sections whose
    value is not null. Null ones are left out so that a section only one side's schema has (absent, null, in the
    other's report) digests the same on both; a section present on one side only digests differently."""
    return wire_digest({name: digest for name, digest in digests.items() if values[name] is not None})


class SentState(Model):
    """What the agent keeps of a report it sent (a base, once the centre names it): its id, capture time,
    per-section digests and section values (what a patch is relative to; about the report's JSON size)."""

    report_id: uuid.UUID
    captured_at: Timestamp
    digests: dict[str, Digest]
    values: dict[str, Any] = Field(default_factory=dict)
    host: dict[str, Any] = Field(default_factory=dict, description="The report's HostIdentity as JSON.")


def sent_state(report: Report, values: dict[str, Any] | None = None) -> SentState:
    values = section_values(report) if values is None else values
    digests = {name: section_digest(value) for name, value in values.items()}
    host = report.host.model_dump(mode="json")
    return SentState(
        report_id=report.report_id, captured_at=report.captured_at, digests=digests, values=values, host=host
    )


def host_values(report: Report) -> dict[str, Any]:
    """The report's host as both sides digest it: without default values, as a section."""
    return report.host.model_dump(mode="json", exclude_defaults=True)


def whole_digest(report: Report, digests: dict[str, str], values: dict[str, Any]) -> str:
    """`digest`: the state digest of every section and of the host (taken from the base where not sent)."""
    host = host_values(report)
    return state_digest({**digests, "host": section_digest(host)}, {**values, "host": host})


def encode_delta(
    report: Report, base: SentState | Report, *, values: dict[str, Any] | None = None, state: SentState | None = None
) -> dict[str, Any]:
    """The report as a delta against `base` (a report the centre said it holds, or what the agent kept of it), as
    JSON. `values` and `state`: the report's `section_values` and `sent_state`, when already computed. A section
    that moved goes as a patch of the base's value when the base's value is held and the patch is smaller."""
    held = sent_state(base) if isinstance(base, Report) else base
    values = section_values(report) if values is None else values
    sent = state or sent_state(report, values)
    digests, host = sent.digests, sent.host
    moved_host = {
        name: value for name, value in host.items() if name not in held.host or not same(held.host[name], value)
    }
    changed: dict[str, Any] = {}
    patched: dict[str, Any] = {}
    for name, value in values.items():
        if held.digests.get(name) == digests[name]:
            continue
        patch = diff(held.values[name], value) if name in held.values else None
        if patch is not None and len(orjson.dumps(patch)) < len(orjson.dumps(value)):
            patched[name] = patch
        else:
            changed[name] = value
    unchanged = {name: digests[name] for name in values if name not in changed and name not in patched}
    return {
        "schema_version": report.schema_version,
        "encoding": "delta",
        "report_id": str(report.report_id),
        "host": {"hostname": report.host.hostname, **moved_host},
        "captured_at": report.captured_at.isoformat(),
        "interval_s": report.interval_s,
        "base": {"report_id": str(held.report_id), "captured_at": held.captured_at.isoformat()},
        "changed": changed,
        "patched": patched,
        "unchanged_digest": state_digest(unchanged, values),
        "digest": whole_digest(report, digests, values),
    }


def is_delta(payload: object) -> bool:
    """Whether a decoded payload is a delta (full reports carry no `encoding`)."""
    return isinstance(payload, dict) and payload.get("encoding") == "delta"


def rebuild(delta: ReportDelta, base: dict[str, Any]) -> Report:
    """The full report a delta stands for, from its base's JSON (a stored report body).

    Every section named in neither `changed` nor `patched` is the base's, proved by `unchanged_digest` (a
    section the agent's older schema lacks is null in its base, as in its full report). Patches are applied
    to the base's values; the rebuilt report is validated before any changed or patched value is digested,
    and the digests are of its `section_values`, the same on both sides whatever fields the centre's schema
    added; `digest` proves each patched and changed section. Raises SendFull when the base does not prove
    the same state (the unchanged sections or the whole do not digest as the delta says),
    MalformedDelta when a patch does not fit its base value (`patched.<section>.…`) or a changed or
    patched section does not validate (its errors name the section and field, as `changed.<section>.…`).
    """
    try:
        stored = Report.model_validate(base)
    except ValidationError as error:  # a stored body the schema no longer reads: nothing to merge onto
        count = error.error_count()
        raise SendFull(f"the base report {delta.base.report_id} no longer validates ({count} errors)") from None
    held = section_values(stored, [s for s in SECTIONS if s not in delta.changed])
    digests = {name: section_digest(value) for name, value in held.items() if name not in delta.patched}
    if state_digest(digests, held) != delta.unchanged_digest:
        raise SendFull(f"the unchanged sections differ from the base report {delta.base.report_id}")
    try:
        patched = {name: apply_patch(held[name], patch, f"patched.{name}") for name, patch in delta.patched.items()}
    except PatchError as error:
        raise MalformedDelta([str(error)]) from None
    values: dict[str, Any] = {**held, **patched, **delta.changed}
    document = {
        "schema_version": delta.schema_version,
        "report_id": str(delta.report_id),
        "host": {
            **stored.host.model_dump(mode="json"),
            **delta.host.model_dump(mode="json", include=delta.host.model_fields_set),
        },
        "captured_at": delta.captured_at,
        "interval_s": delta.interval_s,
        "collectors": values.get("collectors", {}),
        "observations": {name: values[name] for name in SECTIONS[1:] if name in values},
    }
    try:
        report = Report.model_validate(document)
    except (ValidationError, ValueError, TypeError, RecursionError) as error:
        errors = (
            [_delta_location(item["loc"], delta) + f": {item['msg']}" for item in error.errors()[:20]]
            if isinstance(error, ValidationError)
            else [f"changed: {type(error).__name__}: {str(error)[:200]}"]
        )
        raise MalformedDelta(errors) from None
    moved = section_values(report, [*delta.patched, *delta.changed])
    digests.update((name, section_digest(value)) for name, value in moved.items())
    if whole_digest(report, digests, {**held, **moved}) != delta.digest:
        named = sorted([*delta.patched, *delta.changed])
        raise SendFull(
            f"the rebuilt report does not match the delta's digest (the host, or patched or changed {named})"
        )
    return report


def _delta_location(loc: tuple[Any, ...], delta: ReportDelta) -> str:
    """A rebuilt report's error location as the delta's: observations.edac.x is changed.edac.x (patched.edac.x
    when the edac section came as a patch)."""
    parts = [str(p) for p in loc]
    if parts[:1] == ["observations"]:
        parts = parts[1:]
    if not parts:
        return "report"
    if parts[0] == "host":
        return ".".join(parts)
    return ".".join(["patched" if parts[0] in delta.patched else "changed", *parts])
