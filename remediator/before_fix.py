"""Whether a report was made before a fix ended: a report stored after the fix's last step finished may
have been made before it (an ingester behind, a report delivered late), and is then no evidence that the
fault returned (remediator.policies.FaultReturnedWhileVerifying asks).

A step that restarted the host is told by boot id, one that did not by the host's own clock within
MAX_CLOCK_SKEW of the central one; a host's clock is never compared with the central one.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from checker.schemas import Report, utc
from cyborg.actions import ACTIONS as CYBORG_ACTIONS
from remediator.models import Remediation, RemediationStep
from remediator.payloads import MAX_CLOCK_SKEW


def before_the_fix(remediation: Remediation, report: Report | None) -> str | None:
    """Why `report` was made before the fix's last finished step ended (so it is not evidence that the fault
    returned), or None when it may have been made after it, or that cannot be told: such a firing counts.

    - A step that restarted the host is told by boot id, never by time (the agent reports from the new boot
      before the step's result is stamped, and a clock may step at boot): a report from the boot the step left
      (when its result recorded it) was made before; one from the boot it verified, or any other, counts.
    - A step the host ran without restarting it is told by the host's clock: its result's `finished_at` against
      the report's `captured_at`, both the host's, trusted only within MAX_CLOCK_SKEW of the central end.
    - Anything else (a central step, no report, no host stamp) counts: a host's clock is never compared with
      the central one."""
    last = last_finished_step(remediation)
    if last is None or report is None:
        return None
    result = last.result if isinstance(last.result, dict) else {}
    if restarted_host(last.action, result):
        left = result.get("boot_id_before")
        reported = report.host.boot_id
        if isinstance(left, str) and reported == left and left != boot_verified(result):
            return f"report from boot {left}, before the fix restarted the host: not evidence that the fault returned"
        return None
    fixed = fix_finished_at(remediation)
    captured = utc(report.captured_at)
    if fixed is not None and captured < fixed:
        return (
            f"report captured at {captured.isoformat()}, before the fix finished at {fixed.isoformat()}:"
            " not evidence that the fault returned"
        )
    return None


def last_finished_step(remediation: Remediation) -> RemediationStep | None:
    done = [step for step in remediation.steps if step.finished_at is not None]
    return max(done, key=lambda step: step.index) if done else None


def boot_verified(result: dict[str, Any]) -> str | None:
    """The boot a restarting step came back in: the host's verification, or the reinstall's first report."""
    verified = result.get("verified")
    boot = verified.get("boot_id") if isinstance(verified, dict) else None
    if not isinstance(boot, str):
        boot = result.get("reports_from")
    return boot if isinstance(boot, str) else None


def restarted_host(action: str, result: dict[str, Any]) -> bool:
    """Whether the step restarted the host: a central action that restarts it (power cycle, reinstall), or a
    host action that can restart it whose result says it did (completed across a restart, or came back in a
    boot, verified or first reported, other than the one it left). The boot a host action ran in
    (`boot_id_before`, in every host result) says nothing by itself: a fix that did not restart the host
    leaves every later report in that boot."""
    spec = CYBORG_ACTIONS.get(action)
    if spec is None or not spec.restarts:
        return False
    if spec.site == "central":
        return True
    changed = result.get("changed")
    across = isinstance(changed, dict) and bool(changed.get("completed_across_restart"))
    came_back = boot_verified(result)  # a dry run says `restarting` and restarts nothing: it has none
    return across or (came_back is not None and came_back != result.get("boot_id_before"))


def fix_finished_at(remediation: Remediation) -> dt.datetime | None:
    """When the remediation's last finished step ended by the host's clock (reports are stamped by the same
    clock): its result's `finished_at`, when the host ran the step and that stamp is within MAX_CLOCK_SKEW of
    the central `finished_at`; else None (a central step, or a host clock not to be trusted)."""
    last = last_finished_step(remediation)
    if last is None or last.finished_at is None:
        return None
    spec = CYBORG_ACTIONS.get(last.action)
    if spec is None or spec.site != "host":
        return None
    stamped = (last.result or {}).get("finished_at")
    if not isinstance(stamped, str):
        return None
    try:
        host_end = utc(dt.datetime.fromisoformat(stamped))
    except ValueError:
        return None
    if abs(host_end - utc(last.finished_at)) > MAX_CLOCK_SKEW:
        return None
    return host_end
