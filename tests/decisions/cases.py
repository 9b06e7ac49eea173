"""One file on purpose: it is the table of cases, one or more per rule of the default pack, read as one
list.

The scenarios: for every rule of the default pack, a host read from real tool output and the
decision the pack must take (and the wrong ones it must not). `CASES` maps a scenario's name to
(the rule it proves, a builder returning the host, its reports in order and what to expect).

Where the corpus has no sample of a state (a counter at a given value, an NVMe warning bit), the
real sample is changed as the host would change it, and the comment says so; where it has none at
all, the project's own text in the tool's format stands in, and says so.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from bench.samples import insert_zen2_mce_records, listing_to_files, ours, read_ttar, sample, signed64
from checker.schemas import Report
from cyborg.actions import ACTIONS as CYBORG_ACTIONS
from cyborg.central import resolve_params
from remediator.models import Host, Remediation, Signal
from tests.builders.rasdaemon import MCE_INSERT, icelake_row, skylake_l2_row
from tests.decisions.harness import Expect, SnapHost
from ticketing.models import Ticket

Builder = Callable[[Path], tuple[SnapHost, list[Report], Expect]]
CASES: dict[str, tuple[str | None, Builder]] = {}

I10NM = "edac-sysfs/i10nm-mc7-dimm0-ce4.txt"
I10NM_LABEL = "CPU_SrcID#1_MC#3_Chan#0_DIMM#0"
CSROW_TTAR = "edac-sysfs/node-exporter-legacy-csrow-layout.ttar"
I7CORE_BURST = "kernel-log/kern-log-i7core-edac-ce-burst-cpu0-channel2.log"
OLD_STORM = "May  7 06:45:21 errol kernel: [21584699.101010] mce: CMCI storm detected: switching to poll mode\n"
NEW_STORM = "May  7 06:45:21 errol kernel: [21584699.101010] mce: CPU0 BANK7 CMCI storm detected\n"


def case(name: str, rule: str | None) -> Callable[[Builder], Builder]:
    def add(build: Builder) -> Builder:
        assert name not in CASES, name
        CASES[name] = (rule, build)
        return build

    return add


def csrow_files(*, mc_name: str, noinfo: int = 0, ce: int = 0) -> dict[str, str]:
    """The node_exporter csrow tree (real layout, hand-made values), UEs zeroed, with the driver's mc_name."""
    files = read_ttar(sample(CSROW_TTAR), "sys/devices/system/edac/mc/")
    files = {k: ("0\n" if "ue_" in k or k.endswith("ue_count") else v) for k, v in files.items()}
    files["mc0/mc_name"] = f"{mc_name}\n"
    files["mc0/ce_noinfo_count"] = f"{noinfo}\n"
    files["mc0/csrow0/ch0_ce_count"] = f"{ce}\n"
    return files


# -- memory -----------------------------------------------------------------------------------


@case("a DIMM at 50 CE/s on the real i10nm listing: drained and ticketed, and no serial guessed", "dimm-ce-storm")
def storm_i10nm(tmp: Path) -> tuple[SnapHost, list[Report], Expect]:
    host = SnapHost(tmp, hardware_class="compute-icx-2s")
    reports = []
    for minute, ce in ((0, 4), (1, 3004), (2, 6004)):  # the listing's counter, moving 50 a second
        host.real_edac(I10NM, mc7__dimm0__dimm_ce_count=ce)
        reports.append(host.cycle(minute))
    # The label map of compute-icx-2s puts mc7 channel 0 in slot B7, which this Supermicro board's
    # dmidecode does not have: the ticket names the EDAC location and no serial, never a neighbour's.
    return (
        host,
        reports,
        Expect("dimm-ce-storm", "drain", title=r"Replace DIMM .*: 50\.0 CE/s", part=I10NM_LABEL, serial=""),
    )


SB_EDAC_LOG = "kernel-log/dmesg-T-sb-edac-sandybridge-ce-read.log"


def sb_edac_files(ce: int) -> dict[str, str]:
    """Ours, in the kernel's sysfs format: sb_edac's mc0 (socket 0's home agent), whose layers are 4
    channels x 3 slots, so channel 2 slot 0 is dimm6; the label is the one the real sb_edac log names."""
    return {
        "mc0/mc_name": "Sandy Bridge SrcID#0_Ha#0\n",
        "mc0/dimm6/dimm_label": "CPU_SrcID#0_Ha#0_Chan#2_DIMM#0\n",
        "mc0/dimm6/dimm_location": "channel 2 slot 0 \n",
        "mc0/dimm6/dimm_mem_type": "Registered-DDR3\n",
        "mc0/dimm6/dimm_ce_count": f"{ce}\n",
        "mc0/dimm6/dimm_ue_count": "0\n",
    }


@case(
    "a DIMM at 50 CE/s on the real X9DRT-P and sb_edac log: its slot, serial and log lines named",
    "dimm-ce-storm",
)
def storm_sb_edac(tmp: Path) -> tuple[SnapHost, list[Report], Expect]:
    host = SnapHost(tmp)  # class x9drt-lab: its label map ties channel 2 slot 0 of mc0 to P1-DIMMC1
    host.kernel_log(sample(SB_EDAC_LOG))
    reports = []
    for minute, ce in ((0, 1), (1, 3001), (2, 6001)):
        host.edac(sb_edac_files(ce), poll_msec=1000)
        reports.append(host.cycle(minute))

    def with_its_logs(session: Session, remediation: Remediation | None, ticket: Ticket | None) -> None:
        assert ticket is not None
        part = ticket.evidence["part"]
        assert (part["certain"], part["locator"], part["manufacturer"]) == (True, "P1-DIMMC1", "Micron")
        lines = [line for event in ticket.evidence["kernel_log"] for line in event.get("lines") or []]
        assert any("CPU_SrcID#0_Ha#0_Chan#2_DIMM#0" in line for line in lines), lines

    return (
        host,
        reports,
        Expect(
            "dimm-ce-storm",
            "drain",
            title=r"Replace DIMM CPU_SrcID#0_Ha#0_Chan#2_DIMM#0: 50\.0 CE/s",
            serial="45402C24",
            also=with_its_logs,
        ),
    )


@case("an uncorrectable error on the real i10nm listing: the host out, the DIMM goes", "dimm-uncorrectable")
def ue_i10nm(tmp: Path) -> tuple[SnapHost, list[Report], Expect]:
    host = SnapHost(tmp, hardware_class="compute-icx-2s")
    host.real_edac(I10NM, mc7__dimm0__dimm_ue_count=1)
    return host, [host.cycle(0)], Expect("dimm-uncorrectable", "drain", title="uncorrectable error", part_type="dimm")


@case("the BMC's uncorrectable ECC in the real S2600 SEL", "sel-memory-uncorrectable")
def ue_sel(tmp: Path) -> tuple[SnapHost, list[Report], Expect]:
    host = SnapHost(tmp)
    listing = sample("ipmi-sel/ipmitool-sel-elist-intel-s2600-uncorrectable-ecc-temp-readings-pcie.txt").splitlines()
    head = [line for line in listing if int(line.split("|")[0], 16) < 0x2CD]
    host.sel("\n".join(head))
    first = host.cycle(0)
    host.sel("\n".join(line for line in listing if line not in head))
    return host, [first, host.cycle(1)], Expect("sel-memory-uncorrectable", "drain", title="uncorrectable ECC")


@case("a CMCI storm after a real EDAC burst: the DIMM's ticket, CMCI left on", "cmci-storm")
def storm_cmci(tmp: Path) -> tuple[SnapHost, list[Report], Expect]:
    host = SnapHost(tmp)
    host.kernel_log(sample(I7CORE_BURST) + OLD_STORM)
    return (
        host,
        [host.cycle(0)],
        Expect(
            "cmci-storm",
            "drain",
            title="CMCI storm",
            part="CPU#0Channel#2_DIMM#0",
            never_actions=frozenset({"tune_error_reporting"}),  # never turn the reporting off
        ),
    )


