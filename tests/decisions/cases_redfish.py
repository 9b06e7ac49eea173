"""The Redfish scenarios (rules bmc-dimm-ce-rate, bmc-dimm-uncorrectable, bmc-dimm-ce-alarm,
sel-memory-correctable, sel-critical-interrupt, sel-temperature-high, and psu-failure from a Redfish PSU),
registered into tests/decisions/cases.py's CASES.

The host's own tools answer from the corpus as in every scenario (SnapHost: the Supermicro X9DRT's
dmidecode, no EDAC unless the case gives it); its BMC's answers are the real Redfish samples, read by the
agent's own parsers (checker/parsers/redfish_*.py) into the report's `redfish` and `sel` sections as the
Redfish collector files them (tests/checker/test_redfish_collector.py runs that collector on the same
samples over HTTP). Where a sample lacks a state the scenario needs (a MemoryMetrics count: the X10SDV
serves none; an alarm flag set; a PSU's Health Critical), the parsed sample is changed as the BMC would
change it, and the case says so. The critical interrupt is an entry in the DMTF LogEntry shape written by
us (the corpus has none), read by the real parser.
"""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path
from typing import Any

from sqlalchemy.orm import Session

from bench.samples import sample
from checker.parsers.redfish_inventory import parse_memory
from checker.parsers.redfish_log import parse_log_entries, parse_log_entry
from checker.parsers.redfish_sensors import parse_power
from checker.schemas import RedfishMemoryModule, RedfishState, Report, SelEntry, SelState
from remediator.models import Remediation
from tests.decisions.cases import case
from tests.decisions.harness import Expect, SnapHost
from ticketing.models import Ticket

I10NM = "edac-sysfs/i10nm-mc7-dimm0-ce4.txt"  # EDAC counting: 4 CEs on one DIMM, standing still
SERVICE = "https://dt-host-01-bmc.example"
SUPERMICRO_DIMM = "supermicro-x10sdv-memory-dimmb1-health-ok.json"
SUPERMICRO_LOG = "supermicro-x10sdv-log1-entries-correctable-ecc-dimmb1-x64-no-severity.json"
DELL_DIMM = "dell-idrac9-r650-memory-dimm-socket-a1-no-memorylocation.json"
DELL_METRICS = "dell-idrac9-r650-memorymetrics-dimm-a1-alarmtrips-only-no-counts.json"
HPE_POWER = "hpe-ilo5-xl675d-gen10plus-a40-power-empty-bays-absent-warning.json"
DMTF_TEMPERATURE = "dmtf-public-rackmount1-log1-entries-sel-temperature-upper-critical-mockup.json"


def doc(name: str) -> Any:
    return json.loads(sample(f"redfish/{name}"))


def with_bmc(report: Report, *, redfish: RedfishState | None = None, sel: SelState | None = None) -> Report:
    """The report with what the Redfish collector read from the BMC this cycle."""
    update: dict[str, Any] = {}
    if redfish is not None:
        update["redfish"] = redfish
    if sel is not None:
        update["sel"] = sel
    return report.model_copy(update={"observations": report.observations.model_copy(update=update)})


def supermicro_dimm(**counts: int) -> RedfishMemoryModule:
    module = parse_memory(doc(SUPERMICRO_DIMM)).value
    assert module is not None
    return module.model_copy(update={"metrics_read": True, **counts})


def dell_dimm(**trips: bool) -> RedfishMemoryModule:
    metrics = doc(DELL_METRICS)
    metrics["HealthData"]["AlarmTrips"].update(trips)
    module = parse_memory(doc(DELL_DIMM), metrics).value
    assert module is not None
    return module


def inventory(*modules: RedfishMemoryModule) -> RedfishState:
    return RedfishState(service=SERVICE, memory=list(modules))


