"""Ticket shapes the API and other stages exchange."""

from __future__ import annotations

import datetime as dt
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

from ticketing.models import TicketState


class TicketRequest(BaseModel):
    """What a stage (or a person) asks for when a part needs a technician."""

    hostname: str
    datacenter: str = ""
    rack: str = ""
    part_type: str = Field(description="dimm, disk, psu, fan, host …")
    part: str = Field("", description="The part's locator, e.g. a DIMM label or disk serial.")
    title: str
    priority: int = Field(3, ge=1, le=5)
    evidence: dict[str, Any] = Field(default_factory=dict)
    remediation_id: int | None = None
    holds_host: bool = Field(
        True, description="Keeps the host out of service while open; False: for owners, the host keeps working."
    )
    group_key: str = Field(
        "",
        description="The dedup key of a group's ticket (a rack's cooling, a switch: ticketing.groups), one per "
        "group whichever host asks first; empty: the host's, hostname:part_type:part.",
    )

    @property
    def dedup_key(self) -> str:
        return self.group_key or f"{self.hostname}:{self.part_type}:{self.part}"


class TicketOpen(BaseModel):
    """A ticket opened by hand (operators): the evidence bundle is gathered and frozen by the service."""

    model_config = ConfigDict(extra="forbid", str_strip_whitespace=True)

    hostname: str = Field(min_length=1, max_length=253)
    part_type: str = Field(min_length=1, max_length=32, pattern=r"^[a-z][a-z0-9_]*$", description="dimm, disk, psu …")
    part: str = Field("", max_length=256, description="DIMM label, disk serial or device, PSU id; empty: the host.")
    title: str = Field(min_length=1, max_length=512)
    priority: int = Field(3, ge=1, le=5)
    note: str = Field("", max_length=4000, description="Why a person opened it.")
    take_out_of_service: bool = Field(True, description="The host waits for the repair (awaiting_repair).")


class Note(BaseModel):
    model_config = ConfigDict(extra="forbid", str_strip_whitespace=True)

    note: str = Field("", max_length=4000)


class CommentIn(BaseModel):
    model_config = ConfigDict(extra="forbid", str_strip_whitespace=True)

    note: str = Field(min_length=1, max_length=4000)


class CancelIn(BaseModel):
    model_config = ConfigDict(extra="forbid", str_strip_whitespace=True)

    reason: str = Field(min_length=1, max_length=4000)


class AssignIn(BaseModel):
    model_config = ConfigDict(extra="forbid", str_strip_whitespace=True)

    assignee: str = Field(min_length=1, max_length=64, description="Who will do it, as the audit log names them.")
    reason: str = Field(min_length=1, max_length=4000)


class Replacement(BaseModel):
    """One part taken out and the one put in."""

    model_config = ConfigDict(extra="forbid", str_strip_whitespace=True)

    part: str = Field("", max_length=256, description="Where it sits; empty: the ticket's part.")
    old_serial: str = Field(min_length=1, max_length=128)
    new_serial: str = Field(min_length=1, max_length=128)
    vendor: str | None = Field(None, max_length=128, description="Of the old part; default: from the evidence.")
    model: str | None = Field(None, max_length=128, description="Of the old part; default: from the evidence.")

    @model_validator(mode="after")
    def _serials_differ(self) -> Replacement:
        if self.old_serial == self.new_serial:
            raise ValueError(f"new_serial is the old one ({self.old_serial!r}): record the part that went in")
        return self


class Resolution(BaseModel):
    """What the technician did: the parts replaced (none for a reseat or a cable) and a note."""

    model_config = ConfigDict(extra="forbid", str_strip_whitespace=True)

    replacements: list[Replacement] = Field(default_factory=list, max_length=64)
    note: str = Field(min_length=1, max_length=4000)


class TicketEventOut(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    id: int
    at: dt.datetime
    actor: str
    kind: str
    note: str
    detail: dict[str, Any]


class RepairOut(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    id: int
    ticket_id: int
    hostname: str
    part_type: str
    part: str
    vendor: str
    model: str
    old_serial: str
    new_serial: str
    note: str
    replaced_by: str
    replaced_at: dt.datetime
    verified_at: dt.datetime | None
    returned_at: dt.datetime | None


class TrackerOut(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    tracker: str
    external_key: str | None
    external_url: str
    synced_event_id: int
    synced_state: str
    attempts: int
    last_error: str


class TicketOut(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    id: int
    hostname: str
    datacenter: str
    rack: str
    part_type: str
    part: str
    title: str
    priority: int
    state: TicketState
    version: int
    assignee: str | None
    remediation_id: int | None
    holds_host: bool = Field(True, description="While open, it keeps its host out of service (awaiting_repair).")
    detections: int
    reopened: int
    created_at: dt.datetime
    updated_at: dt.datetime
    claimed_at: dt.datetime | None
    resolved_at: dt.datetime | None
    verify_until: dt.datetime | None
    closed_at: dt.datetime | None


class TicketDetail(TicketOut):
    evidence: dict[str, Any]
    events: list[TicketEventOut]
    repairs: list[RepairOut]
    tracker: TrackerOut | None = None


class RepairStat(BaseModel):
    """Repair history of one kind of part: the input to RMA decisions and to rule tuning."""

    part_type: str
    vendor: str
    model: str
    replaced: int = Field(description="Parts of this model replaced.")
    verified: int = Field(description="Of those, repairs whose verification passed.")
    returned: int = Field(description="Of those, repairs after which the same fault came back on the same part.")
    return_rate: float = Field(description="returned / replaced.")
