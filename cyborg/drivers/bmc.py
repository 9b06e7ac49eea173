"""Out-of-band power control from the central side, for hosts that cannot act for themselves.

`IpmitoolBmc` runs ipmitool against the host's BMC over the LAN (lanplus), with the password read
from a file (`-f`), never on the command line; `SimulatedBmc` power-cycles a virtual host of the
simulated fleet in this process (the demo) and starts its simulated agent again, as a boot would.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal, Protocol

from cyborg.commands import ActionContext, ActionFailed, LiveSystem, System

IfOff = Literal["refuse", "power_on", "cycle_or_power_on"]
"""What a power cycle does, by the power state the BMC reads just before it. The same in every BMC driver; each
caller names its mode (review r2 finding 9):
- `refuse` (the power_cycle action's default): on, it is cycled; off, nothing is sent and the step fails with
  FoundOff: an operator may have switched it off, and a power cycle is no licence to turn it on;
- `power_on` (the host-powered-off rule): off, it is turned on; on, nothing is sent: it came on since the probe
  that chose the rule (a technician, the BMC restoring power), and a cycle would cut its boot short;
- `cycle_or_power_on` (a reinstall, a silent host's revive): on, it is cycled; off, it is turned on: the caller
  needs it to boot again either way."""


class FoundOff(ActionFailed):
    """A power cycle found the host off and may not turn it on (`if_off: refuse`): nothing was sent. Not a failed
    fix: the remediation ends and the host goes to the silent-host probe (remediator/runner.py)."""


def refuse_off(hostname: str, address: str | None, said: str) -> FoundOff:
    """The step's failure when a power cycle finds the host off and may not turn it on."""
    return FoundOff(
        f"{hostname} is off ({said}): a power cycle does not turn on a host that may have been switched off on "
        "purpose (the step's if_off is refuse; if_off: power_on turns it on)"
    )


class Bmc(Protocol):
    name: str

    @property
    def system(self) -> System | None:
        """What its commands run on; None for a BMC that runs none (the simulated fleet's)."""

    def can_reach(self, hostname: str, address: str | None) -> bool:
        """Whether this BMC can be asked about the host at all: its address is known (ipmitool), or the BMC
        is the simulated fleet's. A caller asks this rather than knowing which BMC it holds."""

    def power_cycle(
        self, hostname: str, address: str | None, ctx: ActionContext, if_off: IfOff = "refuse"
    ) -> dict[str, Any]:
        """Off and on again, as `if_off` says for the power state found (IfOff): a host found off is turned on
        only with `power_on` or `cycle_or_power_on`, else FoundOff before anything is sent; a host found on is
        left alone with `power_on`."""

    def power_state(self, hostname: str, address: str | None, ctx: ActionContext) -> str:
        """'on' or 'off', as the BMC sees the chassis; raises ActionFailed when the BMC does not answer."""

    def boot_device(self, hostname: str, address: str | None, device: str, ctx: ActionContext) -> dict[str, Any]:
        """Set the next boot device (pxe, disk)."""


class IpmitoolBmc:
    name = "ipmitool"

    def __init__(self, username: str, password_file: Path | None, system: System | None = None) -> None:
        self.username = username
        self.password_file = password_file
        self.system: System = system or LiveSystem()

    def can_reach(self, hostname: str, address: str | None) -> bool:
        return address is not None

    def base_argv(self, address: str | None) -> list[str]:
        if not address:
            raise ActionFailed("no BMC address for this host (label bmc_address, or FLEETFIX_BMC_ADDRESS_TEMPLATE)")
        argv = ["ipmitool", "-I", "lanplus", "-H", address]
        if self.username:
            argv += ["-U", self.username]
        if self.password_file is not None:
            argv += ["-f", str(self.password_file)]
        return argv

    def power_state(self, hostname: str, address: str | None, ctx: ActionContext) -> str:
        status = ctx.must([*self.base_argv(address), "chassis", "power", "status"], timeout_s=30, changes=False)
        words = status.strip().lower().split()  # "Chassis Power is on"
        if not words or words[-1] not in ("on", "off"):
            raise ActionFailed(f"the BMC answered {status.strip()[:80]!r} to chassis power status")
        return words[-1]

    def power_cycle(
        self, hostname: str, address: str | None, ctx: ActionContext, if_off: IfOff = "refuse"
    ) -> dict[str, Any]:
        base = self.base_argv(address)
        status = ctx.must([*base, "chassis", "power", "status"], timeout_s=30, changes=False).strip()
        # A host that is off does not power-cycle (ipmitool(1), `chassis power cycle`: no action should occur in
        # S4/S5): it is turned on, when the caller says so.
        if status.endswith("off") and if_off == "refuse":
            raise refuse_off(hostname, address, status)
        if not status.endswith("off") and if_off == "power_on":
            return {"bmc": address, "power": "none", "was": status}  # came on since the probe: left to boot
        verb = "on" if status.endswith("off") else "cycle"
        ctx.must([*base, "chassis", "power", verb], timeout_s=60)
        return {"bmc": address, "power": verb, "was": status}

    def boot_device(self, hostname: str, address: str | None, device: str, ctx: ActionContext) -> dict[str, Any]:
        ctx.must([*self.base_argv(address), "chassis", "bootdev", device], timeout_s=60)
        return {"bmc": address, "bootdev": device}


class SimulatedBmc:
    """The simulated fleet's BMCs: `power_cycle` and `reimage` act on the virtual host in this process;
    `on_boot(hostname)` runs after the host comes back (its agent starting). One driver for both protocols, but each
    result and command-log line says which one the host's BMC speaks (its class's `bmc_protocol`), and only a
    Redfish BMC updates firmware (`update_firmware`, as RedfishBmc's: IPMI has no such thing)."""

    name = "simulated"
    system: System | None = None  # it acts on the virtual hosts directly

    def __init__(
        self,
        hosts: dict[str, Any],
        *,
        lock: threading.RLock | None = None,
        on_boot: Callable[[str], None] | None = None,
    ) -> None:
        self.hosts = hosts  # hostname -> checker.sim VirtualHost
        self.lock = lock or threading.RLock()
        self.on_boot = on_boot
        self.pxe: set[str] = set()

    def can_reach(self, hostname: str, address: str | None) -> bool:
        return True  # every virtual host has one; an unknown host is an ActionFailed when it is asked

    def _host(self, hostname: str) -> Any:
        host = self.hosts.get(hostname)
        if host is None:
            raise ActionFailed(f"no simulated BMC for {hostname}")
        return host

    @staticmethod
    def protocol(host: Any) -> str:
        """What the virtual host's BMC speaks: its hardware class's `bmc_protocol` (checker/sim/hardware.py)."""
        return str(getattr(host.hardware, "bmc_protocol", "ipmi"))

    def power_cycle(
        self, hostname: str, address: str | None, ctx: ActionContext, if_off: IfOff = "refuse"
    ) -> dict[str, Any]:
        host = self._host(hostname)
        protocol = self.protocol(host)
        if host.powered_off and if_off == "refuse":
            ctx.note(f"simulated BMC ({protocol}): chassis power status", "off", kind="simulated")
            raise refuse_off(hostname, address, "the simulated BMC says off")
        if not host.powered_off and if_off == "power_on":
            ctx.note(f"simulated BMC ({protocol}): chassis power status", "on", kind="simulated")
            return {"bmc": "simulated", "protocol": protocol, "power": "none", "was": "on"}
        action = "reimage" if hostname in self.pxe else "power_cycle"
        with self.lock:
            if action == "reimage":
                host.down = False
            outcome = host.apply(action, {})
        said = str(outcome["changed"] or outcome["error"])
        ctx.note(f"simulated BMC ({protocol}): {action}", said, kind="simulated")
        if outcome["outcome"] != "done":
            raise ActionFailed(f"simulated BMC ({protocol}): {action}: {outcome['error']}")
        if self.on_boot is not None:
            self.on_boot(hostname)
        return {"bmc": "simulated", "protocol": protocol, "power": "cycle", "changed": outcome["changed"]}

    def power_state(self, hostname: str, address: str | None, ctx: ActionContext) -> str:
        host = self._host(hostname)
        state = "off" if host.powered_off else "on"
        ctx.note(f"simulated BMC ({self.protocol(host)}): chassis power status", state, kind="simulated")
        return state

    def boot_device(self, hostname: str, address: str | None, device: str, ctx: ActionContext) -> dict[str, Any]:
        host = self._host(hostname)
        if device == "pxe":
            self.pxe.add(hostname)
        else:
            self.pxe.discard(hostname)
        protocol = self.protocol(host)
        ctx.note(f"simulated BMC ({protocol}): bootdev {device}", "", kind="simulated")
        return {"bmc": "simulated", "protocol": protocol, "bootdev": device}

    def update_firmware(
        self,
        hostname: str,
        address: str | None,
        component: str,
        image: str,
        sha256: str,
        ctx: ActionContext,
        version: str | None = None,
    ) -> dict[str, Any]:
        """SimpleUpdate on the virtual host: the version changes to `version` (default the class's current release;
        a BIOS only from the next cold boot: pending, as the real BMC stages it). The image is not fetched: the
        simulation has none to check."""
        host = self._host(hostname)
        protocol = self.protocol(host)
        if protocol != "redfish":
            raise ActionFailed(
                f"{hostname}'s BMC speaks {protocol} only: a firmware update through the BMC needs Redfish "
                "(UpdateService.SimpleUpdate)"
            )
        params = {"component": component, "version": version}
        before = host.bios_version if component == "bios" else host.bmc_firmware
        if ctx.dry_run:
            ctx.note(f"simulated BMC ({protocol}): SimpleUpdate {component} {image}", "not sent", kind="dry_run")
            return {"bmc": "simulated", "protocol": protocol, "component": component, "version_before": before}
        with self.lock:
            outcome = host.apply("update_bmc_firmware", params)
        said = str(outcome["changed"] or outcome["error"])
        ctx.note(f"simulated BMC ({protocol}): SimpleUpdate {component} {image}", said, kind="simulated")
        if outcome["outcome"] != "done":
            raise ActionFailed(f"simulated BMC ({protocol}): update of {component}: {outcome['error']}")
        changed = outcome["changed"]
        after = host.bios_version if component == "bios" else host.bmc_firmware
        return {
            "bmc": "simulated",
            "protocol": protocol,
            "component": component,
            "image": image,
            "sha256": sha256,
            "version_before": before,
            "version_after": after,
            "staged": changed["version"] if changed["pending_reboot"] else None,
            "pending_reboot": changed["pending_reboot"],
            "changed": {component: {"before": before, "after": after}} if after != before else {},
            "cleared": changed["cleared"],
        }
