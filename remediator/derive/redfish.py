"""Signals from the BMC's Redfish section (checker/sections/redfish.py): its own count of each DIMM's
errors, its alarm flags, its PSUs and their redundancy, and the firmware it says the host runs.

The log entries and sensor readings the same service serves are in the `sel` and `sensors` sections and
are derived there (remediator/derive/sel.py, sensors.py); this module reads what only Redfish has.

DIMMs (Memory and its MemoryMetrics, DMTF MemoryMetrics.v1: LifeTime / CurrentPeriod
CorrectableECCErrorCount; HealthData.AlarmTrips):
- `bmc_dimm_ce_rate`: the BMC's correctable-error count of one DIMM as a rate between two reads of it,
  LifeTime preferred (it never rolls over with a period), else CurrentPeriod. The first read of a DIMM
  records only; a count that went backwards is a reset or a replaced DIMM (never a negative rate) and
  records only; reads more than MAX_GAP_S apart give no rate (remediator/signals.py's rule); another
  serial in the slot (the BMC's count of a slot can carry on across a swap) or a restart of a host
  without EDAC records only too (the review of the Redfish rules, finding 5). The detail compares it
  with EDAC's count over the same interval: the host's EDAC total (every controller's ce_count) is kept
  with each read, and `edac_under_reports` is true when EDAC counted fewer than EDAC_SHARE of the BMC's
  errors on this DIMM host-wide and under EDAC_RULE_FLOOR a second (no EDAC DIMM rule can fire), or the
  host reports no EDAC at all; null when not comparable (a restart, or the EDAC collector failed). Why it
  matters: EDAC polls and aggregates (seed 000: a long polling interval risks counter overflow; a CMCI
  storm switches a bank to polling and its count becomes a floor), and on a firmware-first host the
  firmware keeps the CEs from the OS: the BMC's count is independent evidence.
- `bmc_dimm_uncorrectable`: the BMC's uncorrectable count of a DIMM rose between two reads, or its
  UncorrectableECCError alarm is tripped. `bmc_dimm_ce_alarm`: its CorrectableECCError alarm is tripped
  (DMTF: a correctable-error threshold crossing). A flag is a level that stays set until a system reset:
  its signal comes when it turns true, once a boot (RedfishMemory.tripped). A flag that is false is NOT
  "0 errors": iDRAC keeps
  only the flags (the R650 sample), so nothing is derived from a false one. `edac_silent` says whether
  the host's EDAC counted none of that kind (or reports no EDAC) on the same DIMM (else the host) over the
  BMC's interval: since the last inventory read of this boot (the flag was not set then; the count rose
  since), else since boot (remediator/derive/edac_counted.py: one earlier UE on another DIMM no longer
  silences it, the second review of the Redfish rules, finding 1). Where EDAC counts, its own rules judge
  the DIMM by the fleet's thresholds and the flag is a second opinion.
- Only modules of kind `dimm`: a GPU's HBM (`gpu_hbm`) counts the GPU's memory (remediator/derive/gpu.py
  reads nvidia-smi for that) and never names a DIMM slot.
The section's memory is re-read once an hour (the collector's inventory_every_s): between reads it is
null and this memory is left as it was.

PSUs (Power.v1 PowerSupplies and Redundancy): a present PSU with Status.Health Critical and a
LineInputVoltage in its input's range, above 0 V (it has input, so the PSU itself failed), is
`psu_failure`, the SEL deriver's kind, so the psu-failure rule applies. Any other present PSU whose Health is not OK is
`bmc_psu_unhealthy` (no rule): a Warning may be a predictive failure or a lost input, and a Critical
without an input reading may be a lost input (a feed, not a PSU to replace): the log's entries say which,
through the SEL deriver (`psu_failure`, `psu_input_lost`). An Absent bay is no PSU whatever its Health
(HPE iLO serves Warning on an empty bay: the XL675d sample); an implausible LineInputVoltage (the S2600
sample's 572 V and 13 V on two healthy PSUs) is not evidence of input loss nor of input, so the section
never says `psu_input_lost`. A PSU redundancy group whose Health is Warning or Critical while its State is
not Disabled (Disabled: not in force, the S2600's N+m) is `power_unit_fault`, as the SEL's lost
redundancy, unless a PSU failure or lost input explains it (the log's hour, or while the PSU it named stays
not OK); a fan redundancy group the same way is `fan_redundancy_lost`, naming the fans the sensors read as
failing as candidates (the group is no fan to replace).

Firmware (UpdateService/FirmwareInventory): the BIOS and BMC versions the BMC says are running
(Dell's Previous- rollback image is not) are kept and handed to the baseline comparison
(remediator/derive/configuration.py), which prefers the host's own reading (see there). A component the
host read itself within OWN_FIRMWARE_S keeps that source: a report whose `ipmitool mc info` or dmidecode
failed (a BMC mid-reflash answers nothing) leaves the version unknown, never the Redfish one, so a
firmware-below-baseline-redfish ticket does not open beside the running reflash (the second review of the
Redfish rules, finding 2). A host that stopped reading it itself for longer goes over to the BMC's.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from typing import Annotated, Any, Literal

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field

from checker.schemas import EdacState, Identity, RedfishMemoryModule, RedfishState, Report, SensorReading
from remediator.derive.edac_counted import EdacSample, counted_detail, sample
from remediator.derive.redfish_power import POWER_EXPLAINS, power_signals, psu_name
from remediator.signals import MAX_GAP_S, SignalValue

MAX_DIMMS = 64  # DIMMs remembered per host: 2 sockets x 12 channels x 2 DIMMs is 48
MAX_KEY = 160  # characters of a module URI kept as its key, from its end (the samples' are under 70)
EDAC_SHARE = 0.5  # ours: EDAC counting less than half of what the BMC counted on one DIMM is under-reporting
# The lowest EDAC rate any EDAC DIMM rule acts on (remediator/default_rules.yaml dimm-ce-ppr, 0.05 CE/s): at
# or above it host-wide, an EDAC rule may already judge this DIMM, and the BMC's rule would open a second
# ticket under another name (the review of the Redfish rules, finding 4).
EDAC_RULE_FLOOR = 0.05
FIRMWARE_KEPT = ("bios", "bmc")  # what the class baselines compare (remediator/firmware_baselines.yaml)
MAX_LISTED = 8
# ours: a reflash and its verification take minutes to an hour (cyborg's firmware step); a host whose own
# reading is missing for a day has lost it (in-band IPMI gone), and the BMC's version is all there is
OWN_FIRMWARE_S = 86400
SEL_SKEW_S = 300  # remediator/derive/sel.py SKEW_S: the BMC's clock stepping between two listings
ALARMS = (("UncorrectableECCError", "bmc_dimm_uncorrectable"), ("CorrectableECCError", "bmc_dimm_ce_alarm"))


Counter = Literal["lifetime", "current_period"]


class DimmRead(BaseModel):
    """One DIMM's counts at one read of the BMC's inventory."""

    at: AwareDatetime
    counter: Counter | None = None
    ce: int | None = None
    ue: int | None = None
    edac: int | None = Field(None, description="The host's EDAC CE total at that read (null: no EDAC section).")
    boot: str | None = None
    serial: str | None = None


Held = tuple[Counter, int | None, int | None] | tuple[Counter, int | None, int | None, str | None]
"""(counter, CE, UE[, serial]): the serial since the review's finding 5 (a swapped DIMM is a new baseline);
memory kept before it has three."""


class RedfishMemory(BaseModel):
    """What the deriver keeps of the Redfish section between reports: the last inventory read, compact."""

    model_config = ConfigDict(extra="ignore")

    at: AwareDatetime | None = Field(None, description="When the BMC's memory inventory was last read.")
    edac: int | None = Field(None, description="The host's EDAC CE total then (null: no EDAC section).")
    boot: str | None = None
    dimms: dict[str, Held] = Field(
        default_factory=dict,
        max_length=MAX_DIMMS,
        description="Module (its URI under /redfish/v1/Systems/) -> (counter, CE count, UE count, serial) at "
        "that read.",
    )
    dropped: int = Field(0, ge=0, description="DIMMs of the last read past MAX_DIMMS, not remembered.")
    locators: list[Annotated[str, Field(max_length=64)]] = Field(
        default_factory=list, max_length=MAX_DIMMS, description="The DIMMs' DeviceLocators at that read."
    )
    tripped: list[Annotated[str, Field(max_length=MAX_KEY + 40)]] = Field(
        default_factory=list,
        max_length=2 * MAX_DIMMS,
        description="'module|alarm' of the AlarmTrips true at that read during `boot`: a flag is a level that "
        "stays set until a system reset (DMTF MemoryMetrics), so its signal comes when it turns true, once a boot.",
    )
    power_psus: list[Annotated[str, Field(max_length=64)]] = Field(
        default_factory=list,
        max_length=MAX_LISTED,
        description="PSUs a logged failure or lost input named, kept while the BMC serves them not OK: they "
        "explain the lost redundancy past the log's hour (the review's finding 6).",
    )
    firmware: dict[str, str] = Field(
        default_factory=dict, max_length=len(FIRMWARE_KEPT), description="bios/bmc -> the version last served."
    )
    own_firmware: dict[str, AwareDatetime] = Field(
        default_factory=dict,
        max_length=len(FIRMWARE_KEPT),
        description="bios/bmc -> when the host last read it itself (its usual source while within OWN_FIRMWARE_S).",
    )
    edac_sample: EdacSample | None = Field(
        None, description="The host's EDAC counts at that read, per labelled DIMM: `edac_silent`'s interval start."
    )


def edac_collector_failed(report: Report) -> bool:
    """The report has no EDAC section because its collector failed (an error or a timeout), not because the
    host has no EDAC driver ('unavailable'): then EDAC's count is unknown, not absent (the review's note 11)."""
    run = report.collectors.get("edac")
    return run is not None and run.status in ("error", "timeout")


def _edac_total(edac: EdacState | None, kind: Literal["ce", "ue"] = "ce") -> int | None:
    """The host's EDAC count of one kind: per controller its own total, or its DIMMs' and the unattributed
    ones where those add up to more (a controller total left at 0)."""
    if edac is None:
        return None
    if kind == "ce":
        return sum(max(c.ce_count, sum(d.ce_count for d in c.dimms) + c.ce_noinfo_count) for c in edac.controllers)
    return sum(max(c.ue_count, sum(d.ue_count for d in c.dimms) + c.ue_noinfo_count) for c in edac.controllers)


def _counts(module: RedfishMemoryModule) -> tuple[Counter | None, int | None, int | None]:
    if module.ce_lifetime is not None or module.ue_lifetime is not None:
        return "lifetime", module.ce_lifetime, module.ue_lifetime
    if module.ce_current_period is not None or module.ue_current_period is not None:
        return "current_period", module.ce_current_period, module.ue_current_period
    return None, None, None


def dimm_name(module: RedfishMemoryModule) -> str:
    """The signal subject: the silkscreen label the BMC serves, else the resource's Id."""
    return (module.device_locator or "").strip() or module.id