def bmc_counts(tmp: Path, ce_per_s: float, *, edac: bool = False) -> tuple[SnapHost, list[Report]]:
    """Two hourly inventory reads of the X10SDV's DIMMB1 with its LifeTime CE count (which that board does not
    serve: the count is ours) grown by `ce_per_s` an hour apart, and reports every ten minutes between."""
    host = SnapHost(tmp)
    if edac:
        host.real_edac(I10NM)
    reports = [with_bmc(host.cycle(0), redfish=inventory(supermicro_dimm(ce_lifetime=120)))]
    reports += [with_bmc(host.cycle(m), redfish=RedfishState(service=SERVICE)) for m in (10, 20, 30, 40, 50)]
    grown = supermicro_dimm(ce_lifetime=120 + int(ce_per_s * 3600))
    return host, [*reports, with_bmc(host.cycle(60), redfish=inventory(grown))]


@case(
    "the BMC counts 2 CE/s on DIMMB1 and the host has no EDAC: a DIMM ticket with the BMC's serial", "bmc-dimm-ce-rate"
)
def bmc_rate_no_edac(tmp: Path) -> tuple[SnapHost, list[Report], Expect]:
    host, reports = bmc_counts(tmp, 2.0)
    expect = Expect(
        "bmc-dimm-ce-rate",
        "ticket",
        title=r"DIMM DIMMB1: the BMC counts 2\.0 CE/s that EDAC does not show",
        part_type="dimm",
        part="DIMMB1",
        serial="16E1FD2E",  # Memory/3's SerialNumber: its DeviceLocator is the name, exactly
        never_actions=frozenset({"drain", "hard_ppr"}),
        also=bmc_evidence,
    )
    return host, reports, expect


def bmc_evidence(_session: Session, _remediation: Remediation | None, ticket: Ticket | None) -> None:
    """The ticket shows what the BMC's inventory said of the DIMM and its counts at each hourly read."""
    assert ticket is not None
    part = ticket.evidence["part"]
    assert (part["method"], part["redfish"]["module"]["uri"]) == (
        "Redfish DeviceLocator",
        "/redfish/v1/Systems/1/Memory/3",
    )
    counts = [(row["bmc_ce"], row["bmc_counter"]) for row in ticket.evidence["counter_history"] if "bmc_ce" in row]
    assert counts == [(120, "lifetime"), (7320, "lifetime")]
    assert "chassis_intrusion" not in ticket.evidence  # no intrusion logged on this host


@case("the BMC counts 0.5 CE/s on DIMMB1 without EDAC: below the pack's 1 CE/s, nothing", None)
def bmc_rate_slow(tmp: Path) -> tuple[SnapHost, list[Report], Expect]:
    host, reports = bmc_counts(tmp, 0.5)
    return host, reports, Expect(None)


@case("a DIMM's uncorrectable alarm on an iDRAC and no EDAC: a DIMM ticket naming DIMM A1", "bmc-dimm-uncorrectable")
def bmc_ue_alarm(tmp: Path) -> tuple[SnapHost, list[Report], Expect]:
    host = SnapHost(tmp)
    # the R650's DIMM A1 as served, its UncorrectableECCError flag set (the sample's is false)
    report = with_bmc(host.cycle(0), redfish=inventory(dell_dimm(UncorrectableECCError=True)))
    expect = Expect(
        "bmc-dimm-uncorrectable",
        "ticket",
        title="Replace DIMM DIMM A1: the BMC reports an uncorrectable error",
        part_type="dimm",
        part="DIMM A1",
        serial="19949A6B",
        never_actions=frozenset({"drain"}),
    )
    return host, [report], expect


@case("a DIMM's correctable-ECC alarm on an iDRAC and no EDAC: a ticket", "bmc-dimm-ce-alarm")
def bmc_ce_alarm(tmp: Path) -> tuple[SnapHost, list[Report], Expect]:
    host = SnapHost(tmp)
    report = with_bmc(host.cycle(0), redfish=inventory(dell_dimm(CorrectableECCError=True)))
    expect = Expect(
        "bmc-dimm-ce-alarm", "ticket", title="correctable-ECC alarm tripped", part="DIMM A1", serial="19949A6B"
    )
    return host, [report], expect


@case("the iDRAC's alarm flags all false, as the R650 serves them: not '0 errors', and nothing", None)
def bmc_flags_false(tmp: Path) -> tuple[SnapHost, list[Report], Expect]:
    host = SnapHost(tmp)
    return host, [with_bmc(host.cycle(0), redfish=inventory(dell_dimm()))], Expect(None)


