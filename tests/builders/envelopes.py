"""Cyborg's step envelopes as the central side issues them, for the host executor's tests."""

from __future__ import annotations

import datetime as dt
import uuid
from typing import Any

from cyborg.envelope import Envelope
from tests.builders.reports import T0

NOW = T0


def envelope(
    action: str = "tune_error_reporting",
    params: dict[str, Any] | None = None,
    *,
    hostname: str = "sim-1",
    remediation_id: int = 7,
    step: int = 0,
    timeout_s: int = 30,
    issued_at: dt.datetime = NOW,
    expires_s: int = 900,
    dry_run: bool = False,
) -> Envelope:
    return Envelope(
        id=uuid.uuid4(),
        hostname=hostname,
        remediation_id=remediation_id,
        step=step,
        attempt=1,
        action=action,
        params=params if params is not None else {},
        timeout_s=timeout_s,
        dry_run=dry_run,
        issued_at=issued_at,
        expires_at=issued_at + dt.timedelta(seconds=expires_s),
    )