def module_detail(module: RedfishMemoryModule) -> dict[str, Any]:
    """Where the BMC says the DIMM is and what it is, as served (the ticket's Which DIMM reads these)."""
    return {
        "source": "redfish",
        "module": module.uri,
        "device_locator": module.device_locator,
        "socket": module.socket,
        "memory_controller": module.memory_controller,
        "channel": module.channel,
        "slot": module.slot,
        "location_source": module.location_source,
        "location_base": module.location_base,
        "serial": module.serial,
        "part_number": module.part_number,
        "manufacturer": module.manufacturer,
        "mem_type": module.device_type,
    }


def _edac_compare(
    before: DimmRead, edac_now: int | None, boot: str | None, delta: int, elapsed: float, edac_failed: bool
) -> tuple[int | None, bool | None, str]:
    """(EDAC's CEs over the same interval, whether EDAC under-reports, how EDAC was read). Under-reporting
    needs both: EDAC counted less than EDAC_SHARE of the BMC's errors, and its host-wide rate stayed below
    EDAC_RULE_FLOOR (where it did not, the EDAC rules judge the DIMM and the BMC's count is theirs to add)."""
    if edac_failed:
        return None, None, "collector failed"  # no section because the collector failed: not comparable
    if edac_now is None and before.edac is None:
        return None, True, "absent"  # no EDAC driver reporting: the BMC's count is the only one
    rebooted = boot is not None and before.boot is not None and boot != before.boot
    if edac_now is None or before.edac is None or rebooted or edac_now < before.edac:
        return None, None, "reset or not read at both times"
    counted = edac_now - before.edac
    return counted, counted < EDAC_SHARE * delta and counted / elapsed < EDAC_RULE_FLOOR, "counted"


