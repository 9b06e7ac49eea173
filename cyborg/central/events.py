"""Cyborg's log events about what hosts say back, for the remediator to emit as it matches them to steps.

The audit entries of the same names are the remediator's (rows in its database); the log lines are
cyborg's, under its logger, as those of dispatching and power cycles are.
"""

from __future__ import annotations

import logging

log = logging.getLogger(__name__)


def envelope_refused(host: str | None, code: object) -> None:
    """A host refused an envelope (forged, tampered, replayed, expired, not allowed, no journal)."""
    log.warning("cyborg.envelope.refused", extra={"fields": {"host": host, "code": code}})


def message_refused(task: str, host: str | None, why: str) -> None:
    """A message claiming to come from a host (result, start, refusal) was not accepted: `why`."""
    log.warning("cyborg.message.refused", extra={"fields": {"task": task, "host": host, "why": why}})
