"""Redfish inventory: Systems/{id}/Memory/{id} with its MemoryMetrics, and UpdateService/FirmwareInventory.

Memory: the location is MemoryLocation's Socket/MemoryController/Channel/Slot as served; BMCs count
from 0 (Supermicro X10) or 1 (HPE iLO 5), so `location_base` says which where the module shows it (a 0
anywhere: 0-based; socket and slot both named in DeviceLocator 'PROC 1 DIMM 1': 1-based), else null.
Dell iDRAC serves no MemoryLocation: its CPUAffinity link gives the socket as a hint only. MemoryMetrics:
CurrentPeriod/LifeTime CorrectableECCErrorCount where the BMC keeps them (an independent count when
EDAC under-reports); where only HealthData.AlarmTrips are served (Dell) the flags are kept and the
counts stay null — never "0 errors". A GPU's HBM (NVIDIA HGX: .../Memory/GPU_0_DRAM_0, Oem.Nvidia row
remapping) is `gpu_hbm`, not a DIMM.

Firmware: Dell's member ids encode state-componentId-version__FQDD ('Installed-159-1.2.4__BIOS.Setup.1-1',
'Previous-...' the rollback image); the component kind comes from the FQDD or the Name.
"""

from __future__ import annotations

import re
from typing import Any, Literal

from checker.parsers.common import Parsed, clip, guarded, problem
from checker.parsers.redfish_common import link, obj, odata_id, status, text, whole
from checker.schemas import RedfishFirmware, RedfishMemoryModule

Component = Literal["bios", "bmc", "nic", "disk", "raid", "psu", "cpld", "other"]
MAX_ALARM_TRIPS = 16
_GPU_MEMORY = re.compile(r"\bGPU[_\s-]?\d+[_\s-]?(?:DRAM|HBM)|HBM", re.IGNORECASE)
_SLOTS: dict[str, Literal["installed", "current", "previous"]] = {
    "Installed": "installed",
    "Current": "current",
    "Previous": "previous",
}
_DELL_ID = re.compile(r"^(Installed|Current|Previous)-(\d+)-(.+?)__(.+)$")
_COMPONENT_PATTERNS: tuple[tuple[Component, str], ...] = (
    ("bios", r"\bBIOS\b|UEFI|System ROM"),
    ("bmc", r"iDRAC|\biLO\b|\bBMC\b|Baseboard Management|XClarity Controller|\bXCC\b"),
    ("nic", r"\bNIC\b|Ethernet|Network|\bFC\b|Fibre|\bHCA\b|ConnectX|Adapter"),
    ("disk", r"\bDisk\b|\bDrive\b|NVMe|\bSSD\b|\bHDD\b"),
    ("raid", r"RAID|PERC|Smart Array|Storage Controller|Backplane|\bAHCI\b"),
    ("psu", r"\bPSU\b|Power Supply"),
    ("cpld", r"CPLD|FPGA"),
)
_COMPONENTS = tuple((kind, re.compile(pattern, re.IGNORECASE)) for kind, pattern in _COMPONENT_PATTERNS)


def memory_kind(doc: dict[str, Any], uri: str) -> Literal["dimm", "gpu_hbm", "other"]:
    device_type = text(doc, "MemoryDeviceType", 32) or ""
    if device_type.upper().startswith("HBM") or _GPU_MEMORY.search(uri) or "Nvidia" in obj(doc.get("Oem")):
        return "gpu_hbm"
    memory_type = text(doc, "MemoryType", 32)
    if device_type.upper().startswith(("DDR", "LPDDR")) and memory_type in (None, "DRAM"):
        return "dimm"
    locator = text(doc, "DeviceLocator", 128) or ""
    return "dimm" if memory_type in (None, "DRAM") and "DIMM" in locator.upper() else "other"


def _location_base(doc: dict[str, Any], socket: int | None, slot: int | None) -> Literal[0, 1] | None:
    if socket == 0 or slot == 0:
        return 0
    locator = text(doc, "DeviceLocator", 128) or ""
    numbers = [int(n) for n in re.findall(r"\d{1,4}", locator)]
    if socket is not None and slot is not None and numbers[:2] == [socket, slot]:
        return 1
    return None


def _counts(metrics: dict[str, Any]) -> dict[str, int | None]:
    current, lifetime = obj(metrics.get("CurrentPeriod")), obj(metrics.get("LifeTime"))
    return {
        "ce_current_period": whole(current, "CorrectableECCErrorCount"),
        "ue_current_period": whole(current, "UncorrectableECCErrorCount"),
        "ce_lifetime": whole(lifetime, "CorrectableECCErrorCount"),
        "ue_lifetime": whole(lifetime, "UncorrectableECCErrorCount"),
    }


def _alarm_trips(metrics: dict[str, Any]) -> dict[str, bool]:
    trips = obj(obj(metrics.get("HealthData")).get("AlarmTrips"))
    return {clip(k, 128): v for k, v in list(trips.items())[:MAX_ALARM_TRIPS] if isinstance(v, bool)}