def _new_baseline(before: DimmRead | None, read: DimmRead, elapsed: float) -> bool:
    """No rate between the two reads: the first read of this counter, one too long ago, another DIMM in the
    slot (its serial changed: the BMC's count of a slot can carry on across a swap), or a restart of a host
    without EDAC (nothing tells a swap made while it was down from errors: the review's finding 5)."""
    if before is None or read.counter is None or before.counter != read.counter or not 0 < elapsed <= MAX_GAP_S:
        return True
    if before.serial and read.serial and before.serial.strip().casefold() != read.serial.strip().casefold():
        return True
    rebooted = read.boot is not None and before.boot is not None and read.boot != before.boot
    return rebooted and read.edac is None and before.edac is None


def _dimm_signals(
    module: RedfishMemoryModule,
    before: DimmRead | None,
    read: DimmRead,
    elapsed: float,
    edac_of: dict[str, dict[str, Any]],
    edac_failed: bool = False,
) -> list[SignalValue]:
    """`edac_of`: kind (ce, ue) -> what EDAC counted of it on this DIMM (else the host) over the interval
    since the last read (edac_counted.counted_detail)."""
    subject, base = dimm_name(module), module_detail(module)
    signals: list[SignalValue] = []
    for alarm, kind in ALARMS:
        if module.alarm_trips.get(alarm) is True:
            edac = edac_of["ue" if kind == "bmc_dimm_uncorrectable" else "ce"]
            detail = {**base, "alarm": alarm, "counter": read.counter, **edac}
            if edac_failed:
                detail["edac_silent"] = None  # a failed EDAC collector is not silence
            signals.append(SignalValue(kind, subject, 1.0, detail))
    if before is None or _new_baseline(before, read, elapsed):
        return signals  # a baseline, no rate
    tripped = any(s.kind == "bmc_dimm_uncorrectable" for s in signals)
    if read.ue is not None and before.ue is not None and read.ue > before.ue and not tripped:
        detail = {**base, "counter": read.counter, "delta": read.ue - before.ue, "count": read.ue}
        detail.update(alarm=None, **edac_of["ue"])
        if edac_failed:
            detail["edac_silent"] = None
        signals.append(SignalValue("bmc_dimm_uncorrectable", subject, float(read.ue - before.ue), detail))
    if read.ce is None or before.ce is None or read.ce <= before.ce:
        return signals  # still, or backwards: a reset or a replaced DIMM records only
    delta = read.ce - before.ce
    counted, under, how = _edac_compare(before, read.edac, read.boot, delta, elapsed, edac_failed)
    detail = {
        **base,
        "counter": read.counter,
        "delta": delta,
        "elapsed_s": round(elapsed, 3),
        "count": read.ce,
        "edac_delta": counted,
        "edac_rate": round(counted / elapsed, 6) if counted is not None else None,
        "edac": how,
        "edac_under_reports": under,
        # the interval as one counted entry: a repair's resolve within it is recounted (remediator.recount)
        "since": before.at.isoformat(),
        "counted": [[int(before.at.timestamp()), delta]],
        "counted_s": round(elapsed, 3),
    }
    signals.append(SignalValue("bmc_dimm_ce_rate", subject, delta / elapsed, detail))
    return signals


