"""A virtual host's PCIe functions as the `pcie` collector reads them from sysfs, and the `pcie_fault` fault
(a downtrained link, or an AER storm: its variants).

Each class has a root port per device (x16, the class's PCIe generation), its NIC's functions (the
`network` section's bus 3b), one NVMe per NVMe disk and, on a GPU class, a switch port per GPU. The files
are written as the kernel writes them ('8.0 GT/s PCIe', 'RxErr 3' … 'TOTAL_ERR_COR 3') and read back
through the real parser (checker/parsers/pcie.py), so the demo goes through the same code as a host.

The fault (its variant; the device is the host's first NVMe, else its NIC, drawn from the fault's
`dimm_index`): `width`: the link trained at half its width; `speed`: one generation below; `aer_storm`:
the device's corrected-error counter growing at `per_hour` (a marginal link: RxErr and BadDLLP),
counted from the later of the boot and the fault's start, as the kernel's counters are.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import TYPE_CHECKING

from checker.parsers.pcie import device_from_sysfs, with_ports, worth_reporting
from checker.schemas import CollectorRun, CollectorStatus, PcieDevice, PcieState

if TYPE_CHECKING:
    from checker.sim.host import VirtualHost

FAULT = "pcie_fault"
VARIANTS = ("width", "speed", "aer_storm")
LOWER_GEN = {64.0: 32.0, 32.0: 16.0, 16.0: 8.0, 8.0: 5.0, 5.0: 2.5}
NICS = {  # driver -> vendor, device, lanes
    "mlx5_core": ("15b3", "1017", 8),
    "i40e": ("8086", "1572", 8),
    "igb": ("8086", "1521", 4),
    "e1000e": ("8086", "15b8", 1),
}
NVME_IDS = {"micron": ("1344", "51a3"), "samsung": ("144d", "a80a"), "intel": ("8086", "0a54")}
COR_TYPES = (("RxErr", 0.7), ("BadTLP", 0.0), ("BadDLLP", 0.3), ("Rollover", 0.0), ("Timeout", 0.0))


@dataclass(frozen=True)
class Function:
    bdf: str
    parent: str | None
    class_code: str
    vendor: str
    device: str
    driver: str
    speed: float  # the function's own capability
    width: int
    slot: str | None = None


def _gen(host: VirtualHost) -> float:
    name = host.hardware.name
    if "spr" in name:
        return 32.0
    if host.hardware.gpus or "epyc" in name:
        return 16.0
    return 8.0


def topology(host: VirtualHost) -> list[Function]:
    """Ports first, then the endpoints below them."""
    hw = host.hardware
    gen = _gen(host)
    port = "0000:3a:00.0"
    functions = [Function(port, None, "060400", "8086", "2030", "pcieport", gen, 16)]
    vendor, device, lanes = NICS.get(hw.nic_driver, ("8086", "1572", 8))
    for index in range(max(1, len(hw.nic_interfaces))):
        functions.append(
            Function(f"0000:3b:00.{index}", port, "020000", vendor, device, hw.nic_driver, gen, lanes, "2")
        )
    nvmes = [d for d in host.disks if d.spec.protocol == "NVMe"]
    for index, disk in enumerate(nvmes):
        port = f"0000:5d:{index:02x}.0"
        model = disk.spec.model.casefold()
        ids = next((v for k, v in NVME_IDS.items() if k in model), ("1344", "51a3"))
        functions.append(Function(port, None, "060400", "8086", "2030", "pcieport", gen, 16))
        functions.append(
            Function(f"0000:{0x5E + index:02x}:00.0", port, "010802", *ids, "nvme", gen, 4, str(10 + index))
        )
    for index, gpu in enumerate(hw.gpus):
        bus = int(gpu.bdf.split(":")[1], 16)
        port = f"0000:{bus - 1:02x}:00.0"
        functions.append(Function(port, None, "060400", "1000", "c010", "pcieport", gen, 16))
        functions.append(
            Function(f"0000:{bus:02x}:00.0", port, "030200", "10de", "20b2", "nvidia", gen, 16, f"GPU{index}")
        )
    return functions


def target(host: VirtualHost, dimm_index: int) -> Function:
    """The faulty device: an NVMe where the host has one, else its NIC's first function."""
    endpoints = [f for f in topology(host) if f.class_code == "010802"]
    if not endpoints:
        return next(f for f in topology(host) if f.class_code == "020000")
    return endpoints[dimm_index % len(endpoints)]


