"""The simulated fleet's Redfish BMCs: what the agent of a host of a Redfish class reports.

A class with `bmc_protocol` "redfish" (checker/sim/hardware.py: the Dell R650 class compute-icx-2s and the
Supermicro class storage-epyc-1s) reports as an agent with FLEETFIX_AGENT_BMC_PROTOCOL=redfish does
(docs/agent.md, "Redfish"): its SEL entries as the vendor's Redfish log entries (checker/sim/redfish_logs.py,
through the agent's own parser), the ipmi `sel` and `sensors` collectors `unavailable`, and the `redfish`
section: the log service and its cursor, the PSUs and their redundancy every cycle, and once an hour (the
collector's inventory period) the DIMMs with their MemoryMetrics and the firmware inventory. The memory and
firmware documents are built as the vendor serves them and read by the agent's inventory parser
(checker/parsers/redfish_inventory.py), so the section has the shape a real collector gives it:

- Dell iDRAC9 keeps no MemoryMetrics counts, only HealthData.AlarmTrips (the R650 sample
  dell-idrac9-r650-memorymetrics-dimm-a1-alarmtrips-only-no-counts), and no MemoryLocation (only a
  CPUAffinity link, the parser's socket hint); its FirmwareInventory ids are Installed-ID-VERSION__FQDD.
- Supermicro serves MemoryLocation (0-based, the X10SDV sample) and MemoryMetrics LifeTime counts (the
  GB300 sample's resource), which keep counting across reboots where EDAC's counters restart.

The simulation does not run the collector's HTTP code: nothing here opens a socket.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from checker.parsers.redfish_inventory import parse_firmware, parse_memory
from checker.schemas import (
    CollectorRun,
    CollectorStatus,
    RedfishFirmware,
    RedfishLogService,
    RedfishMemoryModule,
    RedfishPsu,
    RedfishRedundancy,
    RedfishState,
    SelEntry,
    SelState,
)
from checker.sim import capacity as sim_capacity
from checker.sim.redfish_logs import as_redfish

if TYPE_CHECKING:
    from checker.sim.host import SimDimm, VirtualHost

INVENTORY_EVERY = dt.timedelta(hours=1)  # the collector re-reads Memory and FirmwareInventory hourly (docs/agent.md)
CE_LOG_EVERY = dt.timedelta(hours=1)  # ours: a BMC logs a DIMM's correctable errors at most once an hour here


@dataclass(frozen=True)
class Vendor:
    root_vendor: str  # the service root's Vendor
    redfish_version: str
    system: str
    log_entries: str
    entry_format: str


VENDORS: dict[str, Vendor] = {
    "dell": Vendor(
        "Dell",
        "1.11.0",
        "/redfish/v1/Systems/System.Embedded.1",
        "/redfish/v1/Managers/iDRAC.Embedded.1/LogServices/Sel/Entries",
        "SEL",
    ),
    "supermicro": Vendor(
        "Supermicro", "1.8.0", "/redfish/v1/Systems/1", "/redfish/v1/Systems/1/LogServices/Log1/Entries", "Event"
    ),
}


@dataclass
class RedfishSim:
    """What a simulated Redfish BMC and the agent's collector remember between cycles."""

    boot_id: str = ""  # the host's boot at the last look (a new one: EDAC counts from zero again)
    read_before: bool = False  # the collector has a cursor (its first read reports only the newest entries)
    inventory_at: dt.datetime | None = None  # when Memory and FirmwareInventory were last read
    ce_seen: dict[str, int] = field(default_factory=dict)  # DIMM serial -> EDAC CE count at the last look
    ce_lifetime: dict[str, int] = field(default_factory=dict)  # DIMM serial -> CEs since it was installed
    ce_logged: dict[str, tuple[dt.datetime, int]] = field(default_factory=dict)  # serial -> (when, lifetime) logged


def speaks_redfish(host: VirtualHost) -> bool:
    return host.hardware.bmc_protocol == "redfish"


def vendor_of(host: VirtualHost) -> Vendor:
    return VENDORS[host.hardware.bmc_vendor]


def service_of(host: VirtualHost) -> str:
    """The BMC's Redfish service as the agent's setting names it (the fleet's BMC naming is ours)."""
    return f"https://{host.hostname}-bmc.{host.datacenter}.example"


# -- each cycle ---------------------------------------------------------------------------------------


