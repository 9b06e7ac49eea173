"""Looking at a silent host from outside, and restarting its agent: what the central side does before
it believes a host is hung.

An agent that stops reporting is not yet a hung host: the agent may have died on a healthy machine,
the host may be powered off, or the network may be down. `ping` asks the host's address (iputils
`ping`, five echo requests; its -q summary stays in the command log, where remediator/unreachable.py
reads how many came back; the host counts as answering when any did, iputils' own exit status); with
the BMC's chassis power state (cyborg.drivers.bmc) the remediator tells these apart
(remediator/unreachable.py). `restart_agent` runs the cluster's `restart_agent` hook
(FLEETFIX_SCHEDULER_HOOKS, like drain and undrain): fleetfix has no way onto a host whose agent is
dead, so the site says how (ssh, its config management, …); without a hook it fails and says so.
`SimulatedReach` answers for the simulated fleet.
"""

from __future__ import annotations

import threading
from typing import Any, Protocol

from cyborg.commands import ActionContext, ActionFailed, System
from cyborg.drivers import hooks

PING_TIMEOUT_S = 15.0
PING_COUNT = 5  # two were too few to tell a lossy link from a dead host before a power cycle


class Reach(Protocol):
    name: str

    @property
    def system(self) -> System | None:
        """What its commands run on; None when it runs none (the simulated fleet's)."""

    def ping(self, hostname: str, address: str, ctx: ActionContext) -> bool | None:
        """True: the host answered; False: it did not; None: no way to ask (no ping here)."""

    def restart_agent(self, hostname: str, cluster: str, remediation_id: int, ctx: ActionContext) -> dict[str, Any]:
        """Start the host's agent again; raises ActionFailed."""


class LiveReach:
    name = "live"

    def __init__(self, system: System, scheduler_hooks: dict[str, dict[str, str | list[str]]]) -> None:
        self.system: System = system
        self.scheduler_hooks = scheduler_hooks

    def ping(self, hostname: str, address: str, ctx: ActionContext) -> bool | None:
        if self.system.which("ping") is None:
            ctx.note("ping", "not installed: reachability unknown")
            return None
        argv = ["ping", "-c", str(PING_COUNT), "-W", "2", "-q", "--", address]
        result = ctx.run(argv, timeout_s=PING_TIMEOUT_S, changes=False)
        return result.returncode == 0

    def restart_agent(self, hostname: str, cluster: str, remediation_id: int, ctx: ActionContext) -> dict[str, Any]:
        hook = hooks.hook_for(self.scheduler_hooks, cluster, "restart_agent")
        if hook is None:
            raise ActionFailed(
                f"no restart_agent hook for cluster {cluster or '(none)'}: fleetfix has no way onto a host whose "
                "agent is down (FLEETFIX_SCHEDULER_HOOKS)"
            )
        return hooks.run_hook(
            hook, ctx, hostname=hostname, cluster=cluster, remediation_id=remediation_id, action="restart_agent"
        )


class SimulatedReach:
    """The simulated fleet: a hung or powered-off virtual host does not answer; one whose agent died does."""

    name = "simulated"
    system: System | None = None

    def __init__(self, hosts: dict[str, Any], *, lock: threading.RLock | None = None) -> None:
        self.hosts = hosts  # hostname -> checker.sim VirtualHost
        self.lock = lock or threading.RLock()

    def ping(self, hostname: str, address: str, ctx: ActionContext) -> bool | None:
        host = self.hosts.get(hostname)
        answered = host is not None and not host.down and not host.powered_off
        ctx.note(f"simulated ping {address}", "answered" if answered else "no answer", kind="simulated")
        return answered

    def restart_agent(self, hostname: str, cluster: str, remediation_id: int, ctx: ActionContext) -> dict[str, Any]:
        host = self.hosts.get(hostname)
        if host is None:
            raise ActionFailed(f"no simulated host {hostname}")
        with self.lock:
            outcome = host.apply("restart_agent", {})
        ctx.note("simulated agent restart", str(outcome["changed"] or outcome["error"]), kind="simulated")
        if outcome["outcome"] != "done":
            raise ActionFailed(f"simulated agent restart: {outcome['error']}")
        return {"hook": "simulated", "changed": outcome["changed"]}