@case("a 6.8 kernel's storm (5 of 64 polls) on one DIMM's bank: no drain, the rate rules judge the DIMM", None)
def storm_per_bank(tmp: Path) -> tuple[SnapHost, list[Report], Expect]:
    host = SnapHost(tmp)
    host.kernel_log(sample(I7CORE_BURST) + NEW_STORM)  # the real burst: 16 errors on one DIMM, then the storm
    return host, [host.cycle(0)], Expect(None, never=frozenset({"cmci-storm", "cmci-storm-unattributed"}))


@case("a 6.8 kernel's storm that no DIMM's counter explains: no ticket on weaker evidence than the rates", None)
def storm_per_bank_unattributed(tmp: Path) -> tuple[SnapHost, list[Report], Expect]:
    host = SnapHost(tmp)
    host.edac(csrow_files(mc_name="i7 core #0"))
    host.kernel_log(NEW_STORM)
    return host, [host.cycle(0)], Expect(None, never=frozenset({"cmci-storm", "cmci-storm-unattributed"}))


@case("a CMCI storm nothing pins on a DIMM: candidates on the ticket, no serial", "cmci-storm-unattributed")
def storm_unattributed(tmp: Path) -> tuple[SnapHost, list[Report], Expect]:
    host = SnapHost(tmp)
    host.edac(csrow_files(mc_name="i7 core #0"))
    host.kernel_log(OLD_STORM)  # a storm (15 CMCIs within a second) while no DIMM's counter moved
    return (
        host,
        [host.cycle(0)],
        Expect(
            "cmci-storm-unattributed",
            "ticket",
            title="a DIMM or the CPU's cache, not identified; confirm before pulling",
            serial="",
            never_actions=frozenset({"tune_error_reporting"}),
            never=frozenset({"cmci-storm"}),
        ),
    )


