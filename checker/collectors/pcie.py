"""PCI Express functions from sysfs: each one's link (trained vs capable speed and width), its AER counters,
and what names it (slot, class, vendor:device, driver, the port above it).

The tree under /sys/devices/pci*/ is walked rather than /sys/bus/pci/devices, whose entries are symlinks:
a function's directory sits in its upstream port's, so the walk gives each link's two ends without a
readlink. Only files a function's listing shows are read (uevent, the four link files, the three
aer_dev_* files): about eight small sysfs reads per PCIe function, no command, no sleep; and at the walk
each port's `config`, 256 bytes, for its LnkCtl2 Target Link Speed (sysfs has no file for it; a reader
without root gets 64 bytes and no answer). The root
port's aer_rootport_total_err_* counters are left alone: they count the messages the port received from
the functions below it, which those functions' own counters already hold.

Kernels before 4.13 have no link files: then `lspci -vvvnnD` (pciutils; root, since the link registers
sit in the capabilities) is read instead, through the command runner with a timeout. A host without a
PCI bus in sysfs (a container, a VM without passthrough) reports the collector unavailable.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from weakref import WeakKeyDictionary

from checker.collectors.context import CollectorState, Context, ParseFailed, Unavailable, command_failure
from checker.parsers.pcie import (
    AER_FILES,
    BDF,
    device_from_sysfs,
    normal_bdf,
    parse_lspci_vvv,
    target_speed_from_config,
    with_ports,
    worth_reporting,
)
from checker.sections.pcie import MAX_PCIE_DEVICES, PcieDevice, PcieState

SYS_DEVICES = "/sys/devices"
SLOTS = "/sys/bus/pci/slots"
STATIC_FILES = ("uevent", "max_link_speed", "max_link_width")  # read at the walk
DYNAMIC_FILES = ("current_link_speed", "current_link_width", *AER_FILES)  # read every cycle
ID_FILES = ("class", "vendor", "device")  # where there is no uevent (a snapshot of the class files only)
BOOT_ID = "/proc/sys/kernel/random/boot_id"
REWALK_S = 600.0  # hot-plugged functions and rebound drivers show within ten minutes
LSPCI = ["lspci", "-vvvnnD"]
LSPCI_TIMEOUT_S = 5.0
MAX_DEPTH = 16  # PCIe switches nest a few levels; a deeper tree is a loop or a broken mount
CONFIG_BYTES = 256  # a port's config space up to its PCI Express capability (root reads past 64)
TARGET = "lnkctl2_target"  # the static entry that carries a port's Target Link Speed from the walk


def _slots(ctx: Context) -> dict[str, str]:
    """'0000:1b:00' (domain:bus:device) -> slot name, from /sys/bus/pci/slots/*/address."""
    found: dict[str, str] = {}
    for name in ctx.host.list_dir(SLOTS) or []:
        address = (ctx.host.read_text(f"{SLOTS}/{name}/address") or "").strip().lower()
        if address:
            found.setdefault(address, name)
    return found


Function = tuple[str, str, str | None, set[str]]  # bdf, its directory, the parent's bdf, its entries


def _walk(ctx: Context, directory: str, names: list[str], parent: str | None, depth: int, out: list[Function]) -> int:
    """Every function below `directory` (whose entries are `names`), each listed once; returns how many
    were left out."""
    left_out = 0
    for name in names:
        if BDF.match(name) is None or normal_bdf(name) is None:
            continue
        if len(out) >= MAX_PCIE_DEVICES * 2:
            left_out += 1
            continue
        path = f"{directory}/{name}"
        entries = ctx.host.list_dir(path) or []
        out.append((name, path, parent, set(entries)))
        if depth < MAX_DEPTH:
            left_out += _walk(ctx, path, entries, normal_bdf(name), depth + 1, out)
    return left_out


@dataclass
class _Tree:
    """What the walk found, kept by the agent between cycles: the functions and their static files."""

    boot: str | None
    at: float  # time.monotonic() of the walk
    functions: list[Function]  # those with a link or AER files
    static: dict[str, dict[str, str | None]]  # directory -> uevent, max_link_*, ids
    slots: dict[str, str]
    truncated: int


_TREES: WeakKeyDictionary[CollectorState, _Tree] = WeakKeyDictionary()
"""Per agent (its CollectorState): a cycle re-reads only the files that change, and walks again after
REWALK_S, on a new boot, or in `fleetfix check` (a fresh state each time)."""


def _tree(ctx: Context) -> _Tree:
    boot = (ctx.host.read_text(BOOT_ID) or "").strip() or None
    kept = _TREES.get(ctx.state)
    if kept is not None and kept.boot == boot and time.monotonic() - kept.at < REWALK_S:
        return kept
    roots = [name for name in ctx.host.list_dir(SYS_DEVICES) or [] if name.startswith("pci")]
    if not roots:
        raise Unavailable(f"no PCI bus in {SYS_DEVICES} (a container or a VM without PCI devices)")
    walked: list[Function] = []
    truncated = 0
    for root in roots:
        top = f"{SYS_DEVICES}/{root}"
        truncated += _walk(ctx, top, ctx.host.list_dir(top) or [], None, 0, walked)
    functions: list[Function] = []
    static: dict[str, dict[str, str | None]] = {}
    for function in walked:
        _, path, _, entries = function
        if "current_link_speed" not in entries and not entries.intersection(AER_FILES):
            continue  # conventional PCI or an integrated function: no link, no AER
        if len(functions) >= MAX_PCIE_DEVICES:
            truncated += 1
            continue
        functions.append(function)
        names = [*STATIC_FILES, *(ID_FILES if "uevent" not in entries else ())]
        static[path] = {name: ctx.host.read_text(f"{path}/{name}") for name in names if name in entries}
        if "config" in entries and _is_port(static[path]):
            static[path][TARGET] = _target(ctx, f"{path}/config")
    tree = _Tree(boot, time.monotonic(), functions, static, _slots(ctx), truncated)
    _TREES[ctx.state] = tree
    return tree


def _is_port(files: dict[str, str | None]) -> bool:
    """A PCI-to-PCI bridge (class 0604: a root, switch or downstream port), by uevent or the class file."""
    text = files.get("uevent") or ""
    code = next((line.split("=", 1)[1] for line in text.splitlines() if line.startswith("PCI_CLASS=")), None)
    code = code or (files.get("class") or "").strip().removeprefix("0x")
    try:
        return int(code or "0", 16) >> 8 == 0x0604
    except ValueError:
        return False


def _target(ctx: Context, path: str) -> str | None:
    """The port's LnkCtl2 Target Link Speed (a BIOS or driver cap; sysfs has no file for it), read from its
    config space once per walk: one 256-byte read per port."""
    try:
        speed = target_speed_from_config(ctx.host.read_bytes(path, 0, CONFIG_BYTES))
    except OSError:
        return None
    return None if speed is None else str(speed)


def _from_sysfs(ctx: Context) -> PcieState | None:
    tree = _tree(ctx)
    devices: list[PcieDevice] = []
    linked = counters = False
    for bdf, path, parent, entries in tree.functions:
        linked = linked or "current_link_speed" in entries
        counters = counters or bool(entries.intersection(AER_FILES))
        files = {name: ctx.host.read_text(f"{path}/{name}") for name in DYNAMIC_FILES if name in entries}
        slot = tree.slots.get((normal_bdf(bdf) or bdf)[:10])
        static = tree.static.get(path, {})
        parsed = device_from_sysfs(bdf, {**static, **files}, parent=parent, slot=slot)
        for item in parsed.problems:
            ctx.problem(item)
        if parsed.value is not None:
            target = static.get(TARGET)
            devices.append(
                parsed.value.model_copy(update={"target_speed_gts": float(target)}) if target else parsed.value
            )
    truncated = tree.truncated
    if not linked:
        return None  # no link files: a kernel before 4.13
    listed = worth_reporting(with_ports(devices))
    return PcieState(source="sysfs", functions=len(devices), aer_counters=counters, devices=listed, truncated=truncated)


def _from_lspci(ctx: Context) -> PcieState:
    result = ctx.run(LSPCI, timeout_s=LSPCI_TIMEOUT_S)
    if result.missing:
        raise Unavailable("no link files in sysfs (a kernel before 4.13) and lspci is not installed (pciutils)")
    if result.timed_out or result.returncode != 0:
        raise Unavailable(f"no link files in sysfs, and lspci failed: {command_failure(result)}")
    parsed = parse_lspci_vvv(result.stdout)
    devices = ctx.take(parsed, "lspci -vvv", result.stdout)
    if not devices:
        if "access denied" in result.stdout:
            raise Unavailable("no link files in sysfs, and lspci shows no link registers without root")
        raise ParseFailed("lspci -vvv: no function with a LnkCap line", result.stdout)
    return PcieState(source="lspci", functions=len(devices), devices=worth_reporting(with_ports(devices)))


def collect(ctx: Context) -> None:
    state = _from_sysfs(ctx)
    if state is None:
        state = _from_lspci(ctx)
    ctx.observations.pcie = state
    ctx.source = state.source
