"""One virtual host on its own, for an agent that simulates its machine (`FLEETFIX_AGENT_DRIVER=simulated`).

`standalone_host` builds a host of a hardware class with the given faults; `host_state` and
`restore_host` keep what actions change (boot id, kernel, firmware, settings, the faults still
present, whether it is down) across agent restarts, as a real machine keeps them when its agent
restarts: a reboot the agent started is still a reboot after the agent comes back.
"""

from __future__ import annotations

import json
import os
import random
from pathlib import Path
from typing import Any

from checker.sim.events import valid_for
from checker.sim.faults import FAULT_KINDS, FaultKind
from checker.sim.fleet import SimulatedFleet, _make_host
from checker.sim.hardware import HARDWARE_CLASSES
from checker.sim.host import VirtualHost

STATE_VERSION = 1
STATE_FILE = "simulated-host.json"


def standalone_host(
    hostname: str, *, hardware_class: str = "", faults: list[str] | None = None, seed: int = 1
) -> VirtualHost:
    """A virtual host named `hostname` of `hardware_class` (default: the first class) with `faults`."""
    names = [hw.name for hw in HARDWARE_CLASSES]
    if hardware_class and hardware_class not in names:
        raise ValueError(f"no hardware class {hardware_class!r} (classes: {', '.join(names)})")
    index = names.index(hardware_class) if hardware_class else 0
    rng = random.Random(seed)
    host = _make_host(index, rng)
    host.hostname = hostname
    factory = SimulatedFleet(0, seed=seed)
    for kind in faults or []:
        if kind not in FAULT_KINDS:
            raise ValueError(f"no fault kind {kind!r} (kinds: {', '.join(FAULT_KINDS)})")
        if not valid_for(host, kind):
            raise ValueError(f"a {host.hardware.name} host cannot have {kind!r}")
        fault_kind: FaultKind = kind  # checked against FAULT_KINDS above
        host.inject(factory.fault(fault_kind))
    return host


_FIELDS = (
    "boot_id",
    "kernel",
    "bios_version",
    "bmc_firmware",
    "bios_pending",
    "edac_poll_msec",
    "demotion_enabled",
    "numa_balancing",
    "drained",
    "down",
)


def host_state(host: VirtualHost) -> dict[str, Any]:
    """What actions changed on the host, as JSON."""
    state: dict[str, Any] = {name: getattr(host, name) for name in _FIELDS}
    state["version"] = STATE_VERSION
    state["nic_firmware"] = dict(host.nic_firmware)
    state["interleave_weights"] = dict(host.interleave_weights)
    state["disk_firmware"] = {d.spec.device: d.firmware for d in host.disks if d.firmware is not None}
    state["faults"] = sorted({f.kind for f in host.faults})
    state["offlined_pages"] = sorted(host.ras.offlined)  # soft_offline_page: gone until the next boot
    # a Redfish BMC's counts outlive the agent (checker/sim/redfish.py): what it counted, and from which boot
    state["redfish_ce_lifetime"] = dict(host.redfish.ce_lifetime)
    state["redfish_ce_seen"] = dict(host.redfish.ce_seen)
    state["redfish_boot_id"] = host.redfish.boot_id
    return state


def restore_host(host: VirtualHost, state: dict[str, Any]) -> None:
    """Bring a freshly built host to a saved state: faults an action cleared stay cleared."""
    if state.get("version") != STATE_VERSION:
        raise ValueError(f"simulated host state version {state.get('version')!r}, expected {STATE_VERSION}")
    present = set(state.get("faults", []))
    host.clear({f.kind for f in host.faults if f.kind not in present})
    for name in _FIELDS:
        if name in state:
            setattr(host, name, state[name])
    host.nic_firmware = {str(k): str(v) for k, v in state.get("nic_firmware", {}).items()}
    host.interleave_weights = {str(k): int(v) for k, v in state.get("interleave_weights", {}).items()}
    firmware = state.get("disk_firmware", {})
    for disk in host.disks:
        disk.firmware = firmware.get(disk.spec.device, disk.firmware)
    host.ras.offlined = {int(page) for page in state.get("offlined_pages", [])}
    host.redfish.ce_lifetime = {str(k): int(v) for k, v in state.get("redfish_ce_lifetime", {}).items()}
    host.redfish.ce_seen = {str(k): int(v) for k, v in state.get("redfish_ce_seen", {}).items()}
    host.redfish.boot_id = str(state.get("redfish_boot_id", ""))


def load_host(state_dir: Path, host: VirtualHost) -> list[dict[str, Any]]:
    """Restore the host from STATE_FILE in state_dir, if there is one; returns the actions applied so far."""
    path = state_dir / STATE_FILE
    if not path.exists():
        return []
    saved = json.loads(path.read_text(encoding="utf-8"))
    restore_host(host, saved["host"])
    return list(saved.get("applied", []))


def save_host(state_dir: Path, host: VirtualHost, applied: list[dict[str, Any]]) -> None:
    """Write the host's state and the actions applied to it, atomically."""
    path = state_dir / STATE_FILE
    temporary = path.with_suffix(".new")
    with temporary.open("w", encoding="utf-8") as handle:
        json.dump({"host": host_state(host), "applied": applied}, handle)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(temporary, path)
