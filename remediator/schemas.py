"""Remediator shapes for the API and other stages."""

from __future__ import annotations

import datetime as dt
import uuid
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from remediator.models import Awaiting, HostState, RemediationState, StepState


class HostOut(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    id: int
    hostname: str
    hardware_class: str
    datacenter: str
    row: str
    rack: str
    slot: str
    cluster: str
    labels: dict[str, Any]
    state: HostState
    last_report_at: dt.datetime | None


class SignalOut(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    kind: str
    subject: str
    value: float
    detail: dict[str, Any]
    observed_at: dt.datetime


class StepOut(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    index: int
    action: str
    params: dict[str, Any]
    state: StepState
    attempts: int
    started_at: dt.datetime | None
    finished_at: dt.datetime | None
    result: dict[str, Any]
    awaiting: Awaiting | None = Field(
        None, description="While the step waits on what it was handed to: `host` (its result) or `first_report`."
    )
    deadline: dt.datetime | None = Field(None, description="When a waiting step is acted on if nothing came.")
    accepted_at: dt.datetime | None = Field(None, description="When the host's notice that it started arrived.")
    power_cycled_at: dt.datetime | None = Field(
        None, description="When its silent host was power-cycled through the BMC."
    )


class RemediationOut(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    id: int
    host_id: int
    rule_id: str
    state: RemediationState
    subject: str
    reason: str
    current_step: int
    held_reason: str = ""
    paused_by: str | None = None
    created_at: dt.datetime
    updated_at: dt.datetime
    finished_at: dt.datetime | None
    signal: dict[str, Any] | None = Field(
        None, description="The signal that justified it: kind, subject, value and its detail (the rule's evidence)."
    )
    steps: list[StepOut]


class Refusal(BaseModel):
    index: int = Field(description="Position of the report in the batch.")
    report_id: str | None = None
    errors: list[str] = Field(description="Each names the field and what is wrong with it.")


class WireBase(BaseModel):
    """A stored report the centre holds as a host's state: a delta may name it as its base (checker.wire)."""

    hostname: str
    report_id: uuid.UUID
    captured_at: dt.datetime


class IngestResult(BaseModel):
    accepted: list[uuid.UUID] = Field(default_factory=list)
    duplicates: list[uuid.UUID] = Field(default_factory=list)
    refused: list[Refusal] = Field(default_factory=list)
    remediations: list[int] = Field(default_factory=list, description="Remediations planned by this batch.")
    bases: list[WireBase] = Field(
        default_factory=list,
        description="Per host of the batch, the stored report it holds as the host's state: the base a delta "
        'report may name (docs/report-schema.md, "Delta reports"). Added within API v1.',
    )