@case("a correctable-ECC alarm where EDAC counts correctable errors: the EDAC rules judge, no BMC ticket", None)
def bmc_ce_alarm_edac_counts(tmp: Path) -> tuple[SnapHost, list[Report], Expect]:
    host = SnapHost(tmp).real_edac(I10NM)
    report = with_bmc(host.cycle(0), redfish=inventory(dell_dimm(CorrectableECCError=True)))
    return host, [report], Expect(None, never=frozenset({"bmc-dimm-ce-alarm"}))


def supermicro_log() -> SelState:
    entries = parse_log_entries(doc(SUPERMICRO_LOG)).value
    return SelState(entries=entries, entry_count=len(entries))


def log_after_empty(host: SnapHost, sel: SelState, *, redfish: RedfishState | None = None) -> list[Report]:
    """An empty log at the first read, then the sample's entries (dated years before the scenario) as new."""
    first = with_bmc(host.cycle(0), sel=SelState(entries=[], entry_count=0), redfish=redfish)
    return [first, with_bmc(host.cycle(1), sel=sel)]


def supermicro_log_for(copies: int) -> SelState:
    """The X10SDV's 64 entries (12 minutes of them) logged again every 12 minutes, `copies` times in all: the
    same DIMM erring on at the sample's own pace (ours: the corpus has 12 minutes of it)."""
    entries = parse_log_entries(doc(SUPERMICRO_LOG)).value
    span = dt.timedelta(minutes=12)
    logged = [
        e.model_copy(update={"record_id": e.record_id + 1000 * n, "timestamp": e.timestamp + n * span})
        for n in range(copies)
        for e in entries
        if e.timestamp is not None
    ]
    return SelState(entries=logged, entry_count=len(logged))


@case(
    "the X10SDV's Correctable ECC @DIMMB1 entries at its 0.09 a second for 36 minutes, no EDAC: a ticket with "
    "Memory/3's serial",
    "sel-memory-correctable",
)
def supermicro_sel_ce(tmp: Path) -> tuple[SnapHost, list[Report], Expect]:
    host = SnapHost(tmp)
    reports = log_after_empty(host, supermicro_log_for(3), redfish=inventory(supermicro_dimm()))
    expect = Expect(
        "sel-memory-correctable",
        "ticket",
        title="DIMM DIMMB1: 1[0-9]{2} correctable-ECC entries in the BMC's log within 30 minutes",
        part_type="dimm",
        part="DIMMB1",
        serial="16E1FD2E",
    )
    return host, reports, expect


@case(
    "the real X10SDV log alone: 64 entries within 12 minutes, one per error, not yet held for 30 minutes: nothing "
    "(review finding 7: ten a day was ten CEs)",
    None,
)
def supermicro_sel_ce_brief(tmp: Path) -> tuple[SnapHost, list[Report], Expect]:
    host = SnapHost(tmp)
    reports = log_after_empty(host, supermicro_log(), redfish=inventory(supermicro_dimm()))
    return host, reports, Expect(None, never=frozenset({"sel-memory-correctable"}))


@case("the same X10SDV log where EDAC counts as many correctable errors: the EDAC rules judge, nothing here", None)
def supermicro_sel_ce_edac(tmp: Path) -> tuple[SnapHost, list[Report], Expect]:
    host = SnapHost(tmp).real_edac(I10NM, mc7__dimm0__dimm_ce_count=400)  # ours: the log's 192 and more
    reports = log_after_empty(host, supermicro_log_for(3), redfish=inventory(supermicro_dimm()))
    return host, reports, Expect(None, never=frozenset({"sel-memory-correctable"}))


