"""A workload scheduler the central executor drains and undrains hosts in when a cluster has no hook.

A real deployment says how its scheduler is driven with FLEETFIX_SCHEDULER_HOOKS (cyborg.drivers.hooks);
with no hook for a host's cluster a drain is a recorded no-op (`skipped`), nothing is confirmed drained,
and a load test answers the gap "host not drained". A `Scheduler` handed to `CentralCyborg` is asked
instead, and only then: the demo (`fleetfix up --simulate N`, api/embedded.py) hands in
`SimulatedScheduler`, whose drain and undrain mark the virtual host out of (back into) its scheduler
(checker.sim.actions), so the demo's load tests run and answer pass or fail rather than a drain gap.
"""

from __future__ import annotations

import threading
from typing import Any, Protocol

from checker.sim.actions import drain, undrain
from cyborg.commands import ActionContext, ActionFailed, System

CHANGES = {"drain": drain, "undrain": undrain}
"""What each action does to a virtual host."""


class Scheduler(Protocol):
    name: str

    @property
    def system(self) -> System | None:
        """What its commands run on; None when it runs none (the simulated fleet's)."""

    def run(self, action: str, hostname: str, cluster: str, remediation_id: int, ctx: ActionContext) -> dict[str, Any]:
        """Drain or undrain the host; what it did (`hook`, `changed`). Raises ActionFailed."""


class SimulatedScheduler:
    """The simulated fleet's scheduler: the scheduler acts, not the host, so a host that is down is drained
    all the same, and the host's `fail_next_action` is left for the host's own next action. A dry run
    changes nothing (and so confirms no drain: cyborg.central.issuing.drain_confirmed)."""

    name = "simulated"
    system: System | None = None

    def __init__(self, hosts: dict[str, Any], *, lock: threading.RLock | None = None) -> None:
        self.hosts = hosts  # hostname -> checker.sim VirtualHost
        self.lock = lock or threading.RLock()

    def run(self, action: str, hostname: str, cluster: str, remediation_id: int, ctx: ActionContext) -> dict[str, Any]:
        change = CHANGES.get(action)
        if change is None:
            raise ActionFailed(f"the simulated scheduler has no {action!r} (drain, undrain)")
        host = self.hosts.get(hostname)
        if host is None:
            raise ActionFailed(f"{action}: no host {hostname} in the simulated scheduler")
        what = f"simulated scheduler: {action} {hostname} (remediation {remediation_id})"
        if ctx.dry_run:
            ctx.note(what, "not applied (dry run)", kind="dry_run")
            return {"hook": "simulated"}
        with self.lock:
            changed = change(host, {})
        ctx.note(what, f"drained={changed['drained']} (was {changed['previous']})", kind="simulated")
        return {"hook": "simulated", "changed": changed}
