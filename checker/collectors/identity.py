"""Identity and configuration: CPUs and microcode, kernel and its command line, DIMM inventory,
BIOS/system/BMC/NIC/NVMe firmware.

/proc and /sys answer most of it; dmidecode (DIMM locators, part numbers, serials: tickets need
them), `ipmitool mc info` and `ethtool -i` are run too. Their answers change only with hardware or
firmware work, so the agent reuses them for FLEETFIX_AGENT_INVENTORY_REFRESH_S. A part that cannot
be read is a problem of this collector, never a failure: the identity that was read is reported.
"""

from __future__ import annotations

from checker.collectors.context import Context, Unavailable, command_failure
from checker.parsers.dmi import parse_dmi_id, parse_dmidecode_firmware, parse_dmidecode_memory
from checker.parsers.firmware import parse_ethtool_driver
from checker.parsers.identity import parse_cmdline, parse_cpuinfo
from checker.parsers.ipmi import parse_mc_info
from checker.schemas import DimmInventory, Firmware, Identity

DMI_MEMORY = ["dmidecode", "-t", "memory"]
DMI_FIRMWARE = ["dmidecode", "-t", "bios", "-t", "system"]
MC_INFO = ["ipmitool", "mc", "info"]
DMI_ID = "/sys/class/dmi/id"
DMI_ID_FILES = ("bios_vendor", "bios_version", "bios_date", "sys_vendor", "product_name", "product_serial")
TOOL_TIMEOUT_S = 10.0
MAX_NICS = 64


def ethtool_argv(interface: str) -> list[str]:
    return ["ethtool", "-i", interface]


def collect(ctx: Context) -> None:
    cpuinfo = ctx.host.read_text("/proc/cpuinfo")
    kernel = ctx.host.read_text("/proc/sys/kernel/osrelease")
    cmdline_text = ctx.host.read_text("/proc/cmdline")
    if cpuinfo is None and kernel is None and cmdline_text is None:
        raise Unavailable("/proc/cpuinfo, /proc/sys/kernel/osrelease and /proc/cmdline cannot be read")
    identity = Identity(kernel=kernel.strip()[:256] if kernel else None)
    if cmdline_text is not None:
        cmdline = ctx.take(parse_cmdline(cmdline_text), "/proc/cmdline", cmdline_text)
        identity.cmdline = cmdline.cmdline or None
        identity.isolated_cpus = cmdline.isolated_cpus
        identity.nohz_full_cpus = cmdline.nohz_full_cpus
    if cpuinfo is not None:
        identity.cpus = ctx.take(parse_cpuinfo(cpuinfo), "/proc/cpuinfo", cpuinfo)
    ctx.observations.identity = identity
    identity.dimms = _dimms(ctx)
    identity.firmware = _firmware(ctx)


def _dimms(ctx: Context) -> list[DimmInventory]:
    result = ctx.run(DMI_MEMORY, TOOL_TIMEOUT_S, memo=True)
    if result.returncode != 0 or not result.stdout.strip():
        ctx.problem(f"DIMM inventory: {command_failure(result)}")
        return []
    parsed = parse_dmidecode_memory(result.stdout)
    for item in parsed.problems[:5]:
        ctx.problem(f"dmidecode -t memory: {item}")
    return parsed.value


def _firmware(ctx: Context) -> Firmware:
    result = ctx.run(DMI_FIRMWARE, TOOL_TIMEOUT_S, memo=True)
    if result.returncode == 0 and result.stdout.strip():
        firmware = ctx.take(parse_dmidecode_firmware(result.stdout), "dmidecode -t bios -t system", result.stdout)
    else:
        files = {n: t for n in DMI_ID_FILES if (t := ctx.host.read_text(f"{DMI_ID}/{n}")) is not None}
        firmware = parse_dmi_id(files).value if files else Firmware()
        if not files:
            ctx.problem(f"BIOS and system: {command_failure(result)}, and no {DMI_ID}")
    bmc = ctx.run(MC_INFO, TOOL_TIMEOUT_S, memo=True)
    if bmc.returncode == 0 and bmc.stdout.strip():
        firmware.bmc_firmware = ctx.take(parse_mc_info(bmc.stdout), "ipmitool mc info", bmc.stdout)
    elif not bmc.missing:
        ctx.problem(f"BMC firmware: {command_failure(bmc)}")
    _nics(ctx, firmware)
    for controller in ctx.host.list_dir("/sys/class/nvme") or []:
        revision = ctx.host.read_text(f"/sys/class/nvme/{controller}/firmware_rev")
        if revision is not None and revision.strip():
            firmware.nvme[controller] = revision.strip()[:64]
    return firmware


def _nics(ctx: Context, firmware: Firmware) -> None:
    """Physical NICs only: an interface with a device/ link (virtual ones — lo, bridges, veth — have none)."""
    for interface in (ctx.host.list_dir("/sys/class/net") or [])[:256]:
        if ctx.host.read_text(f"/sys/class/net/{interface}/device/uevent") is None:
            continue
        if len(firmware.nics) >= MAX_NICS:
            ctx.problem(f"more than {MAX_NICS} NICs; the rest not read")
            return
        result = ctx.run(ethtool_argv(interface), TOOL_TIMEOUT_S, memo=True)
        if result.missing:
            ctx.problem(f"NIC firmware: {command_failure(result)}")
            return
        if result.returncode != 0:
            ctx.problem(f"{interface}: {command_failure(result)}")
            continue
        nic = ctx.take(parse_ethtool_driver(result.stdout, interface), f"ethtool -i {interface}", result.stdout)
        if nic is not None:
            firmware.nics.append(nic)
