"""PCI Express link state and AER counters: sysfs attribute files and `lspci -vvv` records -> PcieDevice.

sysfs (Linux 4.13 on): current_link_speed / max_link_speed ('8.0 GT/s PCIe', older kernels '8 GT/s',
'Unknown' while the link is down), current_link_width / max_link_width (lanes), class / vendor /
device ('0x010802'), uevent (DRIVER=, PCI_CLASS=, PCI_ID=), and the AER counters (Linux 4.19 on)
aer_dev_correctable / aer_dev_nonfatal / aer_dev_fatal: one 'Name count' line per error type and a
TOTAL_ERR_* line. lspci -vvv (pciutils; root reads the capabilities): 'LnkCap: Port #0, Speed 5GT/s,
Width x2', 'LnkSta: Speed 5GT/s (ok), Width x1 (downgraded)' (pciutils 3.8 on annotate), 'Physical
Slot:', 'Kernel driver in use:', 'LnkCtl2: Target Link Speed: 16GT/s' (on a root or downstream port
the cap set on the link below it; on an endpoint only the compliance speed: the sample's BCM5720 says
2.5GT/s and runs at 5). lspci says (downgraded) against the function's own LnkCap only: whether the
link is at fault needs its partner's capability too, which the deriver compares. Pure.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping

from checker.parsers.common import Parsed, clip, guarded, problem
from checker.sections.pcie import MAX_AER_TYPES, MAX_PCIE_DEVICES, PcieDevice

BDF = re.compile(r"^(?:(?P<domain>[0-9a-fA-F]{4}):)?(?P<bus>[0-9a-fA-F]{2}):(?P<dev>[0-9a-fA-F]{2})\.(?P<fn>[0-7])$")
_SPEED = re.compile(r"(?P<gts>\d{1,3}(?:\.\d{1,3})?)\s*GT/s")
_AER_LINE = re.compile(r"^(?P<name>[A-Za-z_][\w]*)\s+(?P<n>\d{1,19})\s*$")
AER_FILES = {"aer_dev_correctable": "correctable", "aer_dev_nonfatal": "nonfatal", "aer_dev_fatal": "fatal"}
AER_TOTALS = {"correctable": "TOTAL_ERR_COR", "nonfatal": "TOTAL_ERR_NONFATAL", "fatal": "TOTAL_ERR_FATAL"}

# PCI class code (base class, sub-class) -> what a technician calls it; the base class alone as fallback.
DEVICE_KINDS: dict[str, str] = {
    "0200": "NIC",
    "0207": "NIC (InfiniBand)",
    "02": "NIC",
    "0108": "NVMe",
    "0104": "RAID controller",
    "0106": "SATA controller",
    "0107": "SAS HBA",
    "01": "storage controller",
    "0300": "GPU",
    "0302": "GPU",
    "03": "display controller",
    "0604": "PCIe port",
    "06": "bridge",
    "0c03": "USB controller",
    "0c04": "Fibre Channel HBA",
    "12": "accelerator",
    "0b": "processor",
}
_LSPCI_CLASSES = {
    "ethernet controller": "020000",
    "infiniband controller": "020700",
    "network controller": "028000",
    "non-volatile memory controller": "010802",
    "raid bus controller": "010400",
    "sata controller": "010601",
    "serial attached scsi controller": "010700",
    "vga compatible controller": "030000",
    "3d controller": "030200",
    "display controller": "038000",
    "pci bridge": "060400",
    "usb controller": "0c0330",
    "fibre channel": "0c0400",
    "processing accelerators": "120000",
}


def normal_bdf(text: str) -> str | None:
    """'0000:03:00.0' (lower case, with its domain) from any of the spellings, or None."""
    m = BDF.match(text.strip())
    if m is None:
        return None
    return f"{(m.group('domain') or '0000').lower()}:{m.group('bus').lower()}:{m.group('dev').lower()}.{m.group('fn')}"


def device_kind(class_code: str | None) -> str:
    """'NVMe', 'NIC', 'GPU' … from a class code ('010802' or '0x010802'); 'PCIe device' when unknown."""
    code = (class_code or "").lower().removeprefix("0x")
    return DEVICE_KINDS.get(code[:4]) or DEVICE_KINDS.get(code[:2]) or "PCIe device"


def link_speed(text: str | None) -> float | None:
    """GT/s per lane from '8.0 GT/s PCIe', '5 GT/s', '16GT/s (ok)'; None for 'Unknown' (link down)."""
    m = _SPEED.search(text or "")
    return float(m.group("gts")) if m else None


def with_ports(devices: list[PcieDevice]) -> list[PcieDevice]:
    """Each function with its port's capability (the other end of its link) and, when it has no slot of
    its own, the port's slot (a card sits in the slot of the port that feeds it)."""
    by_bdf = {d.bdf: d for d in devices}
    out: list[PcieDevice] = []
    for device in devices:
        port = by_bdf.get(device.parent) if device.parent else None
        if port is not None:
            device = device.model_copy(
                update={
                    "port_max_speed_gts": port.max_speed_gts,
                    "port_max_width": port.max_width,
                    "port_target_speed_gts": port.target_speed_gts,
                    "slot": device.slot or port.slot,
                }
            )
        out.append(device)
    return out


