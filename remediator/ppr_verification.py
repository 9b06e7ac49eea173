"""After a hard-PPR flow: is the host back in CMCI mode, with its SMI rate back to its own baseline?

The flow switches the host to firmware-first on purpose (an SMI per corrected error) and back to
CMCI after the PPR boot (cyborg/drivers/ppr.py). Settling on "the CE rate went quiet" alone would
pass a host left firmware-first: its errors then arrive as GHES records and every one stalls all
cores. So before a PPR remediation counts as fixed, the reports since its last step must not show
errors arriving firmware-first (a mode presumed from configuration alone does not count), and the
host's SMI rate must be no higher than its baseline from before the flow (the median of its smi_rate
signals in the day before the remediation began) allows.
"""

from __future__ import annotations

import datetime as dt
import statistics

from sqlalchemy import select
from sqlalchemy.orm import Session

from remediator.models import Remediation, Signal, StepState

BASELINE_WINDOW = dt.timedelta(days=1)
BASELINE_FACTOR = 2.0  # back to baseline: at most twice the host's own rate before the flow ...
BASELINE_SLACK = 0.1  # ... or its rate plus 0.1 SMI/s (a quiet host's baseline is near zero)
MAX_ROWS = 500
# Only errors that arrived firmware-first say the switch back did not take. ghes_edac, loaded at boot
# while the BIOS was firmware-first, stays until the next reboot whatever the mode is now: "firmware_first
# by configuration" is that presumption (rule ghes-edac-expects-cmci tickets it), not a failed PPR.
TRUSTED_BY = ("errors", "recent errors")


def _signals(session: Session, host_id: int, kind: str, since: dt.datetime, until: dt.datetime | None) -> list[Signal]:
    query = select(Signal).where(Signal.host_id == host_id, Signal.kind == kind, Signal.observed_at > since)
    if until is not None:
        query = query.where(Signal.observed_at < until)
    return list(session.scalars(query.order_by(Signal.observed_at.desc()).limit(MAX_ROWS)))


def ppr_verification(session: Session, remediation: Remediation) -> str | None:
    """Why a finished hard-PPR remediation does not count as fixed yet (None: it does, or it is no PPR)."""
    ppr = [s for s in remediation.steps if s.action == "hard_ppr" and s.state == StepState.succeeded]
    if not ppr:
        return None
    finished = max((s.finished_at for s in ppr if s.finished_at is not None), default=None)
    if finished is None:
        return None
    modes = _signals(session, remediation.host_id, "error_reporting_mode", finished, None)
    if modes and modes[0].detail.get("mode") == "firmware_first" and modes[0].detail.get("by") in TRUSTED_BY:
        return (
            "after hard PPR the host still reports corrected errors firmware-first "
            f"({'; '.join(modes[0].detail.get('evidence') or [])}): the switch back to CMCI did not take"
        )
    rates = _signals(session, remediation.host_id, "smi_rate", finished, None)
    if not rates:
        return None  # no SMI counter on this host (AMD, no msr module): the mode alone decides
    before = _signals(
        session, remediation.host_id, "smi_rate", remediation.created_at - BASELINE_WINDOW, remediation.created_at
    )
    quiet = [s.value for s in before if s.detail.get("mode") != "firmware_first"]
    baseline = statistics.median(quiet) if quiet else 0.0
    allowed = max(baseline * BASELINE_FACTOR, baseline + BASELINE_SLACK)
    latest = rates[0].value
    if latest > allowed:
        return (
            f"after hard PPR the host takes {latest:.2f} SMI/s, above its baseline of {baseline:.2f}/s "
            f"before the flow (allowed {allowed:.2f}/s)"
        )
    return None