@case(
    "the same X10SDV log where EDAC's 4 correctable errors stand still: no count of the log's 192, a ticket "
    "(fourth review of the Redfish rules, finding 1)",
    "sel-memory-correctable",
)
def supermicro_sel_ce_edac_few(tmp: Path) -> tuple[SnapHost, list[Report], Expect]:
    host = SnapHost(tmp).real_edac(I10NM)
    reports = log_after_empty(host, supermicro_log_for(3), redfish=inventory(supermicro_dimm()))
    expect = Expect(
        "sel-memory-correctable",
        "ticket",
        title="DIMM DIMMB1: 1[0-9]{2} correctable-ECC entries in the BMC's log within 30 minutes",
        part_type="dimm",
        part="DIMMB1",
        serial="16E1FD2E",
    )
    return host, reports, expect


def serr_candidates(_session: Session, remediation: Remediation | None, _ticket: Ticket | None) -> None:
    """The PCI function the entry names is the ticket's candidate (review finding 10)."""
    assert remediation is not None
    detail = remediation.evidence["signal"]["detail"]
    assert detail["candidates"] == [{"bus": "0x3a", "device": "0x00", "function": "0x0", "bdf": "3a:00.0"}]


def serr_entry() -> SelEntry:
    """A PCI SERR as a DMTF-shaped SEL LogEntry (ours: the corpus has no fatal critical interrupt)."""
    entry = {
        "Id": "3",
        "Created": "2026-09-01T08:00:30Z",
        "EntryType": "SEL",
        "Severity": "Critical",
        "EntryCode": "Assert",
        "SensorType": "Critical Interrupt",
        "SensorNumber": 0x21,
        "Message": "PCI SERR detected on bus 0x3a device 0x00 function 0x0",
    }
    parsed = parse_log_entry(entry, "/redfish/v1/Systems/1/LogServices/Log1/Entries")
    assert parsed is not None
    return parsed


@case("a PCI SERR in the BMC's log: a ticket to find the device, uncorrectable (not fatal)", "sel-critical-interrupt")
def critical_interrupt(tmp: Path) -> tuple[SnapHost, list[Report], Expect]:
    host = SnapHost(tmp)
    reports = log_after_empty(host, SelState(entries=[serr_entry()], entry_count=1))
    expect = Expect(
        "sel-critical-interrupt",
        "ticket",
        title=r"dt-host-01: the BMC logged a bus or PCI error \(uncorrectable, Critical Interrupt #0x21\)",
        also=serr_candidates,
        part_type="host",
        never_actions=frozenset({"drain", "reboot", "power_cycle"}),
    )
    return host, reports, expect


@case("temperatures past upper critical in the DMTF mockup's log: one airflow ticket", "sel-temperature-high")
def logged_heat(tmp: Path) -> tuple[SnapHost, list[Report], Expect]:
    host = SnapHost(tmp)
    entries = parse_log_entries(doc(DMTF_TEMPERATURE)).value
    reports = log_after_empty(host, SelState(entries=entries, entry_count=len(entries)))
    expect = Expect(
        "sel-temperature-high",
        "ticket",
        title=r"Airflow check at dt-host-01: Temperature #0x0[12] past its upper critical threshold \(BMC log\)",
        part_type="airflow",
        part="host",
        never_actions=frozenset({"drain"}),
    )
    return host, reports, expect


@case("the Dell SEL's chassis opened five times: recorded, no ticket (a technician at work)", None)
def chassis_opened(tmp: Path) -> tuple[SnapHost, list[Report], Expect]:
    host = SnapHost(tmp)
    entries = parse_log_entries(doc("dell-idrac9-r650-sel-entries-chassis-intrusion-post-critical-log-cleared.json"))
    return host, log_after_empty(host, SelState(entries=entries.value, entry_count=16)), Expect(None)


@case("a present PSU with Health Critical over Redfish: the psu-failure ticket for PS3", "psu-failure")
def redfish_psu_failed(tmp: Path) -> tuple[SnapHost, list[Report], Expect]:
    host = SnapHost(tmp)
    power = parse_power(doc(HPE_POWER)).value
    # the XL675d's bay 3 as served, its Health turned Critical (the sample's four PSUs are OK)
    psus = [p.model_copy(update={"health": "Critical"}) if p.bay == 3 else p for p in power.psus]
    report = with_bmc(host.cycle(0), redfish=RedfishState(service=SERVICE, psus=psus))
    return host, [report], Expect("psu-failure", "ticket", title="Replace power supply PS3", part="PS3")