def below_both_ends(device: PcieDevice) -> bool:
    """The link runs slower or narrower than the lesser of its two ends' capabilities (both known)."""
    if device.port_max_speed_gts is None or device.port_max_width is None or not device.width:
        return False
    if device.speed_gts is None or device.max_speed_gts is None or device.max_width is None:
        return False
    capable = min(device.max_speed_gts, device.port_max_speed_gts, device.port_target_speed_gts or math.inf)
    slower = device.speed_gts < capable
    return slower or device.width < min(device.max_width, device.port_max_width)


_TARGET_SPEEDS = {1: 2.5, 2: 5.0, 3: 8.0, 4: 16.0, 5: 32.0, 6: 64.0}
PCI_EXP_CAP = 0x10  # the PCI Express capability's id
LNKCTL2 = 0x30  # its Link Control 2 register's offset (capability version 2 on)


def target_speed_from_config(data: bytes) -> float | None:
    """A port's LnkCtl2 Target Link Speed (GT/s) from its config space (the sysfs `config` file's first
    256 bytes; a reader without root gets 64, and no capability list): the capability list from 0x34,
    the PCI Express capability (id 0x10, version 2 on), bits 3:0 of Link Control 2. None when not there."""
    if len(data) < 0x40 or not int.from_bytes(data[6:8], "little") & 0x10:  # status: capabilities list
        return None
    pointer, seen = data[0x34] & 0xFC, 0
    while pointer >= 0x40 and pointer + 2 <= len(data) and seen < 48:
        seen += 1
        if data[pointer] == PCI_EXP_CAP:
            if data[pointer + 2] & 0x0F < 2 or pointer + LNKCTL2 + 2 > len(data):
                return None
            return _TARGET_SPEEDS.get(int.from_bytes(data[pointer + LNKCTL2 : pointer + LNKCTL2 + 2], "little") & 0x0F)
        pointer = data[pointer + 1] & 0xFC
    return None


def worth_reporting(devices: list[PcieDevice]) -> list[PcieDevice]:
    """The functions with an AER error counted or a link below what both its ends can do, and their link
    partners (the port above, the functions below: either end of a link logs its errors, and the ticket
    names the part in the slot, not the port); the rest add nothing but bytes to every report (a host has
    dozens of healthy functions)."""
    listed = {d.bdf for d in devices if d.aer_correctable or d.aer_nonfatal or d.aer_fatal or below_both_ends(d)}
    partners = {d.parent for d in devices if d.bdf in listed and d.parent}
    partners |= {d.bdf for d in devices if d.parent in listed}
    return [d for d in devices if d.bdf in listed or d.bdf in partners]


def _int(text: str | None, base: int = 10) -> int | None:
    try:
        return int((text or "").strip(), base)
    except ValueError:
        return None


def _hex(text: str | None, digits: int) -> str | None:
    value = _int((text or "").strip().lower().removeprefix("0x"), 16)
    return None if value is None else f"{value:0{digits}x}"[-digits:]