def _key(module: RedfishMemoryModule) -> str:
    return module.uri.removeprefix("/redfish/v1/Systems/")[-MAX_KEY:]  # the tail tells modules apart


def memory_signals(
    state: RedfishState,
    edac: EdacState | None,
    previous: RedfishMemory | None,
    *,
    now: dt.datetime,
    boot: str | None,
    edac_failed: bool = False,
    rises: EdacSample | None = None,
) -> tuple[list[SignalValue], RedfishMemory]:
    """The DIMM signals of an inventory read, and that read to keep. A DIMM the read does not list loses its
    counts (its next read is a first sight): the elapsed time is always between two whole reads."""
    kept = previous if previous is not None else RedfishMemory()
    if state.memory is None:
        return [], kept
    edac_now = _edac_total(edac)
    signals: list[SignalValue] = []
    dimms: dict[str, Held] = {}
    dropped = 0
    standing = set(kept.tripped) if kept.boot == boot else set()  # a reset clears AlarmTrips (DMTF)
    tripped: list[str] = []
    for module in state.memory:
        if module.kind != "dimm":
            continue  # a GPU's HBM is the GPU's; persistent memory and the rest are not judged here
        counter, ce, ue = _counts(module)
        read = DimmRead(at=now, counter=counter, ce=ce, ue=ue, edac=edac_now, boot=boot, serial=module.serial)
        before = None
        if (held := kept.dimms.get(_key(module))) is not None and kept.at is not None:
            serial = held[3] if len(held) > 3 else None
            before = DimmRead(
                at=kept.at, counter=held[0], ce=held[1], ue=held[2], edac=kept.edac, boot=kept.boot, serial=serial
            )
        elapsed = (now - before.at).total_seconds() if before is not None else 0.0
        # EDAC over the BMC's interval: since the last read (same boot), else since boot, or a rise of its count
        # since then less its poll interval (edac_counted.py; the third review, finding 1)
        edac_of = {
            kind: counted_detail(
                edac, kept.edac_sample, dimm=dimm_name(module), kind=kind, start=kept.at, boot=boot, rises=rises
            )
            for kind in ("ce", "ue")
        }
        found = _dimm_signals(module, before, read, elapsed, edac_of, edac_failed)
        flags = [f"{_key(module)}|{alarm}" for alarm, _ in ALARMS if module.alarm_trips.get(alarm) is True]
        tripped += flags
        # an alarm still set since an earlier read of this boot is the same trip: said once (the review's note 12)
        signals += [
            s for s in found if s.detail.get("alarm") is None or f"{_key(module)}|{s.detail['alarm']}" not in standing
        ]
        if counter is not None and len(dimms) < MAX_DIMMS:
            dimms[_key(module)] = (counter, ce, ue, (module.serial or "")[:64] or None)
        elif counter is not None:
            dropped += 1  # said in the kept memory (the review's note 14): its counts start again when read
    locators = [name[:64] for m in state.memory if m.kind == "dimm" and (name := (m.device_locator or "").strip())]
    update: dict[str, Any] = {"at": now, "edac": edac_now, "boot": boot, "dimms": dimms, "dropped": dropped}
    update.update(tripped=tripped[: 2 * MAX_DIMMS], locators=locators[:MAX_DIMMS])
    update["edac_sample"] = sample(edac, now=now, boot=boot)
    return signals, kept.model_copy(update=update)


