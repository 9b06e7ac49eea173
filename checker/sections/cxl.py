"""The CXL RAS section of the report: new rows of rasdaemon's cxl_* tables (poison list entries,
General Media, DRAM and Memory Module event records, CXL RAS-capability AER errors), one record per
row, and the CXL memory devices sysfs lists (/sys/bus/cxl/devices/memN) with their serials and PCI
functions. Filled by checker/collectors/cxl.py.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from checker.report_types import Address, Int64, Key, Model, NonNegativeInt

MAX_CXL_EVENTS = 500
MAX_CXL_DEVICES = 64
Text = Annotated[str, Field(max_length=128)]
CxlTable = Literal[
    "cxl_poison_event",
    "cxl_general_media_event",
    "cxl_dram_event",
    "cxl_aer_ue_event",
    "cxl_aer_ce_event",
    "cxl_memory_module_event",
]


class CxlMemdev(Model):
    """A CXL memory device as /sys/bus/cxl/devices/memN shows it."""

    memdev: Text = Field(description="The kernel's name: mem0.")
    serial: NonNegativeInt | None = Field(None, description="The device serial number (PCIe DSN), `serial`.")
    firmware: Text | None = Field(None, description="`firmware_version`.")
    ram_bytes: NonNegativeInt | None = Field(None, description="`ram/size`: volatile capacity.")
    host: Text | None = Field(
        None, description="Its PCI function, 0000:35:00.0: the memdev's parent in sysfs (what the kernel log names)."
    )
    ports: list[Text] = Field(
        default_factory=list,
        max_length=8,
        description="The PCI functions above it in sysfs, nearest first (its root or switch downstream port, "
        "then any switch upstream port and the ports above that): where a port's error reaches it.",
    )


class CxlHealth(Model):
    """A Memory Module Event Record's Device Health Information (CXL 3.1 8.2.9.2.1.3, Get Health Info's
    payload), as rasdaemon's cxl_memory_module_event row stores it; the statuses decoded by name."""

    event_type: Text = Field(description="Health Status Change, Media Status Change, Life Used Change …")
    health_status: list[Text] = Field(
        default_factory=list,
        max_length=8,
        description="Maintenance Needed, Performance Degraded, Hardware Replacement Needed, Memory Capacity "
        "Degraded; a bit the table does not name as its value (0x10).",
    )
    media_status: Text | None = Field(None, description="Normal, Not Ready, All Data Lost …")
    life_used_status: Text | None = Field(None, description="Additional Status bits 1:0: Normal, Warning, Critical.")
    temperature_status: Text | None = Field(None, description="Additional Status bits 3:2: Normal, Warning, Critical.")
    corrected_volatile_status: Text | None = Field(None, description="Additional Status bit 4: Normal, Warning.")
    corrected_persistent_status: Text | None = Field(None, description="Additional Status bit 5: Normal, Warning.")
    life_used_percent: NonNegativeInt | None = Field(None, description="Life Used, 0-100 (FFh: not implemented).")
    temperature_c: Int64 | None = Field(None, description="Device Temperature, degrees C (FFFFh: not implemented).")
    dirty_shutdowns: NonNegativeInt | None = Field(None, description="Dirty Shutdown Count.")
    corrected_volatile_errors: NonNegativeInt | None = Field(None, description="Corrected Volatile Error Count.")
    corrected_persistent_errors: NonNegativeInt | None = Field(None, description="Corrected Persistent Error Count.")
    event_sub_type: Text | None = Field(
        None, description="Device Event Sub-Type (CXL 3.1): Invalid Config Data, Unsupported Memory Media FRU …"
    )
    component_id: Text | None = Field(
        None, description="Component Identifier (hex, or its text when printable): with a replacement request, the FRU."
    )


class CxlEvent(Model):
    """One row of a rasdaemon cxl_* table, decoded (CXL 3.1 event records; the kernel's trace events)."""

    table: CxlTable
    id: Int64 = Field(description="The row id: the incremental cursor of its table.")
    timestamp: Text | None = Field(None, description="rasdaemon's timestamp text, as stored.")
    memdev: Text = Field(description="The memory device: mem0.")
    host: Text | None = Field(None, description="Its PCI function (the memdev's parent): 0000:35:00.0.")
    serial: NonNegativeInt | None = None
    log: Text | None = Field(None, description="Event log: Informational, Warning, Failure, Fatal.")
    uncorrectable: bool = Field(description="The data was lost: an uncorrectable media error, poison, an AER UE.")
    kind: Text = Field(description="What the record says: 'ECC Error', 'Poison List', 'Mem Data ECC' …")
    transaction: Text | None = Field(None, description="Host Read, Internal Media Scrub …")
    threshold: bool = Field(
        False, description="Memory Event Descriptor bit 1: a corrected-error threshold was crossed."
    )
    flags: list[Text] = Field(
        default_factory=list,
        max_length=8,
        description="Event Record Flags: 'Maintenance Needed' …; a poison record's: More, Overflow, Scanning.",
    )
    dpa: Address | None = Field(None, description="Device physical address.")
    hpa: Address | None = Field(None, description="Host physical address (when the kernel maps the DPA to a region).")
    region: Text | None = None
    channel: NonNegativeInt | None = None
    rank: NonNegativeInt | None = None
    source: Text | None = Field(None, description="Poison source: Unknown, External, Internal, Injected, Vendor.")
    errors: list[Text] = Field(default_factory=list, max_length=32, description="AER status bits, by name.")
    health: CxlHealth | None = Field(None, description="A Memory Module record's device health (its table only).")


class CxlRasState(Model):
    devices: list[CxlMemdev] = Field(default_factory=list, max_length=MAX_CXL_DEVICES)
    events: list[CxlEvent] = Field(default_factory=list, max_length=MAX_CXL_EVENTS)
    last_ids: dict[Key, Int64] = Field(default_factory=dict, max_length=8, description="Highest id read per table.")
    truncated: NonNegativeInt = Field(0, description="Newer rows than a report carries (the oldest were left out).")
    first_sight: bool = Field(False, description="The agent's first read: only the cursors, the rows are history.")
    rasdaemon: bool = Field(
        True,
        description="rasdaemon records CXL events here; false: no cxl_* table (or no database), the devices are"
        " listed and the kernel log is the only record of their errors.",
    )