def parse_aer_counters(text: str) -> Parsed[dict[str, int]]:
    """One aer_dev_* file: {'RxErr': 0, …, 'TOTAL_ERR_COR': 0}."""
    counters: dict[str, int] = {}
    problems: list[str] = []
    for line in text.splitlines():
        if not line.strip():
            continue
        m = _AER_LINE.match(line.strip())
        if m is None:
            problems.append(problem("not a 'Name count' line", line))
            continue
        counters[m.group("name")] = int(m.group("n"))
    return Parsed(counters, problems)


def _zero_total(text: str, total: str) -> int | None:
    """0 when the file's last line is 'TOTAL_ERR_… 0' (then no per-type line can be non-zero), else None."""
    last = text.rstrip().rsplit("\n", 1)[-1].split()
    return 0 if last == [total, "0"] else None


def _uevent(text: str | None) -> dict[str, str]:
    pairs = (line.split("=", 1) for line in (text or "").splitlines() if "=" in line)
    return {key.strip(): value.strip() for key, value in pairs}


@guarded(lambda: None)
def device_from_sysfs(
    bdf: str, files: Mapping[str, str | None], *, parent: str | None = None, slot: str | None = None
) -> Parsed[PcieDevice | None]:
    """One function from its sysfs attribute files (name -> text, None or absent when missing)."""
    problems: list[str] = []
    uevent = _uevent(files.get("uevent"))
    pci_id = uevent.get("PCI_ID", ":").split(":", 1)
    class_code = _hex(files.get("class"), 6) or _hex(uevent.get("PCI_CLASS"), 6)
    aer: dict[str, int | None] = {}
    types: dict[str, int] = {}
    for name, severity in AER_FILES.items():
        text = files.get(name)
        if text is None:
            aer[severity] = None
            continue
        total = AER_TOTALS[severity]
        if (zero := _zero_total(text, total)) is not None:
            aer[severity] = zero  # the common case: no error since boot, the per-type lines all 0
            continue
        parsed = parse_aer_counters(text)
        problems += [f"{bdf}/{name}: {p}" for p in parsed.problems]
        aer[severity] = parsed.value.get(total)
        for error, count in parsed.value.items():
            if error != total and count > 0 and len(types) < MAX_AER_TYPES:
                types[clip(f"{severity}:{error}", 40)] = count
    device = PcieDevice(
        bdf=normal_bdf(bdf) or bdf,
        parent=normal_bdf(parent) if parent else None,
        class_code=class_code,
        vendor=_hex(files.get("vendor"), 4) or _hex(pci_id[0], 4),
        device=_hex(files.get("device"), 4) or _hex(pci_id[1], 4),
        driver=clip(uevent["DRIVER"], 64) if uevent.get("DRIVER") else None,
        slot=clip(slot, 64) if slot else None,
        speed_gts=link_speed(files.get("current_link_speed")),
        max_speed_gts=link_speed(files.get("max_link_speed")),
        width=_int(files.get("current_link_width")),
        max_width=_int(files.get("max_link_width")),
        aer_correctable=aer["correctable"],
        aer_nonfatal=aer["nonfatal"],
        aer_fatal=aer["fatal"],
        aer_types=types,
    )
    return Parsed(device, problems)


_HEADER = re.compile(
    r"^(?P<bdf>(?:[0-9a-fA-F]{4}:)?[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]) (?P<cls>[^:\[]+?)"
    r"(?: \[(?P<code>[0-9a-fA-F]{4})\])?: (?P<name>.*)$"
)
_IDS = re.compile(r"\[(?P<vendor>[0-9a-fA-F]{4}):(?P<device>[0-9a-fA-F]{4})\]")  # lspci -nn
_LNK = re.compile(r"^\s*(?P<which>LnkCap|LnkSta|LnkCtl2):\s+(?P<rest>.*)$")
_TARGET = re.compile(r"Target Link Speed:\s*(?P<gts>\d{1,3}(?:\.\d{1,3})?)\s*GT/s")
_WIDTH = re.compile(r"Width x(?P<w>\d{1,2})")
_SECONDARY = re.compile(r"Bus: primary=[0-9a-fA-F]{2}, secondary=(?P<sec>[0-9a-fA-F]{2})")


