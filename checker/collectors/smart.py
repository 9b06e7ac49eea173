"""SMART: `smartctl --scan-open -j`, then `smartctl -a -j -d TYPE DEVICE` for each device found.

smartctl's exit status is a bit mask (checker.parsers.smart.EXIT_FLAGS): bit 2 is set behind many
RAID controllers, bit 6 when the error log holds old entries. It is decoded into exit_flags and
never read as "the disk failed". smartctl older than 7.0 has no JSON: the plain-text scan and
`smartctl -a` are read instead.
"""

from __future__ import annotations

import re

from checker.collectors.context import BudgetExceeded, Context, ParseFailed, Unavailable, command_failure
from checker.parsers.pcie import normal_bdf
from checker.parsers.smart import (
    ScannedDevice,
    decode_exit_status,
    parse_scan_open_json,
    parse_scan_open_text,
    parse_smartctl_json,
)
from checker.parsers.smart_text import parse_smartctl_text
from checker.schemas import DiskHealth

SCAN_JSON = ["smartctl", "--scan-open", "-j"]
SCAN_TEXT = ["smartctl", "--scan-open"]
DEVICE_TIMEOUT_S = 30.0
SCAN_TIMEOUT_S = 30.0
MAX_DISKS = 256
_NVME_DEVICE = re.compile(r"^/dev/(?P<controller>nvme\d+)(?P<namespace>n\d+)?$")  # a controller, or a namespace
_CONTROLLER = re.compile(r"^nvme\d+$")


def nvme_pci_address(ctx: Context, device: str, serial: str | None = None) -> str | None:
    """The NVMe controller's PCIe function: /sys/class/nvme/nvme0/device resolves to the PCI device's own
    directory (.../0000:00:02.1/0000:01:00.0), whose name is its address. None for any other device, a
    controller over a fabric (its device is no PCI function) or a path sysfs does not have.

    A namespace's number is not its controller's (native multipath: nvme0n1 can sit on controller nvme1, its
    name taken from the subsystem): its controller is where /sys/block/nvmeXnY/device resolves, and a
    namespace that resolves to a subsystem, not one controller, links nothing. The controller's own serial
    (/sys/class/nvme/nvmeX/serial) must be the drive's SMART serial where both are known: otherwise a drive
    and another drive's PCIe function would share one ticket (review r4, finding 9)."""
    m = _NVME_DEVICE.match(device)
    if m is None:
        return None
    controller = m.group("controller")
    if m.group("namespace"):
        owner = ctx.host.resolve(f"/sys/block/{controller}{m.group('namespace')}/device")
        name = owner.rstrip("/").rsplit("/", 1)[-1] if owner else ""
        if not _CONTROLLER.match(name):
            return None  # a multipath subsystem, or sysfs did not say: no one controller
        controller = name
    said = (ctx.host.read_text(f"/sys/class/nvme/{controller}/serial") or "").strip()
    if serial and said and said != serial.strip():
        return None
    target = ctx.host.resolve(f"/sys/class/nvme/{controller}/device")
    return normal_bdf(target.rstrip("/").rsplit("/", 1)[-1]) if target else None


def device_argv(device: ScannedDevice, *, json: bool = True) -> list[str]:
    return ["smartctl", "-a", *(["-j"] if json else []), "-d", device.type, device.name]


def _scan(ctx: Context) -> tuple[list[ScannedDevice], bool]:
    """The devices, and whether this smartctl speaks JSON."""
    result = ctx.run(SCAN_JSON, SCAN_TIMEOUT_S)
    if result.missing:
        raise Unavailable("smartctl is not installed")
    if result.timed_out:
        raise BudgetExceeded(command_failure(result))
    if result.stdout.lstrip().startswith("{"):
        scan = parse_scan_open_json(result.stdout)
        return ctx.take(scan, "smartctl --scan-open -j", result.stdout), True
    # smartctl 6.x answers '-j' with a usage error; its plain scan has the same facts.
    text = ctx.run(SCAN_TEXT, SCAN_TIMEOUT_S)
    if text.returncode != 0 and not text.stdout.strip():
        raise Unavailable(command_failure(text))
    return ctx.take(parse_scan_open_text(text.stdout), "smartctl --scan-open", text.stdout), False


def collect(ctx: Context) -> None:
    devices, speaks_json = _scan(ctx)
    ctx.source = "smartctl" if speaks_json else "smartctl-text"
    if not devices:
        raise Unavailable("smartctl --scan-open found no devices (none attached, or no permission to open them)")
    disks: list[DiskHealth] = []
    ctx.observations.disks = disks  # what was read is kept when the budget runs out
    if len(devices) > MAX_DISKS:
        ctx.problem(f"{len(devices)} devices; only the first {MAX_DISKS} were read")
    for device in devices[:MAX_DISKS]:
        argv = device_argv(device, json=speaks_json)
        try:
            result = ctx.run(argv, DEVICE_TIMEOUT_S)
        except BudgetExceeded as stop:
            raise BudgetExceeded(f"{stop}: {len(disks)} of {len(devices)} devices read") from None
        if result.timed_out:
            ctx.problem(f"{device.name}: {command_failure(result)}")
            continue
        if speaks_json:
            parsed = parse_smartctl_json(result.stdout, device=device.name)
        else:
            parsed = parse_smartctl_text(result.stdout, device=device.name, exit_status=result.returncode)
        health = parsed.value
        if health is None:
            why = f"{device.name}: {parsed.problems[0] if parsed.problems else command_failure(result)}"
            if len(devices) == 1:
                raise ParseFailed(why, result.stdout)
            ctx.problem(why)
            continue
        for item in parsed.problems:
            ctx.problem(f"{device.name}: {item}")
        if health.exit_status == 0 and result.returncode > 0:
            # JSON without smartctl.exit_status (6.x experimental): the process status is the same mask.
            health.exit_status = result.returncode
            health.exit_flags = decode_exit_status(result.returncode)
        if health.protocol == "NVMe":
            health.pci_address = nvme_pci_address(ctx, device.name, health.serial)
        disks.append(health)