SEL_DIMM_KINDS = ("sel_memory_ecc", "sel_memory_ce_rate", "sel_memory_disabled")


def _letters_digits(text: str) -> str:
    return "".join(ch for ch in text.casefold() if ch.isalnum())


def name_dimms(
    signals: list[SignalValue], state: RedfishState | None, previous: RedfishMemory | None
) -> list[SignalValue]:
    """The log's DIMM signals keyed by the DIMM's DeviceLocator where the same BMC serves exactly one spelled
    alike (letters and digits: Dell's log says DIMM_A1, its R650 DeviceLocator 'DIMM A1'), so the log's and
    the inventory's signals of one DIMM are one part with one ticket (the review's finding 8). The log's own
    name stays in the detail (`log_name`)."""
    if state is not None and state.memory is not None:
        locators = [(m.device_locator or "").strip() for m in state.memory if m.kind == "dimm"]
    else:
        locators = list(previous.locators) if previous is not None else []
    if not locators:
        return signals
    named: list[SignalValue] = []
    for signal in signals:
        alike = [name for name in locators if name and _letters_digits(name) == _letters_digits(signal.subject)]
        if signal.kind in SEL_DIMM_KINDS and len(alike) == 1 and alike[0] != signal.subject:
            signal = SignalValue(signal.kind, alike[0], signal.value, {**signal.detail, "log_name": signal.subject})
        named.append(signal)
    return named


def _when(value: object) -> dt.datetime | None:
    return dt.datetime.fromisoformat(value) if isinstance(value, str) else None


