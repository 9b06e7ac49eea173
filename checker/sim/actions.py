"""Remediation actions on a virtual host, changing it the way the real action changes a machine.

The simulated cyborg driver calls `VirtualHost.apply(action, params)`. Each action returns
what it changed; `host.fail_next_action` makes the next one hang, fail, or leave the host
down, so tests can drive the unhappy paths. A down host answers only to a power cycle
(through its BMC).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from checker.sim import gpu, pages, stalls, xid
from checker.sim.events import faulty_core
from checker.sim.faults import CLEARED_BY_REBOOT, CLEARED_BY_REIMAGE
from checker.sim.hardware import (
    EDAC_POLL_LATCHED_MAX_MSEC,
    EDAC_POLL_TUNED_MSEC,
    OPTERON_PATCHED_KERNEL,
    default_weights,
    kernel_side_effects,
)

if TYPE_CHECKING:
    from checker.sim.host import VirtualHost

Changes = dict[str, Any]
WARM_REBOOT_S = 7  # kexec: no firmware, no BIOS
COLD_REBOOT_S = 60
FAILURE_MODES = ("hang", "fail", "stay_down")
OUT_OF_BAND = ("power_cycle", "update_bmc_firmware")  # the BMC does them: a down or powered-off host answers


def _restart(host: VirtualHost, *, cold: bool) -> Changes:
    if cold and host.last_at is not None:
        host.sel(host.last_at, "Power Unit Pwr Unit Status", "Power off/down")
        host.sel(host.last_at, "Power Unit Pwr Unit Status", "Power off/down", "Deasserted")
    host.reboot()
    cleared = host.clear(CLEARED_BY_REBOOT)
    changes: Changes = {"boot_id": host.boot_id, "downtime_s": COLD_REBOOT_S if cold else WARM_REBOOT_S}
    if cold and host.bios_pending is not None:  # a staged BIOS runs from the first boot through POST (not kexec)
        changes["bios_applied"], host.bios_version, host.bios_pending = host.bios_pending, host.bios_pending, None
        cleared += host.clear({"firmware_old_bios"})
    return {**changes, "cleared": cleared}


def update_bmc_firmware(host: VirtualHost, params: dict[str, Any]) -> Changes:
    """Redfish SimpleUpdate through the BMC (the centre's update_bmc_firmware): the BMC's own image runs once the
    BMC restarted (the host runs on); a BIOS image is staged and runs from the next cold boot, as the real BMC
    stages it (cyborg/drivers/redfish_media.py reports it `pending_reboot`). `version`: the image's release
    (default the class's current one). The BMC answers while the host is down or off."""
    if host.hardware.bmc_protocol != "redfish":
        raise ValueError(f"{host.hostname}'s BMC speaks IPMI only: no Redfish UpdateService")
    component = str(params["component"])
    if component == "bios":
        version = str(params.get("version") or host.hardware.bios_version)
        host.bios_pending = version
        return {
            "component": component,
            "version": version,
            "previous": host.bios_version,
            "pending_reboot": True,
            "cleared": [],
        }
    if component == "bmc":
        version = str(params.get("version") or host.hardware.bmc_firmware)
        previous, host.bmc_firmware = host.bmc_firmware, version
        if host.last_at is not None:
            host.sel(host.last_at, "Version Change FW Update Status", "")
        return {
            "component": component,
            "version": version,
            "previous": previous,
            "pending_reboot": False,
            "cleared": host.clear({"firmware_old_bmc"}),
        }
    raise ValueError(f"no Redfish firmware target {component!r} (bios, bmc)")


def reboot(host: VirtualHost, params: dict[str, Any]) -> Changes:
    kind = params.get("kind", "warm")
    if kind not in ("warm", "kexec", "cold"):
        raise ValueError(f"reboot kind {kind!r}: warm, kexec or cold")
    return {"kind": kind, **_restart(host, cold=kind == "cold")}


def reflash_firmware(host: VirtualHost, params: dict[str, Any]) -> Changes:
    component, version = str(params["component"]), str(params["version"])
    if component == "bios":
        previous, host.bios_version = host.bios_version, version
        host.bios_pending = None  # flashed in-band: an image the BMC had staged is superseded
        # A BIOS update is applied by the reboot that follows it.
        cleared = host.clear({"firmware_old_bios"})
        changes = _restart(host, cold=True)
        return {"component": component, "version": version, "previous": previous, **changes, "cleared": cleared}
    if component == "bmc":
        previous, host.bmc_firmware = host.bmc_firmware, version
        if host.last_at is not None:
            host.sel(host.last_at, "Version Change FW Update Status", "")
        cleared = host.clear({"firmware_old_bmc"})
        return {"component": component, "version": version, "previous": previous, "cleared": cleared}
    disk = next((d for d in host.disks if component == f"disk:{d.spec.device}"), None)
    if disk is not None:
        previous = disk.firmware or disk.spec.firmware
        disk.firmware = version
        return {"component": component, "version": version, "previous": previous, "cleared": []}
    if component.startswith("nic:") and component[4:] in host.hardware.nic_interfaces:
        iface = component[4:]
        previous = host.nic_firmware.get(iface, host.hardware.nic_firmware)
        host.nic_firmware[iface] = version
        return {"component": component, "version": version, "previous": previous, "cleared": []}
    raise ValueError(f"no firmware component {component!r} on {host.hostname}")


def drain(host: VirtualHost, params: dict[str, Any]) -> Changes:
    """Out of the workload scheduler: nothing on the host itself changes."""
    previous, host.drained = host.drained, True
    return {"drained": True, "previous": previous}


def undrain(host: VirtualHost, params: dict[str, Any]) -> Changes:
    previous, host.drained = host.drained, False
    return {"drained": False, "previous": previous}


def install_kernel(host: VirtualHost, params: dict[str, Any]) -> Changes:
    release = str(params["release"])
    previous, host.kernel = host.kernel, release
    cleared = host.clear({"errata_unpatched"}) if release == OPTERON_PATCHED_KERNEL else []
    if "cputime_wrap" not in kernel_side_effects(release):
        cleared += host.clear({"cputime_wrap"})
    changes = _restart(host, cold=False)  # kexec into the new kernel
    return {"kernel": release, "previous": previous, **changes, "cleared": cleared + changes["cleared"]}


def hard_ppr(host: VirtualHost, params: dict[str, Any]) -> Changes:
    wanted = params.get("dimm", 0)
    index = next((i for i, d in enumerate(host.dimms) if wanted in (i, d.locator, d.label)), None)
    if index is None:
        raise ValueError(f"no DIMM {wanted!r} on {host.hostname}")
    fault = next((f for f in host.faults if f.kind == "dimm_ce_moderate" and f.dimm_index == index), None)
    repaired = False
    if fault is not None and fault.ppr_success:
        host.faults.remove(fault)
        repaired = True
    # Hard PPR runs in the BIOS during POST: the host reboots to do it.
    return {"dimm": host.dimms[index].locator, "repaired": repaired, **_restart(host, cold=True)}


def tune_error_reporting(host: VirtualHost, params: dict[str, Any]) -> Changes:
    poll = int(params.get("poll_msec", EDAC_POLL_TUNED_MSEC))
    previous = host.edac_poll_msec
    # A failing DIMM goes on failing, whatever the reporting; the slow poll is gone only if the new
    # interval lets a latching driver see again (the edge class's ie31200 keeps one error per poll).
    cleared = host.clear({"edac_poll_slow"}) if poll <= EDAC_POLL_LATCHED_MAX_MSEC else []
    host.edac_poll_msec = poll
    return {"poll_msec": poll, "previous": previous, "cleared": cleared}


def restore_cmci(host: VirtualHost, params: dict[str, Any]) -> Changes:
    """The vendor tool's switch back to CMCI: the host's errors stop costing an SMI each."""
    previous, host.reporting_mode = host.reporting_mode, "cmci"
    return {"error_reporting": "cmci", "previous": previous, "cleared": host.clear({"firmware_first_left"})}


def repair_irq_affinity(host: VirtualHost, params: dict[str, Any]) -> Changes:
    widened = sorted(host.irq_widened)
    return {"irqs": widened, "cleared": host.clear({"isolated_irqs"})}


def enable_demotion(host: VirtualHost, params: dict[str, Any]) -> Changes:
    previous, host.demotion_enabled = host.demotion_enabled, True
    return {"demotion_enabled": True, "previous": previous, "cleared": host.clear({"cxl_demotion_disabled"})}


def set_numa_balancing(host: VirtualHost, params: dict[str, Any]) -> Changes:
    hw = host.hardware
    previous = host.numa_balancing if host.numa_balancing is not None else (2 if hw.cxl_nodes else 1)
    if previous == 0:  # as the real action: balancing turned off is its owner's, not overridden
        raise ValueError(f"numa_balancing is 0 on {host.hostname}: NUMA balancing was turned off, not overridden")
    cleared = host.clear({"cxl_promotion_disabled"})
    host.numa_balancing = previous | 2  # the bit added to what was there, as the real action does (1 -> 3)
    return {"numa_balancing": host.numa_balancing, "previous": previous, "cleared": cleared}


def set_interleave_weights(host: VirtualHost, params: dict[str, Any]) -> Changes:
    cleared = host.clear({"cxl_interleave_default"})
    weights = params.get("weights") or default_weights(host.hardware, tuned=True)
    host.interleave_weights = {str(node): int(weight) for node, weight in weights.items()}
    return {"weights": dict(host.interleave_weights), "cleared": cleared}


def clear_sel(host: VirtualHost, params: dict[str, Any]) -> Changes:
    previous = host.sel_count
    host.sel_pending.clear()
    host.sel_count, host.sel_next_id = 0, 1
    if host.last_at is not None:
        host.sel(host.last_at, "Event Logging Disabled SEL Fullness", "Log area reset/cleared")
    return {"entry_count": host.sel_count, "previous": previous, "cleared": host.clear({"sel_full"})}


def reimage(host: VirtualHost, params: dict[str, Any]) -> Changes:
    previous, host.kernel = host.kernel, host.hardware.kernel
    cleared = host.clear(CLEARED_BY_REIMAGE)
    changes = _restart(host, cold=False)
    return {"kernel": host.kernel, "previous": previous, **changes, "cleared": cleared + changes["cleared"]}


def power_cycle(host: VirtualHost, params: dict[str, Any]) -> Changes:
    """A hung host restarts; one that is off is turned on. A dead agent starts with the new boot too."""
    was_down, was_off = host.down, host.powered_off
    cleared = host.clear({"unreachable", "powered_off", "agent_dead"}) + xid.power_cycled(host)  # a GPU off the bus
    host.down = host.powered_off = host.agent_dead = False
    changes = _restart(host, cold=True)
    return {"down": False, "was_down": was_down, "was_off": was_off, **changes, "cleared": cleared + changes["cleared"]}


def restart_agent(host: VirtualHost, params: dict[str, Any]) -> Changes:
    """The cluster's hook started the agent again: reports resume. A hung or powered-off host has no agent to start."""
    if host.down or host.powered_off:
        raise ValueError(f"{host.hostname} does not answer: there is no agent to restart")
    was_dead = host.agent_dead
    host.agent_dead = False
    return {"agent_restarted": True, "was_dead": was_dead, "cleared": host.clear({"agent_dead"})}


def offline_cpu(host: VirtualHost, params: dict[str, Any]) -> Changes:
    """One CPU taken offline: the host keeps running on the others."""
    cpu = int(params["cpu"])
    if not 0 < cpu < host.hardware.logical_cpus:
        raise ValueError(f"no CPU {cpu} that can be taken offline on {host.hostname}")
    if cpu in host.isolated:
        raise ValueError(f"cpu{cpu} of {host.hostname} is isolated: its latency workload would move silently")
    already = cpu in host.offline_cpus
    host.offline_cpus.add(cpu)
    # The faulty core's errors stop while it is offline; the fault stays (the CPU needs the ticket's
    # repair), and a reboot brings the core back, errors and all.
    return {"cpu": cpu, "online": False, "already_offline": already, "faulty_core": cpu == faulty_core(host)}


ACTIONS: dict[str, Callable[[VirtualHost, dict[str, Any]], Changes]] = {
    "reboot": reboot,
    "reflash_firmware": reflash_firmware,
    "update_bmc_firmware": update_bmc_firmware,
    "install_kernel": install_kernel,
    "hard_ppr": hard_ppr,
    "tune_error_reporting": tune_error_reporting,
    "restore_cmci": restore_cmci,
    "repair_irq_affinity": repair_irq_affinity,
    "enable_demotion": enable_demotion,
    "set_interleave_weights": set_interleave_weights,
    "set_numa_balancing": set_numa_balancing,
    "clear_sel": clear_sel,
    "offline_cpu": offline_cpu,
    "reset_gpu": gpu.reset_gpu,
    "soft_offline_page": pages.soft_offline_page,
    "verify_memory_under_load": stalls.verify_memory_under_load,
    "reimage": reimage,
    "power_cycle": power_cycle,
    "restart_agent": restart_agent,
    "drain": drain,
    "undrain": undrain,
}


def apply_action(host: VirtualHost, action: str, params: dict[str, Any]) -> dict[str, Any]:
    handler = ACTIONS.get(action)
    if handler is None:
        raise ValueError(f"unknown action {action!r}; the simulated host knows {', '.join(ACTIONS)}")
    failure, host.fail_next_action = host.fail_next_action, None
    if failure is not None and failure not in FAILURE_MODES:
        raise ValueError(f"fail_next_action {failure!r}: one of {', '.join(FAILURE_MODES)}")
    result: dict[str, Any] = {"action": action, "outcome": "done", "changed": {}, "error": None}
    if failure == "hang":
        return {**result, "outcome": "hang", "error": "the host did not answer"}
    if failure == "fail":
        return {**result, "outcome": "failed", "error": "the action failed on the host (simulated)"}
    if (host.down or host.powered_off) and action not in OUT_OF_BAND:
        return {**result, "outcome": "failed", "error": "host unreachable"}
    changed = handler(host, params)
    if failure == "stay_down":
        host.down = True
        changed["down"] = True
    return {**result, "changed": changed}
