"""The CXL RAS section of the report: new rows of rasdaemon's cxl_* tables (poison list entries,
General Media and DRAM event records, CXL RAS-capability AER errors), one record per row, and the
CXL memory devices sysfs lists (/sys/bus/cxl/devices/memN) with their serials. Filled by
checker/collectors/cxl.py.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from checker.report_types import Address, Int64, Key, Model, NonNegativeInt

MAX_CXL_EVENTS = 500
MAX_CXL_DEVICES = 64
Text = Annotated[str, Field(max_length=128)]
CxlTable = Literal[
    "cxl_poison_event", "cxl_general_media_event", "cxl_dram_event", "cxl_aer_ue_event", "cxl_aer_ce_event"
]


class CxlMemdev(Model):
    """A CXL memory device as /sys/bus/cxl/devices/memN shows it."""

    memdev: Text = Field(description="The kernel's name: mem0.")
    serial: NonNegativeInt | None = Field(None, description="The device serial number (PCIe DSN), `serial`.")
    firmware: Text | None = Field(None, description="`firmware_version`.")
    ram_bytes: NonNegativeInt | None = Field(None, description="`ram/size`: volatile capacity.")


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


class CxlRasState(Model):
    devices: list[CxlMemdev] = Field(default_factory=list, max_length=MAX_CXL_DEVICES)
    events: list[CxlEvent] = Field(default_factory=list, max_length=MAX_CXL_EVENTS)
    last_ids: dict[Key, Int64] = Field(default_factory=dict, max_length=8, description="Highest id read per table.")
    truncated: NonNegativeInt = Field(0, description="Newer rows than a report carries (the oldest were left out).")
    first_sight: bool = Field(False, description="The agent's first read: only the cursors, the rows are history.")