@case("the XL675d's empty bays with Health Warning over Redfish: no PSU failed, nothing", None)
def redfish_empty_bays(tmp: Path) -> tuple[SnapHost, list[Report], Expect]:
    host = SnapHost(tmp)
    power = parse_power(doc(HPE_POWER)).value
    state = RedfishState(service=SERVICE, psus=power.psus, redundancy=power.redundancy)
    return host, [with_bmc(host.cycle(m), redfish=state) for m in (0, 1)], Expect(None)


DELL_FIRMWARE = "dell-idrac9-r650-firmwareinventory-collection-installed-current-previous.json"
BMC_BASELINE = """version: 1
classes:
  x9drt-lab:
    bios: "3.0a"
    bmc: "6.0"
"""


@case(
    "the BMC's Redfish inventory says BMC 5.10.00.00, below the class's 6.0, and the host read no BMC version: "
    "a ticket, never a reflash it could not verify (review finding 3)",
    "firmware-below-baseline-redfish",
)
def redfish_bmc_below_baseline(tmp: Path) -> tuple[SnapHost, list[Report], Expect]:
    from checker.parsers.redfish_inventory import firmware_from_collection_id, parse_collection_links

    host = SnapHost(tmp)
    host.baselines = BMC_BASELINE  # the BIOS is at its baseline by dmidecode; no ipmitool mc info answers
    links = parse_collection_links(doc(DELL_FIRMWARE)).value
    firmware = [f for f in (firmware_from_collection_id(uri) for uri in links) if f is not None]
    report = with_bmc(host.cycle(0), redfish=RedfishState(service=SERVICE, firmware=firmware))
    expect = Expect(
        "firmware-below-baseline-redfish",
        "ticket",
        title=r"dt-host-01: bmc firmware 5\.10\.00\.00 below baseline 6\.0 \(the BMC's Redfish inventory\)",
        part_type="host",
        never=frozenset({"firmware-below-baseline"}),
        never_actions=frozenset({"reflash_firmware", "update_bmc_firmware"}),
    )
    return host, [report], expect


