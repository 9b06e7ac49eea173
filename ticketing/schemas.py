"""Ticket shapes the API and other stages exchange."""

from __future__ import annotations

import datetime as dt
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

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

    @property
    def dedup_key(self) -> str:
        return f"{self.hostname}:{self.part_type}:{self.part}"


class TicketEventOut(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    at: dt.datetime
    actor: str
    kind: str
    note: str


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
    detections: int
    created_at: dt.datetime
    updated_at: dt.datetime


class TicketDetail(TicketOut):
    evidence: dict[str, Any]
    events: list[TicketEventOut]