@guarded(list)
def parse_lspci_vvv(text: str) -> Parsed[list[PcieDevice]]:
    """`lspci -vvv` (optionally -D) records -> functions with a PCIe link; the parent of a function on
    bus B is the bridge whose secondary bus is B, when that bridge is in the output."""
    records: list[dict[str, str]] = []
    problems: list[str] = []
    current: dict[str, str] | None = None
    for line in text.splitlines():
        if not line.strip():
            continue
        if (header := _HEADER.match(line)) is not None:
            current = {"bdf": header.group("bdf"), "cls": header.group("cls"), "name": header.group("name")}
            if header.group("code"):
                current["code"] = header.group("code").lower() + "00"
            if (ids := _IDS.search(header.group("name"))) is not None:
                current["vendor"], current["device"] = ids.group("vendor").lower(), ids.group("device").lower()
            records.append(current)
            continue
        if current is None:
            problems.append(problem("a line before the first device record", line))
            continue
        stripped = line.strip()
        if (lnk := _LNK.match(line)) is not None:
            current[lnk.group("which")] = lnk.group("rest")
        elif stripped.startswith("Physical Slot:"):
            current["slot"] = stripped.split(":", 1)[1].strip()
        elif stripped.startswith("Kernel driver in use:"):
            current["driver"] = stripped.split(":", 1)[1].strip()
        elif (sec := _SECONDARY.search(stripped)) is not None:
            current["secondary"] = sec.group("sec").lower()
    bridges: dict[str, str] = {}
    for record in records:
        bdf = normal_bdf(record["bdf"])
        if bdf is not None and "secondary" in record:
            bridges[f"{bdf[:4]}:{record['secondary']}"] = bdf
    devices: list[PcieDevice] = []
    for record in records:
        bdf = normal_bdf(record["bdf"])
        if bdf is None or "LnkCap" not in record or len(devices) >= MAX_PCIE_DEVICES:
            continue
        cap, sta = record["LnkCap"], record.get("LnkSta", "")
        cap_width, sta_width = _WIDTH.search(cap), _WIDTH.search(sta)
        target = _TARGET.search(record.get("LnkCtl2", ""))
        devices.append(
            PcieDevice(
                bdf=bdf,
                parent=bridges.get(bdf[:7]),
                class_code=record.get("code") or _LSPCI_CLASSES.get(record["cls"].strip().lower()),
                vendor=record.get("vendor"),
                device=record.get("device"),
                name=clip(f"{record['cls']}: {record['name']}", 200),
                driver=clip(record["driver"], 64) if record.get("driver") else None,
                slot=clip(record["slot"], 64) if record.get("slot") else None,
                speed_gts=link_speed(sta),
                max_speed_gts=link_speed(cap),
                width=int(sta_width.group("w")) if sta_width else None,
                max_width=int(cap_width.group("w")) if cap_width else None,
                target_speed_gts=float(target.group("gts")) if target else None,
            )
        )
    return Parsed(devices, problems)


@guarded(list)
def parse_pcie_sysfs(files: Mapping[str, str]) -> Parsed[list[PcieDevice]]:
    """A captured sysfs PCI tree (path -> text, paths under .../pci0000:00/...) -> its functions, each with its
    port (the directory above it) and port's capability: what the collector builds from a live tree, for
    snapshots and the fuzzers."""
    by_dir: dict[str, dict[str, str]] = {}
    for path, text in files.items():
        directory, _, name = path.rstrip("/").rpartition("/")
        by_dir.setdefault(directory, {})[name] = text
    devices: list[PcieDevice] = []
    problems: list[str] = []
    for directory in sorted(by_dir, key=lambda d: (d.count("/"), d)):
        parts = directory.split("/")
        if normal_bdf(parts[-1]) is None or len(devices) >= MAX_PCIE_DEVICES:
            continue
        parent = normal_bdf(parts[-2]) if len(parts) > 1 else None
        parsed = device_from_sysfs(parts[-1], by_dir[directory], parent=parent)
        problems += parsed.problems
        if parsed.value is not None:
            devices.append(parsed.value)
    return Parsed(with_ports(devices), problems)