@guarded(lambda: None)
def parse_memory(doc: object, metrics: object = None) -> Parsed[RedfishMemoryModule | None]:
    """A Memory resource and, when read, its MemoryMetrics -> one module record."""
    memory = obj(doc)
    uri = odata_id(memory)
    module_id = text(memory, "Id", 128)
    if uri is None or module_id is None:
        return Parsed(None, [problem("a Memory resource without @odata.id and Id", repr(doc)[:200])])
    problems: list[str] = []
    where = obj(memory.get("MemoryLocation"))
    socket, slot = whole(where, "Socket"), whole(where, "Slot")
    location_source: Literal["memory_location", "oem_hint"] | None = "memory_location" if where else None
    dell = obj(obj(memory.get("Oem")).get("Dell"))
    if not where:
        affinity = obj(obj(memory.get("Links")).get("Oem")).get("Dell")
        cpus = obj(affinity).get("CPUAffinity")
        first = text(obj(cpus[0]), "@odata.id", 512) if isinstance(cpus, list) and cpus else None
        if first and (m := re.search(r"CPU\.Socket\.(\d{1,3})$", first)) is not None:
            socket, location_source = int(m.group(1)), "oem_hint"
    health, state = status(memory)
    values: dict[str, Any] = {}
    read = metrics is not None
    if read:
        metric_doc = obj(metrics)
        if not metric_doc:
            problems.append(problem(f"{module_id}: MemoryMetrics is not a JSON object", repr(metrics)[:200]))
        values = {**_counts(metric_doc), "alarm_trips": _alarm_trips(metric_doc)}
    module = RedfishMemoryModule(
        uri=uri,
        id=module_id,
        kind=memory_kind(memory, uri),
        device_locator=text(memory, "DeviceLocator", 128),
        socket=socket,
        memory_controller=whole(where, "MemoryController"),
        channel=whole(where, "Channel"),
        slot=slot,
        location_source=location_source,
        location_base=_location_base(memory, socket, slot) if location_source == "memory_location" else None,
        bank_label=text(obj(dell.get("DellMemory")), "BankLabel", 32),
        manufacturer=text(memory, "Manufacturer", 128),
        part_number=text(memory, "PartNumber", 128),
        serial=text(memory, "SerialNumber", 128),
        capacity_mib=whole(memory, "CapacityMiB"),
        device_type=text(memory, "MemoryDeviceType", 32),
        health=health,
        state=state,
        metrics_read=read and bool(obj(metrics)),
        **values,
    )
    return Parsed(module, problems)


@guarded(lambda: None)
def parse_memory_metrics_alone(doc: object) -> Parsed[RedfishMemoryModule | None]:
    """A MemoryMetrics resource read without its Memory (the NVIDIA HGX sample): the module is named by the
    metrics' own URI (…/Memory/{id}/MemoryMetrics)."""
    metrics = obj(doc)
    uri = odata_id(metrics)
    if uri is None:
        return Parsed(None, [problem("a MemoryMetrics resource without @odata.id", repr(doc)[:200])])
    memory_uri = uri.rsplit("/MemoryMetrics", 1)[0]
    module_id = memory_uri.rstrip("/").rsplit("/", 1)[-1] or "?"
    kind: Literal["dimm", "gpu_hbm", "other"] = (
        "gpu_hbm" if _GPU_MEMORY.search(memory_uri) or "Nvidia" in obj(metrics.get("Oem")) else "other"
    )
    module = RedfishMemoryModule(
        uri=clip(memory_uri, 512),
        id=clip(module_id, 128),
        kind=kind,
        metrics_read=True,
        alarm_trips=_alarm_trips(metrics),
        **_counts(metrics),
    )
    return Parsed(module, [])


def component_of(*texts: str | None) -> Component:
    for kind, pattern in _COMPONENTS:
        if any(t and pattern.search(t) for t in texts):
            return kind
    return "other"


@guarded(lambda: None)
def parse_firmware(doc: object) -> Parsed[RedfishFirmware | None]:
    """A SoftwareInventory member -> component, version, and (Dell) which image slot it is."""
    software = obj(doc)
    member_id = text(software, "Id", 256)
    if member_id is None:
        return Parsed(None, [problem("a SoftwareInventory without an Id", repr(doc)[:200])])
    version = text(software, "Version", 128)
    slot: Literal["installed", "current", "previous"] | None = None
    device = None
    if (m := _DELL_ID.match(member_id)) is not None:
        slot = _SLOTS[m.group(1)]
        device = clip(m.group(4), 256)
        version = version or m.group(3)
    if version is not None and version.lower() in ("notavailable", "n/a", "unknown"):
        version = None
    name = text(software, "Name", 256)
    health, _state = status(software)
    updateable = software.get("Updateable")
    firmware = RedfishFirmware(
        id=member_id,
        name=name,
        component=component_of(device, name, member_id),
        version=version,
        slot=slot,
        device=device,
        updateable=updateable if isinstance(updateable, bool) else None,
        health=health,
    )
    return Parsed(firmware, [])


@guarded(list)
def parse_collection_links(doc: object) -> Parsed[list[str]]:
    """A collection's member links (Systems, Chassis, Memory, FirmwareInventory, LogServices ...)."""
    collection = obj(doc)
    members = collection.get("Members")
    if not isinstance(members, list):
        return Parsed([], [problem("a collection without a Members list", repr(sorted(collection))[:200])])
    links = [uri for m in members if (uri := link({"m": m}, "m")) is not None]
    problems = [f"{len(members) - len(links)} members without an @odata.id"] if len(links) < len(members) else []
    return Parsed(links, problems)


def firmware_from_collection_id(uri: str) -> RedfishFirmware | None:
    """What a Dell FirmwareInventory link alone says (its id encodes the version): used when the member
    itself could not be read within the cycle's budget."""
    member_id = uri.rstrip("/").rsplit("/", 1)[-1]
    return parse_firmware({"Id": member_id}).value