def observe(host: VirtualHost, now: dt.datetime) -> None:
    """Before a report: count the DIMMs' CEs into their lifetime counts, and log a DIMM whose count grew as the
    vendor's BMC does (Dell MEM0701, Supermicro '[ OEM ] Correctable ECC @DIMM..'), at most hourly."""
    rebooted = host.redfish.boot_id != host.boot_id  # EDAC's counters restarted with the boot
    host.redfish.boot_id = host.boot_id
    for dimm in host.dimms:
        count = int(dimm.ce_count)
        seen = 0 if rebooted else host.redfish.ce_seen.get(dimm.serial, 0)
        grown = max(0, count - seen)
        host.redfish.ce_seen[dimm.serial] = count
        lifetime = host.redfish.ce_lifetime.get(dimm.serial, 0) + grown
        host.redfish.ce_lifetime[dimm.serial] = lifetime
        at, logged = host.redfish.ce_logged.get(dimm.serial, (None, 0))
        if lifetime > logged and (at is None or now - at >= CE_LOG_EVERY):
            host.redfish.ce_logged[dimm.serial] = (now, lifetime)
            host.sel(now, "Memory #0x53", "Correctable ECC", extra=dimm.locator)


def sel_state(host: VirtualHost, entries: list[SelEntry]) -> SelState:
    """The SEL section a redfish collector fills: the entries as Redfish log entries, the service's count, and
    no fullness (a LogService says none: the collector leaves percent_used and overflow null)."""
    vendor = vendor_of(host)
    return SelState(
        entries=[as_redfish(e, host.hardware.bmc_vendor, vendor.log_entries) for e in entries],
        entry_count=host.sel_count,
        last_record_id=host.sel_next_id - 1 if host.sel_next_id > 1 else None,
    )


def redfish_state(host: VirtualHost, now: dt.datetime, sel: SelState) -> RedfishState:
    vendor = vendor_of(host)
    newest = max(sel.entries, key=lambda e: e.record_id, default=None)
    first_read = not host.redfish.read_before
    host.redfish.read_before = True
    state = RedfishState(
        service=service_of(host),
        redfish_version=vendor.redfish_version,
        vendor=vendor.root_vendor,
        log_services=[
            RedfishLogService(
                entries_uri=vendor.log_entries,
                entry_format=vendor.entry_format if sel.entries else None,
                entry_count=host.sel_count,
                read=len(sel.entries),
                newest_id=newest.entry_id if newest is not None else None,
                newest_created=newest.timestamp if newest is not None else None,
                first_read=first_read,
            )
        ],
        psus=psus(host),
        redundancy=redundancy(host),
    )
    inventory_at = host.redfish.inventory_at
    if inventory_at is None or now - inventory_at >= INVENTORY_EVERY:
        host.redfish.inventory_at = now
        state.memory = memory(host)
        state.firmware = firmware(host)
    return state


def collector_runs() -> dict[str, CollectorRun]:
    """bmc_protocol=redfish: the redfish collector reads the BMC, the ipmi ones stand aside (checker/cycle.py)."""
    aside = "bmc_protocol=redfish: the redfish collector reads the BMC"
    return {
        "redfish": CollectorRun(status=CollectorStatus.ok, duration_ms=850.0, source="redfish"),
        "sel": CollectorRun(status=CollectorStatus.unavailable, duration_ms=0.0, reason=aside),
        "sensors": CollectorRun(status=CollectorStatus.unavailable, duration_ms=0.0, reason=aside),
    }


# -- the resources ------------------------------------------------------------------------------------


def _health(ce: bool, ue: bool) -> str:
    return "Critical" if ue else "Warning" if ce else "OK"


def _dell_memory(host: VirtualHost, dimm: SimDimm) -> tuple[dict[str, Any], dict[str, Any]]:
    system = vendor_of(host).system
    uri = f"{system}/Memory/DIMM.Socket.{dimm.locator}"
    ce, ue = dimm.ce_count >= 1, dimm.ue_count > 0
    doc = {
        "@odata.id": uri,
        "Id": f"DIMM.Socket.{dimm.locator}",
        "DeviceLocator": f"DIMM {dimm.locator}",
        "MemoryDeviceType": dimm.mem_type,
        "MemoryType": "DRAM",
        "CapacityMiB": dimm.size_mb,
        "Manufacturer": "Samsung",
        "PartNumber": dimm.part_number,
        "SerialNumber": dimm.serial,
        "Status": {"Health": _health(ce, ue), "State": "Enabled"},
        "Oem": {"Dell": {"DellMemory": {"BankLabel": dimm.locator.rstrip("0123456789")}}},
        "Links": {
            "Oem": {"Dell": {"CPUAffinity": [{"@odata.id": f"{system}/Processors/CPU.Socket.{dimm.socket + 1}"}]}}
        },
    }
    trips = {"AddressParityError": False, "CorrectableECCError": ce, "SpareBlock": False, "Temperature": False}
    metrics = {
        "@odata.id": f"{uri}/MemoryMetrics",
        "HealthData": {"AlarmTrips": {**trips, "UncorrectableECCError": ue}},
    }
    return doc, metrics