@case(
    "EDAC shows 0.5 CE/s on a DDR4 DIMM while the BMC counts 20 CE/s on it: no hard PPR (its firmware-first "
    "capture would take an SMI per CE), a ticket (review finding 4)",
    "dimm-ce-ppr",
)
def ppr_refused_under_bmc_rate(tmp: Path) -> tuple[SnapHost, list[Report], Expect]:
    host = SnapHost(tmp, hardware_class="compute-icx-2s")
    reports = []
    for minute in range(0, 50, 10):  # EDAC: 0.5 CE/s for 40 minutes (the ppr scenario of cases.py)
        host.real_edac(I10NM, mc7__dimm0__dimm_ce_count=4 + 300 * minute // 10, mc7__dimm0__dimm_mem_type="DDR4")
        report = host.cycle(minute)
        if minute in (0, 10):  # two reads of the BMC's inventory ten minutes apart: 20 CE/s on the DIMM
            report = with_bmc(report, redfish=inventory(supermicro_dimm(ce_lifetime=100 + 20 * 60 * minute)))
        reports.append(report)
    expect = Expect(
        "dimm-ce-ppr",
        "ticket",
        title="the BMC counts 1 CE/s or more on this host, too fast for hard PPR",
        part_type="dimm",
        never=frozenset({"bmc-dimm-ce-rate"}),  # EDAC's own 0.5 CE/s: the EDAC rule judges the DIMM
        never_actions=frozenset({"hard_ppr"}),
    )
    return host, reports, expect


@case(
    "a Redfish fan redundancy group lost its redundancy and one fan reads below its lower critical threshold: "
    "a fan ticket naming that fan, not the group (review finding 9), the fan's one ticket with its critical "
    "sensor's (issue 16 leftovers)",
    "fan-redundancy-lost",
)
def redfish_fan_redundancy(tmp: Path) -> tuple[SnapHost, list[Report], Expect]:
    from checker.schemas import RedfishRedundancy, SensorReading

    host = SnapHost(tmp)
    group = RedfishRedundancy(name="System Board Fan Redundancy", of="fan", health="Critical", state="Enabled")
    fans = [
        SensorReading(name="Fan1A", kind="fan", status="ok", reading=9000, unit="RPM", thresholds={"lcr": 600}),
        SensorReading(name="Fan2A", kind="fan", status="cr", reading=240, unit="RPM", thresholds={"lcr": 600}),
    ]
    report = with_bmc(host.cycle(0), redfish=RedfishState(service=SERVICE, redundancy=[group]))
    report = report.model_copy(update={"observations": report.observations.model_copy(update={"sensors": fans})})
    expect = Expect(
        "fan-redundancy-lost",
        "ticket",
        # one ticket for Fan2A, titled by whichever rule opened it (sensor-critical-fan's, or the redundancy's)
        title=r"Fan Fan2A past its critical threshold|fan redundancy lost \(System Board Fan Redundancy\), check Fan2A",
        part_type="fan",
        part="Fan2A",
        never=frozenset({"fan-failure"}),
    )
    return host, [report], expect


@case(
    "a DIMM's uncorrectable alarm on an iDRAC whose log shows the chassis opened: the DIMM ticket carries the "
    "intrusions (review note 14)",
    "bmc-dimm-uncorrectable",
)
def bmc_ue_after_intrusion(tmp: Path) -> tuple[SnapHost, list[Report], Expect]:
    host = SnapHost(tmp)
    entries = parse_log_entries(doc("dell-idrac9-r650-sel-entries-chassis-intrusion-post-critical-log-cleared.json"))
    reports = log_after_empty(host, SelState(entries=entries.value, entry_count=16))
    reports.append(with_bmc(host.cycle(2), redfish=inventory(dell_dimm(UncorrectableECCError=True))))
    expect = Expect(
        "bmc-dimm-uncorrectable",
        "ticket",
        title="Replace DIMM DIMM A1: the BMC reports an uncorrectable error",
        part_type="dimm",
        also=_intrusions_on_ticket,
    )
    return host, reports, expect


def _intrusions_on_ticket(_session: Session, _remediation: Remediation | None, ticket: Ticket | None) -> None:
    assert ticket is not None
    opened = ticket.evidence["chassis_intrusion"]
    assert opened
    assert all(row["sensor"] for row in opened)


# -- the second review of the Redfish rules (issue 19) ---------------------------------------------------


@case(
    "correctable errors EDAC counted before the last hourly read, standing still since, do not silence the "
    "iDRAC's correctable-ECC alarm on DIMM A1 an hour later: a ticket (second review, finding 1)",
    "bmc-dimm-ce-alarm",
)
def bmc_ce_alarm_after_old_edac_ce(tmp: Path) -> tuple[SnapHost, list[Report], Expect]:
    host = SnapHost(tmp).real_edac(I10NM)  # 4 CEs on CPU_SrcID#1_MC#3_Chan#0_DIMM#0 (no slot the BMC names)
    reports = [with_bmc(host.cycle(0), redfish=inventory(dell_dimm()))]
    reports.append(with_bmc(host.cycle(60), redfish=inventory(dell_dimm(CorrectableECCError=True))))
    expect = Expect(
        "bmc-dimm-ce-alarm", "ticket", title="correctable-ECC alarm tripped", part="DIMM A1", serial="19949A6B"
    )
    return host, reports, expect


@case(
    "the iDRAC's correctable-ECC alarm on DIMM A1 where EDAC's count rose within the same hour: EDAC's rules "
    "judge, no BMC ticket (second review, finding 1)",
    None,
)
def bmc_ce_alarm_edac_counted_in_hour(tmp: Path) -> tuple[SnapHost, list[Report], Expect]:
    host = SnapHost(tmp).real_edac(I10NM)
    reports = [with_bmc(host.cycle(0), redfish=inventory(dell_dimm()))]
    host.real_edac(I10NM, mc7__dimm0__dimm_ce_count=10)
    reports.append(with_bmc(host.cycle(60), redfish=inventory(dell_dimm(CorrectableECCError=True))))
    return host, reports, Expect(None, never=frozenset({"bmc-dimm-ce-alarm"}))


@case(
    "the host reads BMC 1.17 itself (ipmitool mc info), below the class's 6.0: a reflash; mid-reflash mc info "
    "fails and the BMC's Redfish inventory says 5.10: the version is unknown, no Redfish firmware ticket beside "
    "the reflash (second review, finding 2)",
    "firmware-below-baseline",
)
def firmware_source_stays_when_ipmi_fails(tmp: Path) -> tuple[SnapHost, list[Report], Expect]:
    from checker.parsers.redfish_inventory import firmware_from_collection_id, parse_collection_links

    host = SnapHost(tmp)
    host.baselines = BMC_BASELINE
    host.snap.command(["ipmitool", "mc", "info"], sample("ipmi-mc/ipmitool-mc-info-intel-bmc-fw-1.17.txt"))
    links = parse_collection_links(doc(DELL_FIRMWARE)).value
    served = RedfishState(service=SERVICE, firmware=[f for f in map(firmware_from_collection_id, links) if f])
    reports = [with_bmc(host.cycle(0), redfish=served)]
    host.snap.command(["ipmitool", "mc", "info"], "", rc=1)  # the BMC is being flashed: no answer in-band
    failed = host.cycle(10)
    assert failed.observations.identity is not None
    assert failed.observations.identity.firmware.bmc_firmware is None
    reports.append(with_bmc(failed, redfish=served))
    expect = Expect(
        "firmware-below-baseline",
        "reflash_firmware",
        never=frozenset({"firmware-below-baseline-redfish"}),
        also=no_redfish_firmware_decision,
    )
    return host, reports, expect


def no_redfish_firmware_decision(session: Session, _remediation: Remediation | None, _ticket: Ticket | None) -> None:
    """Not held behind the reflash either: the rule never fires, no decision, no ticket beside it."""
    from sqlalchemy import select

    from remediator.models import Decision

    assert session.scalars(select(Decision).where(Decision.rule_id == "firmware-below-baseline-redfish")).all() == []
    assert not [t for t in session.scalars(select(Ticket)).all() if "Redfish inventory" in t.title]


RECOVERED_AER = (  # the kernel's wording (drivers/pci/pcie/aer.c), as tests/decisions/cases_pcie.py RECOVERED
    "pcieport 0000:00:03.0: AER: Uncorrected (Non-Fatal) error received: 0000:03:00.0\n"
    "mpt3sas 0000:03:00.0: AER: PCIe Bus Error: severity=Uncorrected (Non-Fatal), type=Transaction Layer, "
    "(Requester ID)\n"
    "mpt3sas 0000:03:00.0: AER:   device [1000:00ab] error status/mask=00004000/00000000\n"
    "mpt3sas 0000:03:00.0: AER:    [14] CmpltTO                (First)\n"
    "pcieport 0000:00:03.0: AER: device recovery successful\n"
)


@case(
    "the kernel logged an uncorrected AER on the HBA at 03:00.0, and the BMC a PCI SERR naming 3a:00.0 a minute "
    "later: the AER does not explain another device's entry, the SERR is ticketed (second review, finding 4)",
    "sel-critical-interrupt",
)
def serr_beside_another_devices_aer(tmp: Path) -> tuple[SnapHost, list[Report], Expect]:
    host = SnapHost(tmp)
    first = with_bmc(host.cycle(0), sel=SelState(entries=[], entry_count=0))
    host.kernel_log(RECOVERED_AER)
    aer = with_bmc(host.cycle(0.5), sel=SelState(entries=[], entry_count=0))
    entry = serr_entry()  # dated 08:00:30, the AER's report's time
    logged = with_bmc(host.cycle(1), sel=SelState(entries=[entry], entry_count=1))
    expect = Expect(
        "sel-critical-interrupt",
        "ticket",
        title=r"dt-host-01: the BMC logged a bus or PCI error \(uncorrectable, Critical Interrupt #0x21\)",
        part_type="host",
    )
    return host, [first, aer, logged], expect