def variant_of(dimm_index: int) -> str:
    return VARIANTS[dimm_index % len(VARIANTS)]


def _hours(host: VirtualHost, start: dt.datetime | None, now: dt.datetime) -> float:
    marks = [t for t in (start, host.boot_at) if t is not None]
    since = max(marks) if marks else (host.first_at or now)
    return max(0.0, (now - since).total_seconds() / 3600)


def _aer_file(names: list[str], total: str, counts: dict[str, int]) -> str:
    lines = [f"{name} {counts.get(name, 0)}" for name in names]
    return "\n".join([*lines, f"{total} {sum(counts.values())}"]) + "\n"


UNCORRECTABLE = ["Undefined", "DLP", "SDES", "TLP", "FCP", "CmpltTO", "CmpltAbrt", "UnxCmplt", "RxOF", "MalfTLP"]
UNCORRECTABLE += ["ECRC", "UnsupReq", "ACSViol", "UncorrIntErr", "BlockedTLP", "AtomicOpBlocked", "TLPBlockedErr"]


def sysfs_files(function: Function, speed: float, width: int, corrected: int) -> dict[str, str]:
    """The files the collector reads, in the kernel's wording (drivers/pci/pci-sysfs.c, pcie/aer.c)."""
    cor = {name: int(corrected * share) for name, share in COR_TYPES}
    cor["RxErr"] += corrected - sum(cor.values())  # the rounding's remainder
    return {
        "uevent": f"DRIVER={function.driver}\nPCI_CLASS={int(function.class_code, 16):X}\n"
        f"PCI_ID={function.vendor.upper()}:{function.device.upper()}\nPCI_SLOT_NAME={function.bdf}\n",
        "current_link_speed": f"{speed:.1f} GT/s PCIe\n",
        "max_link_speed": f"{function.speed:.1f} GT/s PCIe\n",
        "current_link_width": f"{width}\n",
        "max_link_width": f"{function.width}\n",
        "aer_dev_correctable": _aer_file([n for n, _ in COR_TYPES] + ["NonFatalErr", "CorrIntErr", "HeaderOF"],
                                         "TOTAL_ERR_COR", cor),
        "aer_dev_nonfatal": _aer_file(UNCORRECTABLE, "TOTAL_ERR_NONFATAL", {}),
        "aer_dev_fatal": _aer_file(UNCORRECTABLE, "TOTAL_ERR_FATAL", {}),
    }  # fmt: skip


def pcie_state(host: VirtualHost, now: dt.datetime) -> PcieState:
    fault = next((f for f in host.faults if f.kind == FAULT), None)
    faulty = target(host, fault.dimm_index) if fault is not None else None
    functions = topology(host)
    by_bdf = {f.bdf: f for f in functions}
    devices: list[PcieDevice] = []
    for function in functions:
        # a link trains to the lesser of its two ends: the port takes its endpoint's, an endpoint its port's
        below = [f for f in functions if f.parent == function.bdf]
        partner = by_bdf.get(function.parent) if function.parent else (below[0] if below else None)
        speed = min(function.speed, partner.speed) if partner else function.speed
        width = min(function.width, partner.width) if partner else function.width
        corrected = 0
        on_link = faulty is not None and function.bdf in (faulty.bdf, faulty.parent)
        if fault is not None and on_link and fault.variant == "width":
            width = max(1, width // 2)
        elif fault is not None and on_link and fault.variant == "speed":
            speed = LOWER_GEN.get(speed, speed)
        elif fault is not None and faulty is not None and function.bdf == faulty.bdf and fault.variant == "aer_storm":
            corrected = int(fault.per_hour * _hours(host, fault.started_at, now))
        parsed = device_from_sysfs(
            function.bdf, sysfs_files(function, speed, width, corrected), parent=function.parent, slot=function.slot
        )
        if parsed.value is not None:
            devices.append(parsed.value)
    return PcieState(
        source="sysfs", functions=len(devices), aer_counters=True, devices=worth_reporting(with_ports(devices))
    )


def collector_run(host: VirtualHost) -> CollectorRun:
    return CollectorRun(status=CollectorStatus.ok, duration_ms=1.1, source="sysfs")