def note_edac_silence(
    signals: Sequence[SignalValue],
    edac: EdacState | None,
    before: EdacSample | None = None,
    *,
    boot: str | None = None,
    rises: EdacSample | None = None,
) -> None:
    """The SEL's memory signals say whether the host's EDAC counted enough of their errors for its own rules to
    judge the DIMM (sel-memory-correctable asks only where it did not): on the same DIMM (else the host),
    `edac_counted` from `before` (the EDAC sample of the previous report) when the signal's new entries are no
    older than it, else since boot (remediator/derive/edac_counted.py; the second review, finding 1); and
    `edac_silent` unless EDAC's count (`rises`: this report's sample, with its marks) since the new entries'
    first time, for a rate at DIMM scope since its window's start (the third review, finding 1: EDAC polls, so
    it counts late), less EDAC's poll interval, is at least half the BMC's entries over that interval (the
    fourth review, finding 1: not one error in 20 minutes on another DIMM). The entries are new since the
    previous listing, so the BMC's clock may lag by the SEL's SKEW_S."""
    for signal in signals:
        if signal.kind in ("sel_memory_ecc", "sel_memory_ce_rate"):
            start = _when(signal.detail.get("first_timestamp"))
            kind: Literal["ce", "ue"] = "ue" if signal.detail.get("uncorrectable") else "ce"
            entries = signal.detail.get(
                "new_entries", signal.detail.get(f"{'un' if kind == 'ue' else ''}correctable_count")
            )
            found = counted_detail(
                edac,
                before,
                dimm=signal.subject,
                kind=kind,
                start=start,
                boot=boot,
                slack_s=SEL_SKEW_S,
                rises=rises,
                rise_from=_when(signal.detail.get("window_start")),
                entries=entries if isinstance(entries, int) else None,
                window_entries=window if isinstance(window := signal.detail.get("entries"), int) else None,
            )
            signal.detail.update(found)


def served_firmware(state: RedfishState | None, previous: RedfishMemory | None) -> dict[str, str]:
    """bios/bmc -> the version the BMC says runs: every running entry of the component agreeing, else not
    known; kept from the last read between inventory reads."""
    kept = dict(previous.firmware) if previous is not None else {}
    if state is None or state.firmware is None:
        return kept
    found: dict[str, str] = {}
    for component in FIRMWARE_KEPT:
        versions = {
            f.version.strip()
            for f in state.firmware
            if f.component == component and f.slot != "previous" and f.version and f.version.strip()
        }
        if len(versions) == 1:
            found[component] = versions.pop()
    return found


def firmware_for_baseline(
    identity: Identity | None, kept: RedfishMemory | None, *, now: dt.datetime
) -> tuple[dict[str, str], RedfishMemory | None]:
    """The BMC's versions the baseline comparison may use (a component the host read itself within
    OWN_FIRMWARE_S is not one of them: its missing reading is unknown, not a change of source), and the
    memory with the host's own reads noted."""
    if kept is None:
        return {}, None
    firmware = identity.firmware if identity is not None else None
    own = dict(kept.own_firmware)
    if firmware is not None:
        own.update({c: now for c, v in (("bios", firmware.bios_version), ("bmc", firmware.bmc_firmware)) if v})
    usual = {c for c, when in own.items() if (now - when).total_seconds() <= OWN_FIRMWARE_S}
    served = {c: v for c, v in kept.firmware.items() if c not in usual}
    return served, kept.model_copy(update={"own_firmware": {c: own[c] for c in usual}})


def redfish_signals(
    state: RedfishState | None,
    edac: EdacState | None,
    previous: RedfishMemory | None,
    earlier: Sequence[SignalValue],
    *,
    now: dt.datetime,
    boot: str | None,
    power_explained: bool,
    edac_failed: bool = False,
    sensors: Sequence[SensorReading] | None = None,
    edac_rises: EdacSample | None = None,
) -> tuple[list[SignalValue], RedfishMemory | None]:
    """The section's signals and the memory to keep. `earlier`: this report's signals so far (a PSU failure
    or lost input the log showed explains a lost redundancy); `power_explained`: one within the SEL
    deriver's hour (remediator/derive/sel.py POWER_EXPLAINS_S)."""
    if state is None:
        return [], previous
    found, kept = memory_signals(state, edac, previous, now=now, boot=boot, edac_failed=edac_failed, rises=edac_rises)
    unwell = {psu_name(p.member_id, p.bay, p.name) for p in state.psus if p.present is not False and p.health != "OK"}
    named = [s.subject for s in earlier if s.kind in POWER_EXPLAINS] + list(kept.power_psus)
    # a PSU the log named stays the explanation while the BMC serves it not OK (its feed still down); where
    # the section lists no PSUs nothing says so, and the log's hour (power_explained) is all there is
    still = [p for p in dict.fromkeys(named) if p in unwell]
    explained = power_explained or any(s.kind in POWER_EXPLAINS for s in earlier) or bool(still)
    found += power_signals(state, explained, sensors)
    update = {"firmware": served_firmware(state, previous), "power_psus": still[:MAX_LISTED]}
    return found, kept.model_copy(update=update)
