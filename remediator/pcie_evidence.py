"""The evidence of a `pcie_device` ticket: which function (BDF), in which slot, what it is (class,
vendor:device, driver), the port above it, its link and its AER counters; and the counters' history.

Read from the report's `pcie` section (checker/collectors/pcie.py). A host without that section (an
older agent, a container) still gets the BDF, and the vendor:device the kernel's AER record printed
('device [8086:7f44]'), from the signals' lines. A port (a bridge) as the subject is ambiguous: either end
of a link logs its errors, so the ticket lists `candidates`, the device in the slot below first. The GPU
and network sections name the same card by its BDF: a GPU's board serial, a NIC's interfaces, an NVMe
drive's disk and serial (`related_part`; an NVMe's detections of either name go on one open ticket:
remediator.linked_parts).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from checker.parsers.pcie import device_kind, normal_bdf
from remediator.models import Signal

_AER_DEVICE = re.compile(r"device \[(?P<vendor>[0-9a-fA-F]{4}):(?P<device>[0-9a-fA-F]{4})\]")


def _devices(observations: dict[str, Any]) -> dict[str, dict[str, Any]]:
    devices = (observations.get("pcie") or {}).get("devices") or []
    return {str(d.get("bdf")): d for d in devices if isinstance(d, dict)}


def _from_lines(recent: Sequence[Signal]) -> str | None:
    for signal in recent:
        for line in (signal.detail or {}).get("lines") or []:
            if (m := _AER_DEVICE.search(str(line))) is not None:
                return f"{m.group('vendor').lower()}:{m.group('device').lower()}"
    return None


def _same_bdf(text: object, bdf: str) -> bool:
    """nvidia-smi's '00000000:07:00.0' and ethtool's '0000:07:00.0' against '0000:07:00.0'."""
    value = str(text or "").strip().lower()
    return bool(value) and (normal_bdf(value[-12:]) == bdf)


def related(bdf: str, observations: dict[str, Any]) -> dict[str, Any] | None:
    """The same card as the GPU or NIC section names it: its serial, and the part a GPU or NIC ticket for
    it would name (their dedup keys differ from this one's: the ticket says so)."""
    for gpu in (observations.get("gpu") or {}).get("gpus") or []:
        if isinstance(gpu, dict) and _same_bdf(gpu.get("bdf"), bdf):
            return {
                "part_type": "gpu",
                "index": gpu.get("index"),
                "serial": gpu.get("serial"),
                "model": gpu.get("product"),
                "uuid": gpu.get("uuid"),
            }
    ports = [p for p in (observations.get("network") or {}).get("ports") or [] if isinstance(p, dict)]
    names = sorted(str(p.get("interface")) for p in ports if _same_bdf(p.get("bus_info"), bdf))
    if names:
        return {"part_type": "nic", "interfaces": names}
    for disk in observations.get("disks") or []:  # an NVMe drive: its disk tickets share one (linked_parts)
        if isinstance(disk, dict) and disk.get("pci_address") == bdf:
            return {
                "part_type": "disk",
                "device": disk.get("device"),
                "serial": disk.get("serial"),
                "model": disk.get("model"),
            }
    return None


def _candidates(device: dict[str, Any], devices: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """A port's errors are its link's: the device in the slot below it first, then the port and the board."""
    bdf = str(device.get("bdf"))
    below = sorted((d for d in devices.values() if d.get("parent") == bdf), key=lambda d: str(d.get("bdf")))
    found: list[dict[str, Any]] = [
        {
            "bdf": child.get("bdf"),
            "slot": child.get("slot"),
            "device": device_kind(child.get("class_code")),
            "vendor_device": f"{child.get('vendor')}:{child.get('device')}" if child.get("vendor") else None,
        }
        for child in below
    ]
    if not found:
        found.append({"bdf": None, "what": "the card in the slot below this port (not listed in the report)"})
    found.append({"bdf": bdf, "what": "the port itself: the riser, the cable or the board's slot"})
    return found


def pcie_part(subject: str, observations: dict[str, Any], recent: Sequence[Signal]) -> dict[str, Any]:
    """What and where the function is, with `vendor`, `model` and `serial` named as for every part; for a
    port (a bridge, class 06xx), the parts of its link as `candidates`: either end logs the link's errors."""
    bdf = normal_bdf(subject) or subject
    devices = _devices(observations)
    device = devices.get(bdf)
    if device is None:
        ids = _from_lines(recent)
        has_section = observations.get("pcie") is not None
        other = related(bdf, observations)
        return {
            "bdf": bdf,
            "slot": None,
            "device": None,
            "vendor": ids.split(":")[0] if ids else None,
            "model": ids,
            "serial": (other or {}).get("serial"),
            "related_part": other,
            "note": "not listed in the report's PCIe section (no counted error): the slot and class are not known"
            if has_section
            else "the host's report has no PCIe section: the slot and class are not known",
        }
    port = devices.get(str(device.get("parent"))) if device.get("parent") else None
    slot, slot_of = device.get("slot"), "device"
    if not slot and port is not None and port.get("slot"):
        slot, slot_of = port.get("slot"), "port above it"
    ids = f"{device['vendor']}:{device['device']}" if device.get("vendor") and device.get("device") else None
    other = related(bdf, observations)
    part: dict[str, Any] = {
        "bdf": bdf,
        "slot": slot,
        "slot_of": slot_of if slot else None,
        "device": device_kind(device.get("class_code")),
        "class_code": device.get("class_code"),
        "vendor": device.get("vendor"),
        "model": device.get("name") or (other or {}).get("model") or ids or _from_lines(recent),
        "vendor_device": ids,
        # the Device Serial Number capability is not in sysfs; the GPU section's board serial where it is one
        "serial": (other or {}).get("serial"),
        "related_part": other,
        "driver": device.get("driver"),
        "port": device.get("parent"),
        "link": {
            "speed_gts": device.get("speed_gts"),
            "width": device.get("width"),
            "max_speed_gts": device.get("max_speed_gts"),
            "max_width": device.get("max_width"),
            "port_max_speed_gts": device.get("port_max_speed_gts") or (port.get("max_speed_gts") if port else None),
            "port_max_width": device.get("port_max_width") or (port.get("max_width") if port else None),
            "port_target_speed_gts": device.get("port_target_speed_gts"),
        },
        "aer": {
            "correctable": device.get("aer_correctable"),
            "nonfatal": device.get("aer_nonfatal"),
            "fatal": device.get("aer_fatal"),
            "types": device.get("aer_types") or {},
        },
    }
    if str(device.get("class_code") or "").startswith("06"):
        part["ambiguous"] = True
        part["candidates"] = _candidates(device, devices)
    return part


def link_ends(subject: str, observations: dict[str, Any]) -> set[str]:
    """The BDFs whose AER records belong to a ticket on `subject`: the function and the port above it (an
    AER count is keyed on the link's downstream function, and the port logs the link's errors too)."""
    bdf = normal_bdf(subject) or subject
    device = _devices(observations).get(bdf)
    parent = str(device.get("parent")) if device is not None and device.get("parent") else None
    return {bdf, parent} if parent else {bdf}


def pcie_history(subject: str, observations: dict[str, Any]) -> dict[str, Any] | None:
    """The function's link and AER totals in one stored report."""
    device = _devices(observations).get(normal_bdf(subject) or subject)
    if device is None:
        return None
    names = ("speed_gts", "width", "aer_correctable", "aer_nonfatal", "aer_fatal")
    return {name: device.get(name) for name in names}
