"""What the Xid deriver (remediator/derive/xid.py) keeps per host between reports: each GPU's uuid and board
serial as the driver last printed them, incidents per GPU and action class, SXids per switch and severity.

Its own module so that remediator/derive/memory.py can hold it without importing the deriver. Every map is
capped (the deriver keeps the newest entries), so the section stays small whatever a host sends.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

MAX_GPUS = 32
MAX_KEYS = 64

Bucket = tuple[int, int]  # as remediator.derive.memory.Bucket: (bucket index, events in it)


class XidMemory(BaseModel):
    model_config = ConfigDict(extra="ignore")

    gpus: dict[str, tuple[str | None, str | None]] = Field(
        default_factory=dict, max_length=MAX_GPUS, description="GPU address (0000:9b:00.0) -> (uuid, board serial)."
    )
    counts: dict[str, list[Bucket]] = Field(
        default_factory=dict, max_length=MAX_KEYS, description="'<address> <action>' -> incidents per bucket."
    )
    sxid: dict[str, list[Bucket]] = Field(
        default_factory=dict, max_length=MAX_KEYS, description="'<switch address> <severity>' -> SXids per bucket."
    )
    last: dict[str, float] = Field(
        default_factory=dict,
        max_length=MAX_KEYS,
        description="'<address> <code>' -> epoch of its newest line: a line within seconds of it is the same incident.",
    )
