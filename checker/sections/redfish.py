"""The Redfish section of the report: what the BMC's Redfish service says that has no IPMI equivalent.

Filled by checker/collectors/redfish.py beside the sections Redfish shares with IPMI: log entries land
in `sel` (SelEntry, with `log_service` and `entry_id` saying where each came from) and sensor readings
in `sensors` (SensorReading), so the centre's SEL and sensor derivers read them unchanged. This section
holds the rest: the DIMMs with their MemoryLocation and MemoryMetrics error counts (or only the
alarm-trip flags, where that is all the BMC keeps), the firmware inventory, the PSUs with their bays
and redundancy, and which log services were read up to where.

Every field the BMC did not serve is null, never a healthy-looking default: a missing count is not
"0 errors", a missing Health is not "OK" (vendors fill the same schema very differently; see the
samples' MANIFEST rows under shared/fixtures/redfish).
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from checker.report_types import FiniteFloat, Key, Model, NonNegativeInt, Timestamp

MAX_LOG_SERVICES = 16
MAX_MODULES = 512  # 2 sockets x 12 channels x 2 DIMMs is 48; GPU baseboards add HBM stacks
MAX_FIRMWARE = 256
MAX_PSUS = 16
MAX_REDUNDANCY = 16
MAX_ALARM_TRIPS = 16

Health = Literal["OK", "Warning", "Critical"]


class RedfishLogService(Model):
    """One log service the collector read, and its cursor (how far it has read)."""

    entries_uri: str = Field(
        max_length=512, description="The LogEntryCollection's URI, e.g. .../LogServices/Sel/Entries."
    )
    entry_format: str | None = Field(
        None,
        max_length=64,
        description="What its entries are: the first entry's EntryType ('SEL', 'Event', 'Oem') and OemRecordFormat "
        "('Oem:Dell', 'Oem:Hpe-IML').",
    )
    entry_count: NonNegativeInt | None = Field(None, description="Members@odata.count as served (null: not served).")
    read: NonNegativeInt = Field(
        0, description="New entries reported this cycle (at most the agent's per-cycle bound; the rest next cycle)."
    )
    newest_id: str | None = Field(
        None, max_length=128, description="The newest entry reported so far: its Id, as served (a string)."
    )
    newest_created: Timestamp | None = Field(None, description="The newest entry reported so far: its Created time.")
    first_read: bool = Field(
        False,
        description="No cursor yet (first cycle, or the agent's state was lost): only the newest entries were read.",
    )
    cleared: bool = Field(
        False,
        description="The log was cleared since the last cycle: its entry count fell, or its newest Id went backwards.",
    )
    truncated: NonNegativeInt = Field(
        0,
        description="New entries that will never be read: the BMC overwrote them first, or a newest-first log's "
        "pages did not reach the cursor. Entries beyond the per-cycle bound are not counted: they come next cycle.",
    )


class RedfishMemoryModule(Model):
    """A Memory resource of a ComputerSystem (Systems/{id}/Memory/{id}) and its MemoryMetrics."""

    uri: str = Field(max_length=512)
    id: str = Field(max_length=128)
    kind: Literal["dimm", "gpu_hbm", "other"] = Field(
        description="dimm: a DIMM; gpu_hbm: a GPU's HBM (its counts are the GPU's, not a slot's); other: "
        "persistent memory, cache or a type the BMC does not say."
    )
    device_locator: str | None = Field(None, max_length=128, description="DeviceLocator: the silkscreen label.")
    socket: NonNegativeInt | None = None
    memory_controller: NonNegativeInt | None = None
    channel: NonNegativeInt | None = None
    slot: NonNegativeInt | None = None
    location_source: Literal["memory_location", "oem_hint"] | None = Field(
        None,
        description="memory_location: Socket/MemoryController/Channel/Slot from MemoryLocation, as served; oem_hint: "
        "socket only, from a vendor link (Dell's CPUAffinity): a hint, not a location.",
    )
    location_base: Literal[0, 1] | None = Field(
        None,
        description="Whether socket and slot count from 0 or 1 as served (the BMCs differ: Supermicro 0, HPE 1); null: "
        "the module alone does not tell.",
    )
    bank_label: str | None = Field(None, max_length=32, description="A vendor's bank label (Dell BankLabel 'A').")
    manufacturer: str | None = Field(None, max_length=128)
    part_number: str | None = Field(None, max_length=128)
    serial: str | None = Field(None, max_length=128)
    capacity_mib: NonNegativeInt | None = None
    device_type: str | None = Field(None, max_length=32, description="MemoryDeviceType: DDR4, DDR5, HBM3 ...")
    health: Health | None = Field(None, description="Status.Health; null when not served (not OK).")
    state: str | None = Field(None, max_length=32, description="Status.State: Enabled, Absent, Disabled ...")
    metrics_read: bool = Field(False, description="Its MemoryMetrics resource was read.")
    ce_current_period: NonNegativeInt | None = Field(None, description="CurrentPeriod.CorrectableECCErrorCount.")
    ue_current_period: NonNegativeInt | None = Field(None, description="CurrentPeriod.UncorrectableECCErrorCount.")
    ce_lifetime: NonNegativeInt | None = Field(None, description="LifeTime.CorrectableECCErrorCount.")
    ue_lifetime: NonNegativeInt | None = Field(None, description="LifeTime.UncorrectableECCErrorCount.")
    alarm_trips: dict[Key, bool] = Field(
        default_factory=dict,
        max_length=MAX_ALARM_TRIPS,
        description="HealthData.AlarmTrips as served (CorrectableECCError, UncorrectableECCError ...). Flags only: "
        "where they are all the BMC keeps, the counts stay null, never 0.",
    )


class RedfishFirmware(Model):
    """A SoftwareInventory member of UpdateService/FirmwareInventory."""

    id: str = Field(max_length=256)
    name: str | None = Field(None, max_length=256)
    component: Literal["bios", "bmc", "nic", "disk", "raid", "psu", "cpld", "other"]
    version: str | None = Field(None, max_length=128, description="Null when not served or 'NotAvailable'.")
    slot: Literal["installed", "current", "previous"] | None = Field(
        None,
        description="Dell's id prefix: installed/current is running, previous is the rollback image (not running).",
    )
    device: str | None = Field(None, max_length=256, description="The device the firmware is of (Dell's FQDD).")
    updateable: bool | None = None
    health: Health | None = None


class RedfishPsu(Model):
    """A PowerSupplies member of Chassis/{id}/Power."""

    member_id: str = Field(max_length=64)
    name: str | None = Field(None, max_length=128)
    bay: NonNegativeInt | None = Field(None, description="The bay number where the BMC gives one (HPE Oem BayNumber).")
    present: bool | None = Field(
        None, description="False: Status.State Absent (an empty bay); null: the BMC does not say."
    )
    health: Health | None = Field(
        None,
        description="Status.Health; null for an Absent bay: HPE iLO serves Health Warning on an empty bay, which says "
        "the bay is empty, not that a PSU failed.",
    )
    state: str | None = Field(None, max_length=32)
    model: str | None = Field(None, max_length=128)
    serial: str | None = Field(None, max_length=128)
    part_number: str | None = Field(None, max_length=128)
    firmware: str | None = Field(None, max_length=64)
    capacity_watts: FiniteFloat | None = None
    output_watts: FiniteFloat | None = None
    line_input_voltage: FiniteFloat | None = Field(
        None, description="LineInputVoltage when plausible for the PSU's input type, else null (see the next field)."
    )
    implausible_input_voltage: FiniteFloat | None = Field(
        None, description="A LineInputVoltage served outside any real input range (572 V, 13 V): kept, not believed."
    )


class RedfishRedundancy(Model):
    """A Redundancy group of Power or Thermal (PSUs, fans)."""

    name: str = Field(max_length=128)
    of: Literal["psu", "fan"]
    mode: str | None = Field(None, max_length=32, description="N+m, Sparing, Failover ...")
    health: Health | None = None
    state: str | None = Field(None, max_length=32, description="Enabled; Disabled means redundancy is not in force.")
    min_needed: NonNegativeInt | None = None
    members: NonNegativeInt | None = Field(None, description="Members of its RedundancySet, where listed.")


class RedfishState(Model):
    """What the BMC's Redfish service said this cycle (besides the SEL and sensors)."""

    protocol: Literal["redfish"] = "redfish"
    service: str = Field(max_length=256, description="The service's address (scheme, host, port; no credentials).")
    redfish_version: str | None = Field(None, max_length=32)
    vendor: str | None = Field(None, max_length=64, description="The service root's Vendor (Redfish 1.5 on).")
    log_services: list[RedfishLogService] = Field(default_factory=list, max_length=MAX_LOG_SERVICES)
    memory: list[RedfishMemoryModule] | None = Field(
        None, max_length=MAX_MODULES, description="Null: not read this cycle (inventory is re-read once an hour)."
    )
    firmware: list[RedfishFirmware] | None = Field(
        None, max_length=MAX_FIRMWARE, description="Null: not read this cycle."
    )
    psus: list[RedfishPsu] = Field(default_factory=list, max_length=MAX_PSUS)
    redundancy: list[RedfishRedundancy] = Field(default_factory=list, max_length=MAX_REDUNDANCY)
    sensors_absent: NonNegativeInt = Field(
        0, description="Sensors the BMC listed as Absent: not readings (never 0 degC or a stopped fan)."
    )
