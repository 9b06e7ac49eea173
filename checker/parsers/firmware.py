"""Device firmware: `ethtool -i IFACE` (NIC driver and firmware) and `fwupdmgr get-devices --json`."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from checker.parsers.common import Parsed, clip, guarded, problem
from checker.schemas import NicFirmware

_NOT_SET = {"", "n/a", "na", "none", "unknown"}


def _value(text: str | None, limit: int) -> str | None:
    if text is None or text.strip().lower() in _NOT_SET:
        return None
    return clip(text.strip(), limit)


@guarded(lambda: None)
def parse_ethtool_driver(text: str, interface: str) -> Parsed[NicFirmware | None]:
    """`ethtool -i IFACE`: driver, version, firmware-version, bus-info ('N/A' and empty are None)."""
    fields: dict[str, str] = {}
    for line in text.splitlines():
        if line.startswith("#"):
            continue
        key, sep, value = line.partition(":")
        if sep:
            fields.setdefault(key.strip(), value.strip())
    if "driver" not in fields:
        return Parsed(None, [problem("no 'driver:' line in ethtool -i output", text)])
    return Parsed(
        NicFirmware(
            interface=clip(interface, 64),
            driver=_value(fields.get("driver"), 64),
            driver_version=_value(fields.get("version"), 64),
            firmware=_value(fields.get("firmware-version"), 128),
            bus_info=_value(fields.get("bus-info"), 64),
        ),
        [],
    )


@dataclass(frozen=True)
class FwupdDevice:
    """A device as fwupd sees it; version_raw is set for hex-formatted versions (CPU microcode)."""

    name: str
    device_id: str
    plugin: str
    vendor: str | None
    version: str | None
    version_format: str | None
    version_raw: int | None
    flags: tuple[str, ...] = field(default_factory=tuple)

    @property
    def updatable(self) -> bool:
        return "updatable" in self.flags


def _str(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


@guarded(list)
def parse_fwupd_devices(text: str) -> Parsed[list[FwupdDevice]]:
    """`fwupdmgr get-devices --json`: each device's plugin, version and flags (releases are ignored)."""
    try:
        doc = json.loads(text)
    except (ValueError, RecursionError):
        return Parsed([], [problem("fwupdmgr output is not JSON", text)])
    devices = doc.get("Devices") if isinstance(doc, dict) else None
    if not isinstance(devices, list):
        return Parsed([], [problem("no 'Devices' list in fwupdmgr output", text)])
    found: list[FwupdDevice] = []
    problems: list[str] = []
    for item in devices:
        if not isinstance(item, dict) or _str(item.get("Name")) is None:
            problems.append(problem("fwupd device without a Name", json.dumps(item)[:400]))
            continue
        raw = item.get("VersionRaw")
        flags = item.get("Flags")
        found.append(
            FwupdDevice(
                name=str(item["Name"]),
                device_id=_str(item.get("DeviceId")) or "",
                plugin=_str(item.get("Plugin")) or "",
                vendor=_str(item.get("Vendor")),
                version=_str(item.get("Version")),
                version_format=_str(item.get("VersionFormat")),
                version_raw=raw if isinstance(raw, int) and not isinstance(raw, bool) and raw >= 0 else None,
                flags=tuple(f for f in flags if isinstance(f, str)) if isinstance(flags, list) else (),
            )
        )
    return Parsed(found, problems)


def cpu_microcode_from_fwupd(devices: list[FwupdDevice]) -> int | None:
    """The microcode revision fwupd's cpu plugin reports (VersionRaw, or the hex Version)."""
    for device in devices:
        if device.plugin != "cpu":
            continue
        if device.version_raw is not None:
            return device.version_raw
        if device.version and device.version.lower().startswith("0x"):
            try:
                return int(device.version, 16)
            except ValueError:
                return None
    return None
