"""What the deriver keeps per host between reports: cursors, previous counters, event buckets.

The service stores it as JSON and hands it back with the next report. It is validated on the
way in (a section that does not fit is dropped and rebuilt from the next report, never an
error) and every section is capped, so it stays a few KB whatever a host sends.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field, ValidationError, model_validator

from remediator.derive.capacity import CapacityMemory
from remediator.derive.cxl import CxlMemory
from remediator.derive.edac_counted import EdacSample
from remediator.derive.heat import HeatMemory
from remediator.derive.network import NetMemory
from remediator.derive.pcie import PcieMemory
from remediator.derive.redfish import RedfishMemory
from remediator.derive.xid_memory import XidMemory

MEMORY_VERSION: Literal[1] = 1

# (bucket index, events in it); bucket index = epoch seconds // (window / BUCKETS)
Bucket = tuple[int, int]
# the same with its first and last event's own time (epoch seconds), where the source dates its events: a
# repair's resolve within the bucket is then judged by them (remediator.recount); memory kept before holds Buckets
TimedBucket = tuple[int, int, int, int]
Span = tuple[int, int, int]  # (bucket index, first, last event's seconds from its start) beside a Bucket
MAX_TIMED = 24  # kernel counts kept with their events' times: a kind's, and up to 16 devices' (MAX_DEVICES)
# previous reallocated, pending, grown-defect and media-error counts of one disk
DiskCounters = tuple[int | None, int | None, int | None, int | None]


class _Section(BaseModel):
    model_config = ConfigDict(extra="ignore")


class KernelMemory(_Section):
    boot: str | None = Field(None, description="Boot id the sequence numbers belong to.")
    seq: int | None = Field(None, description="Highest /dev/kmsg sequence number counted.")
    counts: dict[str, list[Bucket]] = Field(default_factory=dict, description="Event kind -> recent buckets.")
    devices: dict[str, dict[str, list[Bucket]]] = Field(
        default_factory=dict, description="Event kind -> device (interface, PCI address) -> recent buckets."
    )
    times: dict[str, list[Span]] = Field(
        default_factory=dict,
        max_length=MAX_TIMED,
        description="Kind, or 'kind device', of the counts that carry a span (remediator.derive.kernel.COUNTED) -> "
        "(bucket index, first, last event's seconds from the bucket's start) per bucket.",
    )


ClockBounds = tuple[float, float]  # seconds a protocol's entry times run ahead of UTC: at least, at most


class SelCursor(_Section):
    last: int | None = None
    count: int | None = None
    newest: AwareDatetime | None = Field(None, description="The newest entry time it listed, by its own clock.")
    tail: list[str] = Field(default_factory=list, max_length=32, description="Its entries within SKEW_S of that.")
    clock: ClockBounds | None = Field(None, description="Its clock's offset from UTC as learned (SelMemory.clock).")


class SelMemory(_Section):
    source: Literal["ipmi", "redfish"] | None = Field(
        None, description="The source (SelState.source) whose record ids `last` and `count` are (null: not said)."
    )
    cursors: dict[Literal["ipmi", "redfish"], SelCursor] = Field(
        default_factory=dict,
        max_length=2,
        description="The other source's cursor, kept for when the host reads its log that way again "
        "(remediator/derive/sel.py: the second review of the Redfish rules, finding 6).",
    )
    last: int | None = Field(None, description="Highest SEL record id seen.")
    count: int | None = Field(None, description="The BMC's entry count at that time.")
    newest: AwareDatetime | None = Field(
        None, description="The newest entry time seen: what a restarted record-id sequence is new after."
    )
    tail: list[str] = Field(
        default_factory=list, max_length=32, description="Entries dated within the clock-skew allowance of it."
    )
    power_at: AwareDatetime | None = Field(
        None, description="When a PSU failure or lost input was last logged (it explains a lost redundancy)."
    )
    read_at: AwareDatetime | None = Field(None, description="The report time of the listing this memory is of.")
    clock: ClockBounds | None = Field(
        None,
        description="Bounds (seconds) on how far this source's entry times run ahead of UTC, learned from entries "
        "new by record id (logged between two reads): ipmitool prints a BMC's local time as if UTC "
        "(remediator/derive/sel.py; the third review of the Redfish rules, finding 5).",
    )
    sensors: dict[str, list[Bucket]] = Field(
        default_factory=dict, description="Sensor -> entries it logged per bucket, for the flood watch (bounded)."
    )
    aer_at: AwareDatetime | None = Field(
        None, description="When the kernel log last had an uncorrected PCIe AER error (derive/sel_interrupts.py)."
    )
    aers: list[tuple[int, list[Annotated[str, Field(max_length=32)]]]] = Field(
        default_factory=list,
        max_length=16,
        description="Uncorrected PCIe AERs of the last hour or so: (epoch seconds of the report, the functions it "
        "names); each explains only critical-interrupt entries near it and on its device (derive/sel_interrupts.py).",
    )
    dimm_ce: dict[str, list[Bucket]] = Field(
        default_factory=dict,
        max_length=16,
        description="DIMM (the log's name) -> its correctable-ECC entries per bucket by their own times "
        "(remediator/derive/sel_memory.py).",
    )


class IrqMemory(_Section):
    at: AwareDatetime
    boot: str | None = None
    cpus: dict[str, tuple[int, int]] = Field(
        default_factory=dict, description="Isolated cpu -> (device IRQs, TLB shootdowns) counted so far."
    )
    header_cpus: bool = Field(
        False, description="The cpus are the /proc/interrupts header's numbers (false: column i taken as CPU i)."
    )


class RasMemory(_Section):
    at: AwareDatetime
    last: int | None = Field(None, description="Highest rasdaemon mc_event id seen.")
    aer: int | None = Field(None, description="Highest rasdaemon aer_event id seen (None: never read one).")


MAX_MCE_KEYS = 64


class MceMemory(_Section):
    at: AwareDatetime = Field(description="captured_at of the newest report with a machine-check source.")
    last: int | None = Field(None, description="Highest rasdaemon mce_record id seen (None: never read one).")
    logged: bool = Field(False, description="Machine checks without an id (mcelog's) have been seen.")
    since: AwareDatetime | None = Field(
        None, description="Corrected records without an id up to this time are history."
    )
    keys: list[str] = Field(
        default_factory=list,
        max_length=MAX_MCE_KEYS,
        description="'epoch:digest' of corrected records without an id counted after `since`: one sent again is known.",
    )
    ue_since: AwareDatetime | None = Field(
        None, description="As `since`, for uncorrected records: a storm of corrected ones never moves it."
    )
    ue_keys: list[str] = Field(
        default_factory=list, max_length=MAX_MCE_KEYS, description="As `keys`, for uncorrected records."
    )

    @model_validator(mode="before")
    @classmethod
    def _one_track_before(cls, data: Any) -> Any:
        """Memory kept before uncorrected records had a track of their own has one `since` and one set of
        `keys` for both (and no `ue_keys`, which is always kept since): the uncorrected track starts from
        them, so a record counted then is not counted again (a key of one class never matches the other)."""
        if isinstance(data, dict) and data.get("logged") and "ue_keys" not in data:
            return {**data, "ue_since": data.get("since"), "ue_keys": data.get("keys", [])}
        return data


MAX_PAGES = 32  # pages tracked per host (remediator/derive/pages.py): the least recently erring is evicted


class PageTrack(_Section):
    hours: list[Bucket | TimedBucket] = Field(
        default_factory=list, max_length=25, description="(epoch hour, CEs, first, last error's time) over 24 h."
    )
    where: str = Field("", max_length=256, description="The DIMM location the errors named (a signal subject).")
    sources: list[str] = Field(default_factory=list, max_length=2)
    grain_bits: int | None = Field(None, description="The largest grain any of its records gave (log2 bytes).")
    physical: bool = Field(True, description="False: some record's address was not a system physical address.")


class PageMemory(_Section):
    pages: dict[str, PageTrack] = Field(
        default_factory=dict, max_length=MAX_PAGES, description="Page address (hex) -> its recent CEs."
    )
    places: dict[str, dict[str, str | int | None]] = Field(
        default_factory=dict,
        max_length=MAX_PAGES,
        description="DIMM location (a page's `where`) -> its EDAC coordinates (mc, label, layers, socket, channel).",
    )
    evicted: list[Bucket] = Field(
        default_factory=list, max_length=25, description="Pages evicted per hour (mcelog's counter replacements)."
    )
    mc_event: int | None = Field(None, description="Highest rasdaemon mc_event id counted.")
    mce_record: int | None = Field(None, description="Highest rasdaemon mce_record id counted.")
    mcelog_at: AwareDatetime | None = Field(None, description="Newest mcelog record time counted.")


MAX_GAPS = 16  # per id space: the newest are kept
MAX_GAP_SPACES = 8
Gap = tuple[int, int]  # first and last id (inclusive) that no report derived so far carried


class HostMemory(_Section):
    v: Literal[1] = MEMORY_VERSION
    at: AwareDatetime | None = Field(None, description="captured_at of the newest report derived.")
    boot: str | None = None
    klog: KernelMemory | None = None
    sel: SelMemory | None = None
    disks: dict[str, DiskCounters] | None = None
    irq: IrqMemory | None = None
    ras: RasMemory | None = None
    mce: MceMemory | None = None
    gpus: dict[str, int] | None = Field(
        None, max_length=64, description="GPU uuid (else BDF) -> nvidia-smi's aggregate uncorrected ECC count."
    )
    pages: PageMemory | None = None
    capacity: CapacityMemory | None = None
    net: NetMemory | None = None
    heat: HeatMemory | None = None
    cxl: CxlMemory | None = None
    pcie: PcieMemory | None = None
    xid: XidMemory | None = None
    redfish: RedfishMemory | None = None
    edac: EdacSample | None = Field(
        None, description="The host's EDAC counts at the last report with them (derive/edac_counted.py)."
    )
    gaps: dict[str, list[Gap]] | None = Field(
        None,
        max_length=MAX_GAP_SPACES,
        description="Id space (klog:<boot>, sel, mc_event, aer_event, mce_record) -> ids below its cursor that no "
        "report carried yet: the rows of a report still on its way (remediator/derive/late.py).",
    )

    def dump(self) -> dict[str, Any]:
        return self.model_dump(mode="json", exclude_none=True)


def load_memory(raw: object) -> HostMemory:
    """The stored memory, or as much of it as is valid; another version starts afresh."""
    if not isinstance(raw, dict) or raw.get("v", MEMORY_VERSION) != MEMORY_VERSION:
        return HostMemory()
    try:
        return HostMemory.model_validate(raw)
    except ValidationError:
        pass
    kept: dict[str, Any] = {}
    for name in HostMemory.model_fields:
        if name in raw:
            try:
                HostMemory.model_validate({name: raw[name]})
            except ValidationError:
                continue
            kept[name] = raw[name]
    return HostMemory.model_validate(kept)