@case("a moderate steady CE rate on a DDR4 DIMM: hard PPR", "dimm-ce-ppr")
def ppr(tmp: Path) -> tuple[SnapHost, list[Report], Expect]:
    host = SnapHost(tmp, hardware_class="compute-icx-2s")
    reports = []
    for minute in range(0, 50, 10):  # 0.5 CE/s for 40 minutes
        host.real_edac(I10NM, mc7__dimm0__dimm_ce_count=4 + 300 * minute // 10, mc7__dimm0__dimm_mem_type="DDR4")
        reports.append(host.cycle(minute))
    return host, reports, Expect("dimm-ce-ppr", "hard_ppr", never=frozenset({"dimm-ce-storm"}), also=_ppr_names)


def _ppr_names(session: Session, remediation: Remediation | None, ticket: Ticket | None) -> None:
    """This host's dmidecode does not list the slot the label map names (the DIMM is uncertain), so the step
    carries no other names: the capture repairs only GHES records that name the EDAC label itself
    (tests/remediator/test_ppr_aliases.py has the certain case)."""
    assert remediation is not None
    assert remediation.steps[0].params == {"priority": 3, "dimm": "CPU_SrcID#1_MC#3_Chan#0_DIMM#0"}


@case("corrected errors EDAC cannot pin on a DIMM: the controller's DIMMs as candidates", "edac-unattributed-errors")
def noinfo(tmp: Path) -> tuple[SnapHost, list[Report], Expect]:
    host = SnapHost(tmp)
    reports = []
    for minute in range(0, 50, 10):
        host.edac(csrow_files(mc_name="ie31200", noinfo=2 + 60 * minute))  # 0.1 a second
        reports.append(host.cycle(minute))
    return host, reports, Expect("edac-unattributed-errors", "ticket", title="no known DIMM", part="mc0")


def tuned_to(seconds: int) -> Callable[[Session, Remediation | None, Ticket | None], None]:
    def check(session: Session, remediation: Remediation | None, ticket: Ticket | None) -> None:
        assert remediation is not None
        assert remediation.steps[0].params["edac_poll_s"] == seconds

    return check


@case("i7core polling at the kernel's 1 s: its counters add up, so tuned to the design's 37 s", "edac-polling-interval")
def polling_short(tmp: Path) -> tuple[SnapHost, list[Report], Expect]:
    host = SnapHost(tmp)
    host.edac(csrow_files(mc_name="i7 core #0"), poll_msec=1000)
    return host, [host.cycle(0)], Expect("edac-polling-interval", "tune_error_reporting", also=tuned_to(37))


@case("ie31200 polling at the kernel's 1 s: one error per poll, so a longer interval would hide them", None)
def polling_latched_default(tmp: Path) -> tuple[SnapHost, list[Report], Expect]:
    host = SnapHost(tmp)
    host.edac(csrow_files(mc_name="IE31200"), poll_msec=1000)
    return host, [host.cycle(0)], Expect(None, never_actions=frozenset({"tune_error_reporting"}))


@case("ie31200 left polling every 120 s: back to the kernel's 1 s, never 37 s", "edac-polling-latched-slow")
def polling_latched_slow(tmp: Path) -> tuple[SnapHost, list[Report], Expect]:
    host = SnapHost(tmp)
    host.edac(csrow_files(mc_name="IE31200"), poll_msec=120000)
    return (
        host,
        [host.cycle(0)],
        Expect(
            "edac-polling-latched-slow",
            "tune_error_reporting",
            never=frozenset({"edac-polling-interval-long"}),
            also=tuned_to(1),
        ),
    )


@case("EDAC polling at 1 s on skx, which logs each error from the MCE decode chain: left alone", None)
def polling_skx(tmp: Path) -> tuple[SnapHost, list[Report], Expect]:
    host = SnapHost(tmp)
    host.edac(csrow_files(mc_name="Skylake Socket#0 IMC#0"), poll_msec=1000)
    return host, [host.cycle(0)], Expect(None)


@case("i7core polling every 120 s: its aggregation may overflow, tuned to 37 s", "edac-polling-interval-long")
def polling_long(tmp: Path) -> tuple[SnapHost, list[Report], Expect]:
    host = SnapHost(tmp)
    host.edac(csrow_files(mc_name="i7 core #0"), poll_msec=120000)
    return host, [host.cycle(0)], Expect("edac-polling-interval-long", "tune_error_reporting", also=tuned_to(37))


# -- machine checks ---------------------------------------------------------------------------
# Rows in rasdaemon's mce_record schema, modelled on the corpus's decoded machine checks (the Ice
# Lake memory-controller event, the Skylake-SP bank-11 cache error; tests/builders/rasdaemon.py
# says how). The corpus has no L1 record: `core_l1_row` is the
# Skylake row as a core's own instruction cache logs it (MCACOD 0x0151: L1, instruction fetch).

CORE_L1_STATUS = 0x9000004000010151  # valid, enabled, corrected; L1 instruction-fetch error
SHARED_CE_STATUS = 0x900000000003110A  # the Skylake-SP bank-11 error, corrected (UC and PCC clear)
MEMORY_UE_STATUS = 0xBC00004200800091  # the Ice Lake event, uncorrected, on channel 1


def mce_rows(host: SnapHost, rows: list[tuple[object, ...]]) -> None:
    conn = host.snap.rasdaemon()
    conn.executemany(MCE_INSERT, rows)
    conn.commit()
    conn.close()


def with_status(row: tuple[object, ...], row_id: int, status: int, **changes: object) -> tuple[object, ...]:
    fields = [row_id, *row[1:]]
    fields[3] = signed64(status)
    if "cpu" in changes:
        fields[8] = changes["cpu"]
    if "bank" in changes:
        fields[12] = changes["bank"]
    if "addr" in changes:
        fields[4] = changes["addr"]
    if "message" in changes:
        fields[14], fields[15] = changes["message"], "Corrected_error"
    return tuple(fields)


def core_l1_row(row_id: int, cpu: int) -> tuple[object, ...]:
    return with_status(
        skylake_l2_row(row_id),
        row_id,
        CORE_L1_STATUS,
        cpu=cpu,
        bank=0,
        message="Instruction CACHE Level-1 Instruction-Fetch Error",
    )


def mce_host(tmp: Path) -> tuple[SnapHost, Report]:
    """A host whose rasdaemon already holds the real Zen 2 records (ids 83-85): its first report only
    sets the cursor."""
    host = SnapHost(tmp)
    conn = host.snap.rasdaemon()
    insert_zen2_mce_records(conn)
    conn.commit()
    conn.close()
    return host, host.cycle(0)


@case(
    "an uncorrected memory error only the machine-check log holds: the host out, the slot confirmed",
    "mce-memory-uncorrected",
)
def mce_memory_ue(tmp: Path) -> tuple[SnapHost, list[Report], Expect]:
    host, first = mce_host(tmp)
    mce_rows(host, [with_status(icelake_row(86), 86, MEMORY_UE_STATUS)])
    return (
        host,
        [first, host.cycle(1)],
        Expect("mce-memory-uncorrected", "drain", title="uncorrected error in the machine-check log", serial=""),
    )


@case("a hundred corrected memory errors in a day that EDAC never counted: a ticket", "mce-memory-corrected")
def mce_memory_ce(tmp: Path) -> tuple[SnapHost, list[Report], Expect]:
    host, first = mce_host(tmp)
    reports = [first]
    for batch in range(4):  # 25 an hour, at different addresses of the same channel
        start = 86 + 25 * batch
        mce_rows(
            host,
            [
                with_status(icelake_row(n), n, 0x8C00004200800090, addr=0x1EFA4C7CC40 + 64 * n)
                for n in range(start, start + 25)
            ],
        )
        reports.append(host.cycle(60 * (batch + 1)))
    return (
        host,
        reports,
        Expect(
            "mce-memory-corrected",
            "ticket",
            title=r"socket1 bank13 channel0: 100 in a day",
            serial="",
            never=frozenset({"mce-memory-uncorrected"}),  # corrected errors never drain the host
        ),
    )


@case("99 corrected memory errors in the machine-check log within a day: below the threshold, nothing", None)
def mce_memory_ce_below(tmp: Path) -> tuple[SnapHost, list[Report], Expect]:
    host, first = mce_host(tmp)
    mce_rows(host, [with_status(icelake_row(n), n, 0x8C00004200800090) for n in range(86, 185)])
    return host, [first, host.cycle(60)], Expect(None)


@case("the real Skylake-SP cache error, uncorrected: the host out, the CPU checked", "mce-cpu-uncorrected")
def mce_cpu_ue(tmp: Path) -> tuple[SnapHost, list[Report], Expect]:
    host, first = mce_host(tmp)
    mce_rows(host, [skylake_l2_row(86)])
    return (
        host,
        [first, host.cycle(1)],
        Expect(
            "mce-cpu-uncorrected",
            "drain",
            title="Uncorrected CPU machine check on .* socket0 bank11",
            part_type="cpu",
            never_actions=frozenset({"offline_cpu"}),  # a shared cache: no one core to take out
        ),
    )


@case(
    "one core's own L1 cache correcting 18 errors in a day: that core offline, and a ticket", "mce-cpu-core-corrected"
)
def mce_core(tmp: Path) -> tuple[SnapHost, list[Report], Expect]:
    host, first = mce_host(tmp)
    reports = [first]
    for batch in range(3):
        start = 86 + 6 * batch
        mce_rows(host, [core_l1_row(n, cpu=5) for n in range(start, start + 6)])
        reports.append(host.cycle(120 * (batch + 1)))

    def offlines_cpu5(session: Session, remediation: Remediation | None, ticket: Ticket | None) -> None:
        assert remediation is not None
        step = remediation.steps[0]
        params = resolve_params(CYBORG_ACTIONS["offline_cpu"], step.params, remediation.evidence or {})
        assert params == {"cpu": 5, "core": True}

    return (
        host,
        reports,
        Expect(
            "mce-cpu-core-corrected",
            "offline_cpu",
            never=frozenset({"mce-cpu-uncorrected", "mce-cpu-shared-corrected"}),
            also=offlines_cpu5,
        ),
    )


@case(
    "a shared cache correcting 18 errors in a day, logged by many CPUs: a ticket, no core offlined",
    "mce-cpu-shared-corrected",
)
def mce_shared(tmp: Path) -> tuple[SnapHost, list[Report], Expect]:
    host, first = mce_host(tmp)
    rows = [with_status(skylake_l2_row(n), n, SHARED_CE_STATUS, cpu=n % 8) for n in range(86, 104)]
    mce_rows(host, rows)
    return (
        host,
        [first, host.cycle(30)],
        Expect(
            "mce-cpu-shared-corrected",
            "ticket",
            title="CPU on .* socket0 bank11: 18 corrected machine checks",
            part_type="cpu",
            never_actions=frozenset({"offline_cpu"}),
            never=frozenset({"mce-cpu-core-corrected"}),
        ),
    )


def dumps(data: object) -> str:
    return json.dumps(data, indent=2)


# -- power, cooling, sensors -------------------------------------------------------------------


def two_sel_cycles(tmp: Path, path: str, first: Callable[[int], bool]) -> tuple[SnapHost, list[Report]]:
    """A host whose SEL (a real listing) holds the entries `first` keeps at its first cycle, and the rest
    at its second: only the second's are news."""
    host = SnapHost(tmp)
    listing = [line for line in sample(path).splitlines() if line.strip() and line.split("|")[0].strip().isalnum()]
    listing = [line for line in listing if line.split("|")[0].strip().lower() != "id"]
    head = [line for line in listing if first(int(line.split("|")[0].strip(), 16))]
    host.sel("\n".join(head))
    reports = [host.cycle(0)]
    host.sel("\n".join(line for line in listing if line not in head))
    reports.append(host.cycle(1))
    return host, reports


def csv_sel_cycles(
    tmp: Path, path: str, first: Callable[[int], bool], *, hostname: str = "dt-host-01"
) -> tuple[SnapHost, list[Report]]:
    host = SnapHost(tmp, hostname)
    listing = [line for line in sample(path).splitlines() if line.strip()]
    head = [line for line in listing if first(int(line.split(",")[0]))]
    host.sel("\n".join(head))
    reports = [host.cycle(0)]
    host.sel("\n".join(line for line in listing if line not in head))
    reports.append(host.cycle(1))
    return host, reports


@case("a PSU that failed (FreeIPMI's listing): replace the power supply", "psu-failure")
def psu_failed(tmp: Path) -> tuple[SnapHost, list[Report], Expect]:
    host, reports = two_sel_cycles(tmp, "ipmi-sel/ipmi-sel-freeipmi-psu-failure-os-stop-postinit.txt", lambda i: i <= 3)
    return host, reports, Expect("psu-failure", "ticket", title="Replace power supply PS2", part_type="psu")


@case("a PSU that lost its AC input (the real CSV SEL): a feed check, no PSU replaced", "psu-input-lost")
def psu_input(tmp: Path) -> tuple[SnapHost, list[Report], Expect]:
    host, reports = csv_sel_cycles(
        tmp, "ipmi-sel/ipmitool-c-sel-list-intel-psu-ac-lost-redundancy.csv", lambda i: i <= 4
    )
    return (
        host,
        reports,
        Expect(
            "psu-input-lost",
            "ticket",
            title="Power feed check",
            part_type="power_feed",
            never=frozenset({"psu-failure", "power-unit-fault"}),  # its redundancy was lost because of it
        ),
    )


@case("the power unit's redundancy lost with no PSU event to explain it: check PSUs and feeds", "power-unit-fault")
def power_unit(tmp: Path) -> tuple[SnapHost, list[Report], Expect]:
    path = "ipmi-sel/ipmitool-sel-elist-intel-s2600-fan-redundancy-bmcfw-psu-intrusion.txt"
    host = SnapHost(tmp)
    listing = [line for line in sample(path).splitlines() if line.strip()]
    host.sel("\n".join(line for line in listing if int(line.split("|")[0], 16) <= 0xF))
    first = host.cycle(0)
    host.sel("\n".join(line for line in listing if 0x10 <= int(line.split("|")[0], 16) <= 0x11))
    return (
        host,
        [first, host.cycle(1)],
        Expect(
            "power-unit-fault",
            "ticket",
            title="power redundancy lost",
            part_type="power",
            never=frozenset({"psu-failure"}),
        ),
    )


@case("a fan below its lower critical threshold in the real S2600 SEL: replace the fan", "fan-failure")
def fan(tmp: Path) -> tuple[SnapHost, list[Report], Expect]:
    path = "ipmi-sel/ipmitool-sel-elist-intel-s2600-fan-redundancy-bmcfw-psu-intrusion.txt"
    host = SnapHost(tmp)
    listing = [line for line in sample(path).splitlines() if line.strip()]
    host.sel("\n".join(line for line in listing if int(line.split("|")[0], 16) <= 0x3))
    first = host.cycle(0)
    host.sel("\n".join(line for line in listing if 0x4 <= int(line.split("|")[0], 16) <= 0xC))
    return host, [first, host.cycle(1)], Expect("fan-failure", "ticket", title="Replace fan", part_type="fan")


@case(
    "a CPU past its upper critical temperature (the real sensor list): an airflow check", "sensor-critical-temperature"
)
def hot_cpu(tmp: Path) -> tuple[SnapHost, list[Report], Expect]:
    host = SnapHost(tmp)
    host.sensors(sample("thermal/ipmitool-sensor-list-cpu2-temp-cr-above-upper-critical.txt"))
    return (
        host,
        [host.cycle(0)],
        Expect("sensor-critical-temperature", "ticket", title=r"Airflow check .*CPU2 Temp at 33", part_type="airflow"),
    )


SUPERMICRO_SENSORS = "thermal/ipmitool-sensor-list-supermicro-dual-socket-cpu2-temp-nr-lowered-thresholds.txt"


def supermicro_sensors(**changes: str) -> str:
    """The real Supermicro sensor list with CPU2 Temp back within its (lowered) thresholds, and some
    sensors set to a state the corpus has no sample of (the line as ipmitool prints it)."""
    lines = sample(SUPERMICRO_SENSORS).splitlines()
    out = []
    for line in lines:
        name = line.split("|")[0].strip()
        if name == "CPU2 Temp":
            line = line.replace("| 33.000     |", "| 29.000     |").replace("| nr    |", "| ok    |")
        out.append(changes.get(name, line))
    return "\n".join(out) + "\n"


@case("a fan sensor critical at 0 RPM (the Supermicro list, FAN1 stopped): replace the fan", "sensor-critical-fan")
def stopped_fan(tmp: Path) -> tuple[SnapHost, list[Report], Expect]:
    host = SnapHost(tmp)
    stopped = (
        "FAN1             | 0.000      | RPM        | cr    | 300.000   | 500.000   | 700.000   "
        "| 25300.000 | 25400.000 | 25500.000 "
    )
    host.sensors(supermicro_sensors(FAN1=stopped))
    return host, [host.cycle(0)], Expect("sensor-critical-fan", "ticket", title="Fan FAN1", part_type="fan")


@case("a 12 V rail below its lower critical threshold (the Supermicro list): a power check", "sensor-critical-power")
def low_rail(tmp: Path) -> tuple[SnapHost, list[Report], Expect]:
    host = SnapHost(tmp)
    sagging = (
        "12V              | 10.200     | Volts      | cr    | 10.173    | 10.299    | 10.740    "
        "| 12.945    | 13.260    | 13.386    "
    )
    host.sensors(supermicro_sensors(**{"12V": sagging}))
    return (
        host,
        [host.cycle(0)],
        Expect("sensor-critical-power", "ticket", title="12V past its critical", part_type="power"),
    )


@case("the real Supermicro sensor list with every sensor within its thresholds: nothing", None)
def healthy_sensors(tmp: Path) -> tuple[SnapHost, list[Report], Expect]:
    host = SnapHost(tmp)
    host.sensors(supermicro_sensors())
    return host, [host.cycle(0)], Expect(None)


# -- disks ------------------------------------------------------------------------------------

SEAGATE_304 = "smartctl-json/sata-hdd-seagate-st3500418as-304-reallocated.json"
SAMSUNG_NVME = "smartctl-json/nvme-samsung970evo-media-errors.json"
SEAGATE_SCSI = "smartctl-json/scsi-seagate-st373453lc-260-grown-defects.json"


def smart_json(path: str, change: Callable[[dict[str, object]], None] | None = None) -> str:
    """A real smartctl JSON answer, changed as the drive's next answer would be (None: as it is)."""
    data = json.loads(sample(path))
    if change is not None:
        change(data)
    return json.dumps(data)


def ata_attribute(data: dict[str, object], attribute: int, raw: int) -> None:
    table = data["ata_smart_attributes"]["table"]  # type: ignore[index]
    for row in table:  # type: ignore[attr-defined]
        if row["id"] == attribute:
            row["raw"]["value"] = raw
            row["raw"]["string"] = str(raw)


def nvme_log(**fields: int) -> Callable[[dict[str, object]], None]:
    def change(data: dict[str, object]) -> None:
        data["nvme_smart_health_information_log"].update(fields)  # type: ignore[attr-defined]

    return change


def disk_cycles(
    tmp: Path, device: str, kind: str, protocol: str, answers: list[str], minutes: list[int]
) -> tuple[SnapHost, list[Report]]:
    host = SnapHost(tmp)
    reports = []
    for text, minute in zip(answers, minutes, strict=True):
        host.disks({device: (kind, protocol, text)})
        reports.append(host.cycle(minute))
    return host, reports


@case("the drive says it is failing (the 304-sector Seagate, now FAILED): replace the disk", "disk-smart-failing")
def failing(tmp: Path) -> tuple[SnapHost, list[Report], Expect]:
    def fails(data: dict[str, object]) -> None:
        data["smart_status"] = {"passed": False}
        data["smartctl"]["exit_status"] = 8  # type: ignore[index]

    host, reports = disk_cycles(tmp, "/dev/sda", "sat", "ATA", [smart_json(SEAGATE_304, fails)], [0])
    return host, reports, Expect("disk-smart-failing", "ticket", title="SMART says failing", part_type="disk")


@case("a drive that has carried 304 reallocated sectors for years: nothing (only growth is news)", None)
def old_reallocations(tmp: Path) -> tuple[SnapHost, list[Report], Expect]:
    text = smart_json(SEAGATE_304)
    host, reports = disk_cycles(tmp, "/dev/sda", "sat", "ATA", [text, text, text], [0, 60, 600])
    return host, reports, Expect(None)


@case("the real Seagate reallocating 8 more sectors an hour: replace the disk", "disk-reallocated-growing")
def reallocating(tmp: Path) -> tuple[SnapHost, list[Report], Expect]:
    answers = [smart_json(SEAGATE_304, lambda d, n=n: ata_attribute(d, 5, n)) for n in (304, 312, 320)]
    host, reports = disk_cycles(tmp, "/dev/sda", "sat", "ATA", answers, [0, 60, 120])
    return (
        host,
        reports,
        Expect("disk-reallocated-growing", "ticket", title="8 sectors reallocated in a day", part_type="disk"),
    )


@case("pending sectors appearing on the real Seagate: replace the disk", "disk-pending-growing")
def pending(tmp: Path) -> tuple[SnapHost, list[Report], Expect]:
    answers = [smart_json(SEAGATE_304, lambda d, n=n: ata_attribute(d, 197, n)) for n in (0, 6, 12)]
    host, reports = disk_cycles(tmp, "/dev/sda", "sat", "ATA", answers, [0, 60, 120])
    return host, reports, Expect("disk-pending-growing", "ticket", title="12 new unreadable sectors", part_type="disk")


@case("the real SAS drive's grown defect list growing: replace the disk", "disk-grown-defects-growing")
def grown(tmp: Path) -> tuple[SnapHost, list[Report], Expect]:
    def defects(n: int) -> Callable[[dict[str, object]], None]:
        def change(data: dict[str, object]) -> None:
            data["scsi_grown_defect_list"] = n

        return change

    answers = [smart_json(SEAGATE_SCSI, defects(n)) for n in (260, 265, 270)]
    host, reports = disk_cycles(tmp, "/dev/sdb", "scsi", "SCSI", answers, [0, 60, 120])
    return host, reports, Expect("disk-grown-defects-growing", "ticket", title="10 grown defects", part_type="disk")


@case("new media errors on the real Samsung NVMe: replace it", "nvme-media-errors-growing")
def media(tmp: Path) -> tuple[SnapHost, list[Report], Expect]:
    answers = [smart_json(SAMSUNG_NVME, nvme_log(media_errors=n)) for n in (7, 9)]
    host, reports = disk_cycles(tmp, "/dev/nvme0", "nvme", "NVMe", answers, [0, 60])
    return host, reports, Expect("nvme-media-errors-growing", "ticket", title="2 new media errors", part_type="disk")


@case("an NVMe whose reliability degraded (critical warning bit 2): replace it", "nvme-critical-warning")
def degraded(tmp: Path) -> tuple[SnapHost, list[Report], Expect]:
    host, reports = disk_cycles(
        tmp, "/dev/nvme0", "nvme", "NVMe", [smart_json(SAMSUNG_NVME, nvme_log(critical_warning=4))], [0]
    )
    return host, reports, Expect("nvme-critical-warning", "ticket", title="critical warning 4", part_type="disk")


@case("an NVMe at 4 % spare with a 10 % threshold: replace it", "nvme-spare-low")
def spare(tmp: Path) -> tuple[SnapHost, list[Report], Expect]:
    host, reports = disk_cycles(
        tmp, "/dev/nvme0", "nvme", "NVMe", [smart_json(SAMSUNG_NVME, nvme_log(available_spare=4))], [0]
    )
    return host, reports, Expect("nvme-spare-low", "ticket", title="spare at 4%", part_type="disk")


@case("an NVMe over its temperature threshold (bit 1 only): an airflow check, not a new drive", "nvme-temperature")
def hot_nvme(tmp: Path) -> tuple[SnapHost, list[Report], Expect]:
    hot = smart_json(SAMSUNG_NVME, nvme_log(critical_warning=2, temperature=81))
    host, reports = disk_cycles(tmp, "/dev/nvme0", "nvme", "NVMe", [hot], [0])
    return (
        host,
        reports,
        Expect(
            "nvme-temperature",
            "ticket",
            title="Airflow check .* outside its temperature thresholds",
            part_type="airflow",
            never=frozenset({"nvme-critical-warning", "disk-smart-failing"}),
        ),
    )


# -- the operating system ---------------------------------------------------------------------

KERNEL_LOG = "kernel-log/"


def dmesg(lines: list[str], at_s: float) -> str:
    """Lines as `dmesg` prints them, a millisecond apart from `at_s` seconds after boot."""
    return "".join(f"[{at_s + i * 0.001:12.6f}] {line}\n" for i, line in enumerate(lines))


def panic_lines(cpu: int, at_s: float) -> str:
    """An oops and the panic after it, in the kernel's wording (the corpus's one panic is a hard lockup's):
    the project's own text, as `dmesg` prints it."""
    lines = [
        "BUG: kernel NULL pointer dereference, address: 0000000000000008",
        "Oops: 0000 [#1] PREEMPT SMP NOPTI",
        f"CPU: {cpu} PID: 0 Comm: swapper/{cpu} Not tainted 6.1.0-28-amd64 #1",
        "RIP: 0010:tcp_rearm_rto+0x2f/0xe0",
        "Kernel panic - not syncing: Fatal exception in interrupt",
    ]
    return dmesg(lines, at_s)


@case("a panic read from the last boot: the host already restarted, a person investigates", "kernel-panic")
def panicked(tmp: Path) -> tuple[SnapHost, list[Report], Expect]:
    host = SnapHost(tmp)
    host.kernel_log(panic_lines(3, 500.0))
    return (
        host,
        [host.cycle(0)],
        Expect(
            "kernel-panic",
            "ticket",
            title="panicked and restarted",
            never=frozenset({"hardware-fatal-panic"}),  # an oops's panic is the kernel's, not the board's
            never_actions=frozenset({"reboot"}),
        ),
    )


@case("a second panic within a week: reinstall, approved by a person", "kernel-panic-repeated")
def panicked_again(tmp: Path) -> tuple[SnapHost, list[Report], Expect]:
    host = SnapHost(tmp)
    host.kernel_log(panic_lines(3, 500.0))
    first = host.cycle(0)
    host.kernel_log(panic_lines(5, 520.0))
    return (
        host,
        [first, host.cycle(60)],
        Expect(
            "kernel-panic-repeated",
            "reimage",
            never=frozenset({"hardware-fatal-panic"}),
            never_actions=frozenset({"reboot"}),
        ),
    )


def hardware_panic_lines(cpu: int, at_s: float) -> str:
    """A fatal machine check's panic in the kernel's wording (mce/core.c), the project's own text."""
    lines = [
        f"mce: [Hardware Error]: CPU {cpu}: Machine Check Exception: 5 Bank 7: be00000000800090",
        "mce: [Hardware Error]: RIP !INEXACT! 10:<ffffffff8106d3a1> {native_safe_halt+0x1/0x10}",
        "Kernel panic - not syncing: Fatal machine check",
    ]
    return dmesg(lines, at_s)


@case("two panics in a week, both fatal machine checks: a hardware ticket, never a reimage", "hardware-fatal-panic")
def hardware_panics(tmp: Path) -> tuple[SnapHost, list[Report], Expect]:
    host = SnapHost(tmp)
    host.kernel_log(hardware_panic_lines(3, 500.0))
    first = host.cycle(0)
    host.kernel_log(hardware_panic_lines(5, 520.0))
    return (
        host,
        [first, host.cycle(60)],
        Expect(
            "hardware-fatal-panic",
            "ticket",
            title="panicked on a hardware error",
            never=frozenset({"kernel-panic", "kernel-panic-repeated"}),
            never_actions=frozenset({"reimage", "reboot"}),
        ),
    )


@case("the real soft lockup, three times in a day: a warm reboot", "soft-lockups")
def lockups(tmp: Path) -> tuple[SnapHost, list[Report], Expect]:
    host = SnapHost(tmp)
    reports = []
    for minute in (0, 20, 40):
        host.kernel_log(sample(KERNEL_LOG + "dmesg-soft-lockup-supermicro-x10qbi-4.15.log"))
        reports.append(host.cycle(minute))
    return host, reports, Expect("soft-lockups", "reboot")


@case("the real hard lockup (the NMI watchdog's panic): a person, with the log", "hard-lockup")
def hard_lockup(tmp: Path) -> tuple[SnapHost, list[Report], Expect]:
    host = SnapHost(tmp)
    host.kernel_log(sample(KERNEL_LOG + "dmesg-hard-lockup-panic-hp-microserver-gen8-3.10.log"))
    return (
        host,
        [host.cycle(0)],
        Expect(
            "hard-lockup",
            "ticket",
            title="hard lockup",
            never=frozenset({"kernel-panic", "kernel-panic-repeated"}),  # its panic is the hardware's
            never_actions=frozenset({"reboot", "power_cycle", "reimage"}),
        ),
    )


@case("the real hung tasks (five in one boot): a person, no reboot that would lose the traces", "hung-tasks")
def hung(tmp: Path) -> tuple[SnapHost, list[Report], Expect]:
    host = SnapHost(tmp)
    host.kernel_log(sample(KERNEL_LOG + "dmesg-hung-task-multiple-debian-4.19-tainted.log"))
    return (
        host,
        [host.cycle(0)],
        Expect("hung-tasks", "ticket", title="blocked for minutes", never_actions=frozenset({"reboot"})),
    )


@case("the real thermal throttling (ten CPUs throttled): an airflow check", "thermal-throttling")
def throttled(tmp: Path) -> tuple[SnapHost, list[Report], Expect]:
    host = SnapHost(tmp)
    host.kernel_log(sample(KERNEL_LOG + "dmesg-H-thermal-throttle-no-prefix-relative-ts.log"))
    return (
        host,
        [host.cycle(0)],
        Expect("thermal-throttling", "ticket", title="throttled for heat", part_type="airflow"),
    )


# -- network and PCIe -------------------------------------------------------------------------

FLAPS = KERNEL_LOG + "dmesg-nic-link-flap-and-netdev-watchdog-new-format.log"


@case("the real port that dropped its link, three times in a day: its cable, optic, switch port", "nic-link-flapping")
def flapping(tmp: Path) -> tuple[SnapHost, list[Report], Expect]:
    host = SnapHost(tmp)
    down = "\n".join(line for line in sample(FLAPS).splitlines() if "Link is" in line) + "\n"
    reports = []
    for minute in (0, 30, 60):
        host.kernel_log(down)
        reports.append(host.cycle(minute))
    return host, reports, Expect("nic-link-flapping", "ticket", title="Link flapping on .* eth0", part_type="nic")


@case("the real netdev watchdog timeouts (twice): the NIC, its firmware or slot", "nic-tx-timeouts")
def tx_timeouts(tmp: Path) -> tuple[SnapHost, list[Report], Expect]:
    host = SnapHost(tmp)
    host.kernel_log(sample(FLAPS))
    return (
        host,
        [host.cycle(0)],
        Expect("nic-tx-timeouts", "ticket", title="Transmit timeouts on .* eth0", part_type="nic"),
    )


@case(
    "the real uncorrectable AER of a root port, an ACS violation (Proxmox passthrough): a ticket, no drain",
    "pcie-aer-uncorrected-in-service",
)
def aer_uncorrected(tmp: Path) -> tuple[SnapHost, list[Report], Expect]:
    host = SnapHost(tmp)
    host.kernel_log(
        sample("pcie/journal-aer-ratelimit-multiple-correctable-headerof-uncorrectable-acsviol-kernel7-pve.log")
    )
    return (
        host,
        [host.cycle(0)],
        Expect(
            "pcie-aer-uncorrected-in-service",
            "ticket",
            title="PCIe uncorrected error on .* 0000:80:1b.4 \\(config\\)",
            part_type="pcie_device",
            never=frozenset({"pcie-aer-uncorrected"}),
            never_actions=frozenset({"drain"}),
        ),
    )  # the configuration fault does not drain (the PCIe review's S1: remediator/derive/aer_disposition.py)


AER_INSERT = "INSERT INTO aer_event (id, timestamp, dev_name, err_type, err_msg) VALUES (?, ?, ?, ?, ?)"


@case("an uncorrected AER only rasdaemon recorded (no kernel log read): the same decision", "pcie-aer-uncorrected")
def aer_from_rasdaemon(tmp: Path) -> tuple[SnapHost, list[Report], Expect]:
    """rasdaemon's aer_event rows, ours in its schema, for the root port of the real ACS-violation log."""
    host = SnapHost(tmp)
    conn = host.snap.rasdaemon()
    conn.execute(AER_INSERT, (7, "2026-09-01 07:50:00 +0000", "0000:80:1b.4", "Corrected", "Receiver Error"))
    conn.commit()
    first = host.cycle(0)  # its history: the cursor only
    conn.execute(
        AER_INSERT, (8, "2026-09-01 08:00:30 +0000", "0000:80:1b.4", "Uncorrected (Non-Fatal)", "Malformed TLP")
    )  # the trace event's wording; an ACS Violation would be a configuration fault (no drain)
    conn.commit()
    conn.close()

    def from_rasdaemon(session: Session, remediation: Remediation | None, ticket: Ticket | None) -> None:
        assert remediation is not None
        assert remediation.signal is not None
        assert remediation.signal["detail"]["source"].startswith("rasdaemon aer_event")
        assert "Malformed TLP" in remediation.signal["detail"]["lines"][0]

    return (
        host,
        [first, host.cycle(1)],
        Expect(
            "pcie-aer-uncorrected",
            "drain",
            title="PCIe uncorrected error on .* 0000:80:1b.4",
            part_type="pcie_device",
            also=from_rasdaemon,
        ),
    )


@case("a root port logging the real corrected AER wording a hundred times a day: a ticket", "pcie-aer-corrected")
def aer_corrected(tmp: Path) -> tuple[SnapHost, list[Report], Expect]:
    host = SnapHost(tmp)
    text = sample("pcie/dmesg-aer-corrected-data-link-timeout-transmitter-id-haswell-pch.log")
    reports = []
    for minute in range(0, 340, 10):  # its three errors every ten minutes (the kernel rate-limits more)
        host.kernel_log(text)
        reports.append(host.cycle(minute))
    return (
        host,
        reports,
        Expect(
            "pcie-aer-corrected", "ticket", title="PCIe corrected errors on .* 0000:00:1c.1", part_type="pcie_device"
        ),
    )


@case("the real corrected AER three times: a trickle, nothing", None)
def aer_trickle(tmp: Path) -> tuple[SnapHost, list[Report], Expect]:
    host = SnapHost(tmp)
    host.kernel_log(sample("pcie/dmesg-aer-corrected-data-link-timeout-transmitter-id-haswell-pch.log"))
    return host, [host.cycle(0)], Expect(None)


# -- latency and memory tiers -----------------------------------------------------------------

LAPTOP_IRQS = "proc-interrupts/laptop-i7-4cpu-ir-ioapic-mcp2400.txt"
ISOLATING = "BOOT_IMAGE=/vmlinuz-6.1.0-28-amd64 root=/dev/sda1 ro isolcpus=managed_irq,domain,2-3 nohz_full=2-3\n"


def interrupts_grown(row: str, per_cpu: dict[int, int]) -> str:
    """The real /proc/interrupts with one row's counters on some CPUs grown by `per_cpu` (a minute later)."""
    out = []
    for line in sample(LAPTOP_IRQS).splitlines():
        name, _, rest = line.partition(":")
        if name.strip() == row:
            fields = rest.split()
            for cpu, more in per_cpu.items():
                fields[cpu] = str(int(fields[cpu]) + more)
            line = f"{name}:" + "  ".join(f"{f:>9}" if f.isdigit() else f for f in fields)
        out.append(line)
    return "\n".join(out) + "\n"


def latency_host(tmp: Path, affinity: str) -> SnapHost:
    host = SnapHost(tmp)
    host.file("/proc/cmdline", ISOLATING)
    host.file("/proc/interrupts", sample(LAPTOP_IRQS))
    host.snap.files("/proc/irq", {"16/smp_affinity_list": affinity, "43/smp_affinity_list": "0-1\n"})
    return host


@case("device IRQs landing on isolated cores at hundreds a second: moved to housekeeping cores", "isolated-core-irqs")
def isolated_irqs(tmp: Path) -> tuple[SnapHost, list[Report], Expect]:
    host = latency_host(tmp, "2-3\n")  # a queue the kernel pins: its affinity is left alone, its rate is not
    first = host.cycle(0)
    host.file("/proc/interrupts", interrupts_grown("43", {2: 24000, 3: 30000}))
    return host, [first, host.cycle(1)], Expect("isolated-core-irqs", "repair_irq_affinity")


@case("an IRQ allowed on isolated and housekeeping cores (the real affinity 0-3): narrowed", "irq-affinity-isolated")
def affinity(tmp: Path) -> tuple[SnapHost, list[Report], Expect]:
    host = latency_host(tmp, "0-3\n")
    return host, [host.cycle(0)], Expect("irq-affinity-isolated", "repair_irq_affinity")


@case("TLB shootdowns on isolated cores: the workload's owner, never an IRQ move", "isolated-core-tlb-shootdowns")
def tlb(tmp: Path) -> tuple[SnapHost, list[Report], Expect]:
    host = latency_host(tmp, "2-3\n")
    # The processes on the isolated cores: our /proc tree in the kernel's formats (the corpus has none),
    # where "trader" has threads on CPUs 2 and 3 and "feed) handler" one on CPU 3.
    host.snap.files("/", listing_to_files(ours("proc-isolated-workload.txt"), "/"))
    first = host.cycle(0)
    host.file("/proc/interrupts", interrupts_grown("TLB", {2: 600, 3: 540}))

    def names_the_process(session: Session, remediation: Remediation | None, ticket: Ticket | None) -> None:
        assert remediation is not None
        assert remediation.signal is not None
        detail = remediation.signal["detail"]
        assert detail["processes"][0]["pid"] == 4242
        assert detail["processes"][0]["comm"] == "trader"
        assert detail["processes_complete"] is True

    return (
        host,
        [first, host.cycle(1)],
        Expect(
            "isolated-core-tlb-shootdowns",
            "ticket",
            title=r"Workload trader \(pid 4242\).* on .*: TLB shootdowns on isolated cpu",
            part_type="workload",
            never_actions=frozenset({"repair_irq_affinity"}),
            also=names_the_process,
        ),
    )


CXL_NODES = {
    "node0/cpulist": "0-3\n",
    "node0/meminfo": "Node 0 MemTotal:       65536000 kB\nNode 0 MemFree:        1000000 kB\n",
    "node1/cpulist": "\n",
    "node1/meminfo": "Node 1 MemTotal:      131072000 kB\nNode 1 MemFree:       131000000 kB\n",
}


def cxl_host(tmp: Path, *, demotion: str, weights: tuple[str, str]) -> SnapHost:
    """A CPU-less (CXL) memory node beside the CPUs' (sysfs in the kernel's format; the project's own tree)."""
    host = SnapHost(tmp)
    host.snap.files("/sys/devices/system/node", CXL_NODES)
    host.file("/sys/kernel/mm/numa/demotion_enabled", demotion)
    host.file("/proc/sys/kernel/numa_balancing", "2\n")
    host.snap.files("/sys/kernel/mm/mempolicy/weighted_interleave", {"node0": weights[0], "node1": weights[1]})
    return host


@case("a CXL node with demotion off: demotion on", "cxl-demotion-disabled")
def demotion(tmp: Path) -> tuple[SnapHost, list[Report], Expect]:
    host = cxl_host(tmp, demotion="false\n", weights=("5\n", "1\n"))
    return host, [host.cycle(0)], Expect("cxl-demotion-disabled", "enable_demotion")


@case(
    "DRAM and CXL interleaved 1:1 (the kernel's default), no weights configured for the class: a ticket, no guess",
    "cxl-interleave-default",
)
def interleave(tmp: Path) -> tuple[SnapHost, list[Report], Expect]:
    host = cxl_host(tmp, demotion="true\n", weights=("1\n", "1\n"))
    return (
        host,
        [host.cycle(0)],
        Expect(
            "cxl-interleave-default",
            "ticket",
            title="interleave left at 1:1 and no weights configured for x9drt-lab",
            never_actions=frozenset({"set_interleave_weights"}),
        ),
    )


# -- firmware and kernels ---------------------------------------------------------------------

OWN = Path(__file__).with_name("fixtures")
LAB_BASELINES = """version: 1
classes:
  x9drt-lab:
    bios: "{bios}"
    microcode: "0xf0"
"""


@case(
    "a BIOS (the real Supermicro 3.0b) below its class baseline: reflashed, the canary of its class",
    "firmware-below-baseline",
)
def old_bios(tmp: Path) -> tuple[SnapHost, list[Report], Expect]:
    host = SnapHost(tmp)
    host.baselines = LAB_BASELINES.format(bios="3.2")
    return (
        host,
        [host.cycle(0)],
        Expect("firmware-below-baseline", "reflash_firmware", never=frozenset({"microcode-below-baseline"})),
    )


@case(
    "microcode (the real i7's 0xb4) below its baseline on a current BIOS: the package, by a person",
    "microcode-below-baseline",
)
def old_microcode(tmp: Path) -> tuple[SnapHost, list[Report], Expect]:
    host = SnapHost(tmp)
    host.baselines = LAB_BASELINES.format(bios="3.0a")  # the BIOS is at its baseline
    return (
        host,
        [host.cycle(0)],
        Expect(
            "microcode-below-baseline",
            "ticket",
            title="microcode below baseline: update the OS microcode package",
            never_actions=frozenset({"reflash_firmware"}),  # microcode is not flashed like a BIOS
        ),
    )


def opteron(tmp: Path, kernel: str, hardware_class: str) -> SnapHost:
    host = SnapHost(tmp, hardware_class=hardware_class)
    host.file("/proc/cpuinfo", (OWN / "cpuinfo-opteron-8356-rev-b2.txt").read_text())
    host.file("/proc/sys/kernel/osrelease", f"{kernel}\n")
    return host


@case(
    "an Opteron rev B2 on the withdrawn first patched build: the class's corrected kernel, as a canary",
    "errata-unpatched-kernel",
)
def withdrawn_kernel(tmp: Path) -> tuple[SnapHost, list[Report], Expect]:
    host = opteron(tmp, "2.6.23.17-amdpatch", "legacy-opteron-8356")

    def pinned(session: object, remediation: object, ticket: object) -> None:
        detail = remediation.signal["detail"]  # type: ignore[attr-defined]
        assert detail["patched_kernel"]["release"] == "2.6.23.17-amdpatch2"
        assert "cputime" in detail["withdrawn"]

    return host, [host.cycle(0)], Expect("errata-unpatched-kernel", "install_kernel", also=pinned)


@case("an Opteron rev B2 on the class's configured build: nothing", None)
def patched_kernel(tmp: Path) -> tuple[SnapHost, list[Report], Expect]:
    host = opteron(tmp, "2.6.23.17-amdpatch2", "legacy-opteron-8356")
    return host, [host.cycle(0)], Expect(None)


@case("an Opteron rev B2 whose class names no patched kernel: a person, nothing guessed", "errata-no-patched-kernel")
def unconfigured_kernel(tmp: Path) -> tuple[SnapHost, list[Report], Expect]:
    host = opteron(tmp, "2.6.23.17-amdpatch", "opteron-lab")
    return (
        host,
        [host.cycle(0)],
        Expect(
            "errata-no-patched-kernel",
            "ticket",
            title="no patched kernel configured",
            never_actions=frozenset({"install_kernel"}),
        ),
    )


# The cputime watch (seed 001): our /proc tree in the kernel's formats (the corpus has none): a 16-CPU batch
# node whose cmsRun job shows 2^31 ticks (~21.5 million seconds) of CPU time an hour after it started,
# beside an 8-thread root.exe that used 79,200 s in 10,000 s and an athena whose exited threads' time stays
# in its total (tests/checker/fixtures/README.md).
CPUTIME_PROC = "proc-cputime.txt"


def cputime_host(tmp: Path, *, without: tuple[str, ...] = ()) -> SnapHost:
    host = SnapHost(tmp)
    files = listing_to_files(ours(CPUTIME_PROC), "/")
    host.snap.files("/", {k: v for k, v in files.items() if not k.startswith(without)})
    return host


@case(
    "a job with 22 million seconds of CPU time an hour after it started: a ticket to the kernel's owner",
    "cputime-exceeds-elapsed",
)
def cputime_bogus(tmp: Path) -> tuple[SnapHost, list[Report], Expect]:
    host = cputime_host(tmp)

    def with_the_stat_line(session: Session, remediation: Remediation | None, ticket: Ticket | None) -> None:
        assert remediation is not None
        assert ticket is not None
        detail = remediation.signal["detail"]
        assert (detail["kernel"], detail["checked"], detail["complete"]) == ("6.1.0-28-amd64", 5, True)
        (job,) = detail["examples"]
        assert (job["pid"], job["comm"], job["scope"]) == (4711, "cmsRun", "thread")
        assert job["stat_line"].startswith("4711 (cmsRun) S 1 ")
        assert ticket.evidence["host"]["kernel"] == "6.1.0-28-amd64"

    return (
        host,
        [host.cycle(0)],
        Expect(
            "cputime-exceeds-elapsed",
            "ticket",
            title=r"1 processes with CPU time above their run time, up to 2147\d{4} s \(kernel 6\.1\.0-28-amd64\)",
            part_type="kernel",
            never_actions=frozenset({"reboot", "reimage", "install_kernel", "drain"}),
            also=with_the_stat_line,
        ),
    )


def checked_clean(processes: int) -> Callable[[Session, SnapHost], None]:
    """The watch ran through ingest and said so: a zero for a complete scan, on every report."""

    def check(session: Session, host: SnapHost) -> None:
        rows = session.scalars(
            select(Signal)
            .join(Host, Host.id == Signal.host_id)
            .where(Host.hostname == host.hostname, Signal.kind == "cputime_exceeds_elapsed")
        ).all()
        assert rows, "no cputime_exceeds_elapsed signal"
        for row in rows:
            assert (row.subject, row.value, row.detail["complete"]) == ("host", 0, True)
            assert (row.detail["checked"], row.detail["examples"]) == (processes, [])

    return check


@case("busy multi-threaded jobs, and one whose exited threads left their time in its total: nothing", None)
def cputime_busy_threads(tmp: Path) -> tuple[SnapHost, list[Report], Expect]:
    host = cputime_host(tmp, without=("proc/4711/",))
    expect = Expect(None, never=frozenset({"cputime-exceeds-elapsed"}), then=checked_clean(4))
    return host, [host.cycle(0), host.cycle(1)], expect


@case("a clean host whose cputime scan was complete: nothing", None)
def cputime_clean(tmp: Path) -> tuple[SnapHost, list[Report], Expect]:
    host = cputime_host(tmp, without=("proc/4711/", "proc/5100/", "proc/5200/"))
    return host, [host.cycle(0)], Expect(None, then=checked_clean(2))


# -- the SEL ----------------------------------------------------------------------------------

S2600_SEL = "ipmi-sel/ipmitool-sel-elist-intel-s2600-uncorrectable-ecc-temp-readings-pcie.txt"


def pcie_flood(start_id: int, count: int, stamp: Callable[[int], str]) -> str:
    """The real S2600 line of the PCIe correctable-error sensor, logged `count` times (ids and times moved on)."""
    template = next(line for line in sample(S2600_SEL).splitlines() if "Critical Interrupt PCIe Cor" in line)
    fields = [f.strip() for f in template.split("|")]
    return (
        "\n".join(f"{start_id + i:4x} | {stamp(i)} | {fields[3]} | {fields[4]} | {fields[5]}" for i in range(count))
        + "\n"
    )


@case("one sensor (the real S2600's PCIe Cor) floods the SEL: find its source, do not clear the log", "sel-flood")
def flood(tmp: Path) -> tuple[SnapHost, list[Report], Expect]:
    host = SnapHost(tmp)
    host.sel(sample(S2600_SEL).split("\n", 3)[0])
    first = host.cycle(0)
    host.sel(pcie_flood(0x300, 60, lambda i: f"09/01/2026 | {8 + i // 60:02d}:{i % 60:02d}:00"), percent=97)
    return (
        host,
        [first, host.cycle(61)],
        Expect(
            "sel-flood", "ticket", title="SEL flooded by Critical Interrupt PCIe Cor", never=frozenset({"sel-full"})
        ),
    )


@case("a SEL 97 % full of ordinary history: archived and cleared", "sel-full")
def full(tmp: Path) -> tuple[SnapHost, list[Report], Expect]:
    host = SnapHost(tmp)
    host.sel(sample(S2600_SEL), percent=97)
    return host, [host.cycle(0)], Expect("sel-full", "clear_sel", never=frozenset({"sel-flood"}))


# -- silent hosts -----------------------------------------------------------------------------


class OutsideBmc:
    """The BMC the worker asks about a silent host (a simulated answer: there is no BMC here)."""

    name = "scenario"
    system = None

    def __init__(self, power: str | None) -> None:
        self.power = power

    def can_reach(self, hostname: str, address: str | None) -> bool:
        return address is not None

    def power_state(self, hostname: str, address: str | None, ctx: object) -> str:
        if self.power is None:
            from cyborg.commands import ActionFailed

            raise ActionFailed("Error: Unable to establish IPMI v2 / RMCP+ session")
        return self.power

    def power_cycle(self, hostname: str, address: str | None, ctx: object, if_off: str = "refuse") -> dict[str, object]:
        return {}

    def boot_device(self, hostname: str, address: str | None, device: str, ctx: object) -> dict[str, object]:
        return {}


class OutsidePing:
    name = "scenario"
    system = None

    def __init__(self, answers: bool) -> None:
        self.answers = answers

    def ping(self, hostname: str, address: str, ctx: object) -> bool:
        return self.answers

    def restart_agent(self, hostname: str, cluster: str, remediation_id: int, ctx: object) -> dict[str, object]:
        return {}


def silence(power: str | None, answers: bool) -> Callable[[Any, SnapHost], None]:
    """The host's agent stops; the scheduler's check finds it silent and a worker looks from outside."""

    def then(session: Any, host: SnapHost) -> None:
        from cyborg.central import SCHEDULER_ACTIONS, CentralCyborg
        from remediator import tasks
        from tests.builders.runtime import rewire, runtime_of

        session.commit()
        runtime = runtime_of(session)
        outside = CentralCyborg(
            runtime.settings, bmc=OutsideBmc(power), reach=OutsidePing(answers), actions=SCHEDULER_ACTIONS
        )
        rewire(runtime.database, cyborg=outside)
        try:
            assert tasks.mark_unreachable() == 1  # its last report was at the scenario's start, long ago
            tasks.probe_silent_host(host.hostname)
        finally:
            rewire(runtime.database, cyborg=runtime.remediator.cyborg)
        session.expire_all()

    return then


def silent_host(tmp: Path) -> tuple[SnapHost, list[Report]]:
    host = SnapHost(tmp)
    host.labels = {"bmc_address": "dt-host-01-ipmi.mgmt"}
    host.edac(csrow_files(mc_name="ie31200"))
    return host, [host.cycle(0)]


@case("silent, no ping answer, the BMC says on: hung; power-cycled through the BMC", "host-hung")
def hung_host(tmp: Path) -> tuple[SnapHost, list[Report], Expect]:
    host, reports = silent_host(tmp)
    return host, reports, Expect("host-hung", "power_cycle", then=silence("on", answers=False))


@case("silent and the BMC says off: turned on", "host-powered-off")
def off_host(tmp: Path) -> tuple[SnapHost, list[Report], Expect]:
    host, reports = silent_host(tmp)
    return host, reports, Expect("host-powered-off", "power_cycle", then=silence("off", answers=False))


@case("silent but answering pings: its agent died, the host did not; no power cycle", "agent-silent")
def dead_agent(tmp: Path) -> tuple[SnapHost, list[Report], Expect]:
    host, reports = silent_host(tmp)
    return (
        host,
        reports,
        Expect(
            "agent-silent", "restart_agent", never_actions=frozenset({"power_cycle"}), then=silence("on", answers=True)
        ),
    )


@case(
    "silent, and neither the BMC nor a ping can say why: a person, nothing power-cycled", "host-unreachable-unconfirmed"
)
def unknown_silence(tmp: Path) -> tuple[SnapHost, list[Report], Expect]:
    host, reports = silent_host(tmp)
    return (
        host,
        reports,
        Expect(
            "host-unreachable-unconfirmed",
            "ticket",
            title="neither its BMC nor a ping",
            never_actions=frozenset({"power_cycle"}),
            then=silence(None, answers=False),
        ),
    )


# The SMI and error-reporting-mode scenarios, and the stall probe's, live beside this table and add
# themselves to it.
from tests.decisions import cases_cputime, cases_smi, cases_stalls  # noqa: E402,F401