def _supermicro_memory(host: VirtualHost, index: int, dimm: SimDimm) -> tuple[dict[str, Any], dict[str, Any]]:
    uri = f"{vendor_of(host).system}/Memory/{index + 1}"
    lifetime = host.redfish.ce_lifetime.get(dimm.serial, 0)
    doc = {
        "@odata.id": uri,
        "Id": str(index + 1),
        "DeviceLocator": dimm.locator,
        "MemoryLocation": {"Socket": dimm.socket, "MemoryController": dimm.imc, "Channel": dimm.channel, "Slot": 0},
        "MemoryDeviceType": dimm.mem_type,
        "MemoryType": "DRAM",
        "CapacityMiB": dimm.size_mb,
        "Manufacturer": "Samsung",
        "PartNumber": dimm.part_number,
        "SerialNumber": dimm.serial,
        "Status": {"Health": _health(lifetime > 0, dimm.ue_count > 0), "State": "Enabled"},
    }
    metrics = {
        "@odata.id": f"{uri}/MemoryMetrics",
        "LifeTime": {"CorrectableECCErrorCount": lifetime, "UncorrectableECCErrorCount": dimm.ue_count},
    }
    return doc, metrics


def memory(host: VirtualHost) -> list[RedfishMemoryModule]:
    modules = []
    for index, dimm in enumerate(sim_capacity.present_dimms(host)):  # a DIMM firmware disabled is not listed
        if host.hardware.bmc_vendor == "dell":
            doc, metrics = _dell_memory(host, dimm)
        else:
            doc, metrics = _supermicro_memory(host, index, dimm)
        module = parse_memory(doc, metrics).value
        if module is not None:
            modules.append(module)
    return modules


def firmware(host: VirtualHost) -> list[RedfishFirmware]:
    """BIOS and BMC as the vendor's FirmwareInventory lists them (the running images: a staged BIOS is not)."""
    base = "/redfish/v1/UpdateService/FirmwareInventory"
    docs: list[dict[str, Any]]
    if host.hardware.bmc_vendor == "dell":
        docs = [
            {"@odata.id": f"{base}/Installed-159-{host.bios_version}__BIOS.Setup.1-1", "Name": "BIOS"},
            {
                "@odata.id": f"{base}/Installed-25227-{host.bmc_firmware}__iDRAC.Embedded.1-1",
                "Name": "Integrated Dell Remote Access Controller",
            },
        ]
        for doc in docs:
            doc["Id"] = str(doc["@odata.id"]).rsplit("/", 1)[-1]
            doc["Updateable"] = True
    else:
        docs = [
            {
                "@odata.id": f"{base}/BIOS",
                "Id": "BIOS",
                "Name": "BIOS",
                "Version": host.bios_version,
                "Updateable": True,
            },
            {"@odata.id": f"{base}/BMC", "Id": "BMC", "Name": "BMC", "Version": host.bmc_firmware, "Updateable": True},
        ]
    return [f for f in (parse_firmware(doc).value for doc in docs) if f is not None]


def psus(host: VirtualHost) -> list[RedfishPsu]:
    """Two PSUs; a failed one Critical, one that lost its feed Critical with no input voltage (its PSU is fine)."""
    out = []
    for number in (1, 2):
        name = f"PS{number}"
        failed = any(f.kind == "psu_failure" and (f.variant or "PS2") == name for f in host.faults)
        unfed = any(f.kind == "psu_input_lost" and (f.variant or "PS2") == name for f in host.faults)
        out.append(
            RedfishPsu(
                member_id=str(number - 1),
                name=f"PS{number} Status" if host.hardware.bmc_vendor == "dell" else f"Power Supply {number}",
                present=True,
                health="Critical" if failed or unfed else "OK",
                state="Enabled",
                capacity_watts=1400.0 if host.hardware.bmc_vendor == "dell" else 1200.0,
                line_input_voltage=None if unfed else 230.0,
            )
        )
    return out


def redundancy(host: VirtualHost) -> list[RedfishRedundancy]:
    """The Power resource's PSU redundancy group (the fans' is Thermal's: not simulated, to keep reports small)."""
    lost = any(f.kind in ("psu_failure", "psu_input_lost") for f in host.faults)
    health = "Critical" if lost else "OK"
    return [
        RedfishRedundancy(
            name="PSU Redundancy", of="psu", mode="N+m", health=health, state="Enabled", min_needed=1, members=2
        )
    ]
