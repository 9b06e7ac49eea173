"""A kernel event before the report's model validates it (checker/parsers/kernel_events.py).

The classifier keeps only the newest MAX_EVENTS events; an error storm gives tens of thousands, and
validating each as a KernelEvent cost more than classifying its line. Drafts go through the same
post-processing (os_events.fold_suppressed, xid.drop_unconfirmed, cxl_log.cxl_protocol_records) and
only the kept ones become KernelEvents.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from checker.schemas import KernelEvent, KernelEventKind


@dataclass(slots=True)
class EventDraft:
    """KernelEvent's fields, unvalidated."""

    kind: KernelEventKind
    seq: int | None
    timestamp: dt.datetime | None
    subject: str | None
    count: int
    lines: list[str]
    lines_dropped: int

    def model_copy(self, *, update: Mapping[str, Any] | None = None) -> EventDraft:
        """A shallow copy with some fields replaced, as KernelEvent.model_copy (which this stood for before)."""
        return dataclasses.replace(self, **(update or {}))

    def event(self) -> KernelEvent:
        return KernelEvent(
            kind=self.kind,
            seq=self.seq,
            timestamp=self.timestamp,
            subject=self.subject,
            count=self.count,
            lines=self.lines,
            lines_dropped=self.lines_dropped,
        )
