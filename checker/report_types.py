"""The report's building blocks: its bounded number, time and text types, the base model, and how a
collector's run is told. checker/schemas.py builds the report from them, and the section modules
under checker/sections/ (one per fault class added since the first wave) use them without importing
the whole contract.
"""

from __future__ import annotations

import datetime as dt
from enum import StrEnum
from typing import Annotated, Literal

from pydantic import AfterValidator, AwareDatetime, BaseModel, BeforeValidator, ConfigDict, Field

SCHEMA_VERSION: Literal[1] = 1
MAX_LINES_PER_EVENT = 40
MAX_EVENTS = 500
MAX_SEL_ENTRIES = 1000
MAX_EXCERPT_CHARS = 2000
MAX_PROBLEMS = 20
MAX_PROBLEM_CHARS = 400

Line = Annotated[str, Field(max_length=4096)]

# Every number and time a report carries is bounded to what the domain allows and what the store can
# hold: integers to 64 bits, and whole (a bool or a float is no count); floats finite (NaN and
# Infinity have no JSON and no meaning here); times between 1970 (a BMC whose clock was never set
# logs from the epoch) and 2100, never a bare number.
MAX_INT64 = 2**63 - 1
EARLIEST = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
LATEST = dt.datetime(2100, 1, 1, tzinfo=dt.UTC)
MAX_MAP_KEYS = 4096  # a dict's keys (IRQs, NVMe devices, nodes); lists have their own bounds


def _not_a_bool(value: object) -> object:
    if isinstance(value, bool):
        raise ValueError("a number, not true/false")
    return value


def _not_a_number(value: object) -> object:
    if isinstance(value, int | float):
        raise ValueError("a time is an ISO 8601 string with its offset, not a number")
    return value


def _plausible(value: dt.datetime) -> dt.datetime:
    if not EARLIEST <= value < LATEST:
        raise ValueError(f"a time between {EARLIEST.year} and {LATEST.year}")
    return value


NonNegativeInt = Annotated[int, Field(ge=0, le=MAX_INT64, strict=True)]
Int64 = Annotated[int, Field(ge=-MAX_INT64 - 1, le=MAX_INT64, strict=True)]
Address = Annotated[int, Field(ge=0, le=2**64 - 1, strict=True)]  # a physical address: unsigned 64 bits
FiniteFloat = Annotated[float, Field(allow_inf_nan=False), BeforeValidator(_not_a_bool)]
Timestamp = Annotated[AwareDatetime, BeforeValidator(_not_a_number), AfterValidator(_plausible)]
Key = Annotated[str, Field(max_length=128)]


class Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=False)


class CollectorStatus(StrEnum):
    ok = "ok"
    unavailable = "unavailable"  # cannot run here: tool missing, no permission, no EDAC
    error = "error"  # ran, but its input could not be parsed or it failed
    timeout = "timeout"


class CollectorRun(Model):
    status: CollectorStatus
    duration_ms: FiniteFloat = Field(ge=0)
    reason: str | None = Field(None, max_length=1000, description="Why unavailable or error.")
    excerpt: str | None = Field(None, max_length=MAX_EXCERPT_CHARS, description="Offending input, for errors.")
    source: str | None = Field(
        None, max_length=64, description="Which source answered: kmsg, journal, ipmitool, freeipmi, rasdaemon …"
    )
    problems: list[Annotated[str, Field(max_length=MAX_PROBLEM_CHARS)]] = Field(
        default_factory=list,
        max_length=MAX_PROBLEMS,
        description="What the collector could not read although it produced its section (each with an excerpt).",
    )
