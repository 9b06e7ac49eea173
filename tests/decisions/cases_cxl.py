"""The CXL memory RAS scenarios (rules cxl-poison, cxl-poison-external, cxl-media-uncorrectable,
cxl-media-service, cxl-aer-uncorrectable, cxl-aer-link, cxl-health-service, cxl-health-temperature,
cxl-device-down), registered into tests/decisions/cases.py's CASES.

The records are the project's own fixtures (tests/checker/fixtures/cxl, README.md there: no real CXL
RAS sample is public yet), in rasdaemon's cxl_* tables, read by the real collector: the first cycle
takes the cursors, the second the rows the scenario adds."""

from __future__ import annotations

from pathlib import Path

from sqlalchemy.orm import Session

from checker.schemas import Report
from remediator.models import Remediation
from tests.checker.cxl_tree import add_rows, install
from tests.decisions.cases import case
from tests.decisions.harness import Expect, SnapHost
from ticketing.models import Ticket

THRESHOLD, UNCORRECTABLE, DRAM_CE, POISON, INJECTED, AER_UE, AER_CE = range(7)
RELISTED, CLEARED, INJECTED_LISTED, EXTERNAL, PEER_POISON, PARITY_IDE, INJECT_MEDIA = range(7, 14)
LIFE_CRITICAL, TEMPERATURE_CRITICAL, DEGRADED_ONLY = range(14, 17)
# cxl_error_detected's message on mem1's PCI function (drivers/cxl/core/pci.c; tests/checker/fixtures/cxl)
FROZEN = "[ 5.100000] cxl_pci 0000:36:00.0: mem1: frozen state error detected, disable CXL.mem\n"


def cxl_host(tmp: Path, *rows: int, tables: bool = True, kernel: str = "") -> tuple[SnapHost, list[Report]]:
    host = SnapHost(tmp)
    install(host.snap, tables=tables)
    first = host.cycle(0)
    if rows:
        add_rows(host.snap, *rows)
    if kernel:
        host.kernel_log(kernel)
    return host, [first, host.cycle(1)]


@case("a CXL memory device lists a poisoned address (source Internal): drain, replace the device", "cxl-poison")
def cxl_poison(tmp: Path) -> tuple[SnapHost, list[Report], Expect]:
    host, reports = cxl_host(tmp, POISON)
    expect = Expect(
        "cxl-poison",
        "drain",
        title=r"Replace CXL memory mem0 \(serial 0x5a17c0de\) on dt-host-01: 1 poisoned",
        part_type="cxl_memory",
        part="0x5a17c0de",  # the serial: mem0 may name another device after a reboot
        serial="0x5a17c0de",
    )
    return host, reports, expect


@case("an uncorrectable CXL media error on a host read: drain, replace the device", "cxl-media-uncorrectable")
def cxl_media_ue(tmp: Path) -> tuple[SnapHost, list[Report], Expect]:
    host, reports = cxl_host(tmp, UNCORRECTABLE)
    expect = Expect(
        "cxl-media-uncorrectable",
        "drain",
        title=r"Replace CXL memory mem0 \(serial 0x5a17c0de\).*uncorrectable media error",
        part_type="cxl_memory",
        part="0x5a17c0de",
        serial="0x5a17c0de",
    )
    return host, reports, expect


@case("a CXL device's scrub crossed its corrected-error threshold, Maintenance Needed: a ticket", "cxl-media-service")
def cxl_service(tmp: Path) -> tuple[SnapHost, list[Report], Expect]:
    host, reports = cxl_host(tmp, THRESHOLD)
    expect = Expect(
        "cxl-media-service",
        "ticket",
        title=r"Service CXL memory mem0 \(serial 0x5a17c0de\)",
        part_type="cxl_memory",
        never=frozenset({"cxl-media-uncorrectable", "cxl-poison"}),
        never_actions=frozenset({"drain"}),
    )
    return host, reports, expect


@case(
    "a CXL device's RAS capability logged an uncorrectable Memory Data ECC error: drain, ticket",
    "cxl-aer-uncorrectable",
)
def cxl_aer_ue(tmp: Path) -> tuple[SnapHost, list[Report], Expect]:
    host, reports = cxl_host(tmp, AER_UE)
    expect = Expect(
        "cxl-aer-uncorrectable",
        "drain",
        title=r"CXL memory mem1 \(serial 0x5a17c0df\).*uncorrectable CXL error, Memory Data ECC Error",
        part_type="cxl_memory",
        part="0x5a17c0df",
        never=frozenset({"cxl-aer-link"}),
    )
    return host, reports, expect


@case("a corrected CXL DRAM error, injected poison and a CRC threshold on a CXL device: nothing", None)
def cxl_quiet(tmp: Path) -> tuple[SnapHost, list[Report], Expect]:
    host, reports = cxl_host(tmp, DRAM_CE, INJECTED, AER_CE)
    return host, reports, Expect(None)


@case("a test injects CXL poison, the list shows it (source Injected), it is cleared: nothing", None)
def cxl_poison_test(tmp: Path) -> tuple[SnapHost, list[Report], Expect]:
    # the Inject and Clear records carry source Unknown, as the kernel traces them: only List entries count
    host, reports = cxl_host(tmp, INJECTED, INJECTED_LISTED, CLEARED)
    return host, reports, Expect(None)


@case("a host-injected poison's General Media record (uncorrectable, Host Inject Poison): nothing", None)
def cxl_media_injected(tmp: Path) -> tuple[SnapHost, list[Report], Expect]:
    host, reports = cxl_host(tmp, INJECT_MEDIA)
    return host, reports, Expect(None)


@case(
    "a CXL device lists poison the host wrote (source External): a ticket, no drain, no replacement",
    "cxl-poison-external",
)
def cxl_poison_external(tmp: Path) -> tuple[SnapHost, list[Report], Expect]:
    host, reports = cxl_host(tmp, EXTERNAL)
    expect = Expect(
        "cxl-poison-external",
        "ticket",
        title=r"CXL memory mem1 \(serial 0x5a17c0df\) on dt-host-01 holds 1 poisoned addresses written by the host",
        part_type="cxl_memory",
        part="0x5a17c0df",
        never=frozenset({"cxl-poison"}),
        never_actions=frozenset({"drain"}),
    )
    return host, reports, expect


@case("a CXL device received poison from its peer (the sender's error): a link ticket, no drain", "cxl-aer-link")
def cxl_aer_peer(tmp: Path) -> tuple[SnapHost, list[Report], Expect]:
    host, reports = cxl_host(tmp, PEER_POISON)
    expect = Expect(
        "cxl-aer-link",
        "ticket",
        title=r"CXL link of mem1 \(serial 0x5a17c0df, 0000:36:00.0\) on dt-host-01: uncorrectable Received Poison",
        part_type="cxl_memory",
        never=frozenset({"cxl-aer-uncorrectable"}),
        never_actions=frozenset({"drain"}),
    )
    return host, reports, expect


@case(
    "a CXL device's life used is Critical and it asks for maintenance: a ticket, nothing drained", "cxl-health-service"
)
def cxl_health_service(tmp: Path) -> tuple[SnapHost, list[Report], Expect]:
    host, reports = cxl_host(tmp, LIFE_CRITICAL)
    expect = Expect(
        "cxl-health-service",
        "ticket",
        title=r"Service CXL memory mem0 \(serial 0x5a17c0de\) on dt-host-01: Maintenance Needed",
        part_type="cxl_memory",
        part="0x5a17c0de",
        never=frozenset({"cxl-health-temperature"}),
        never_actions=frozenset({"drain"}),
    )
    return host, reports, expect


@case(
    "a CXL device's temperature is Critical by its own thresholds: a priority-2 ticket naming the device, in service",
    "cxl-health-temperature-critical",
)
def cxl_health_hot(tmp: Path) -> tuple[SnapHost, list[Report], Expect]:
    host, reports = cxl_host(tmp, LIFE_CRITICAL, TEMPERATURE_CRITICAL)  # mem0 48 C, mem1 92 C

    def candidates(_session: Session, _remediation: Remediation | None, ticket: Ticket | None) -> None:
        assert ticket is not None
        assert ticket.priority == 2
        part = ticket.evidence["part"]
        # mem1 alone hot beside mem0 at 48 C: the device and its slot before the airflow; mem0's reading on it
        assert part["candidates"][0] == "the device: CXL memory mem1 (serial 0x5a17c0df, 0000:36:00.0)"
        assert part["candidates"][2].startswith("the host's airflow")
        assert [(s["memdev"], s["temperature_c"]) for s in part["siblings"]] == [("mem0", 48)]

    expect = Expect(
        "cxl-health-temperature-critical",
        "ticket",
        title=r"CXL memory mem1 \(serial 0x5a17c0df\) on dt-host-01 runs hot, temperature Critical \(92 C\)",
        part_type="cxl_memory",  # the device, not the host's airflow: a device's own sensor is not rack heat
        part="0x5a17c0df",
        never=frozenset({"cxl-health-temperature"}),
        never_actions=frozenset({"drain"}),
        also=candidates,
    )
    return host, reports, expect


@case("a CXL device's health changes to Performance Degraded alone: nothing", None)
def cxl_health_quiet(tmp: Path) -> tuple[SnapHost, list[Report], Expect]:
    host, reports = cxl_host(tmp, DEGRADED_ONLY)
    return host, reports, Expect(None)


@case(
    "no rasdaemon CXL tables; the kernel log says mem1's CXL.mem was disabled (frozen): drain, ticket the device",
    "cxl-device-down",
)
def cxl_kernel_frozen(tmp: Path) -> tuple[SnapHost, list[Report], Expect]:
    host, reports = cxl_host(tmp, tables=False, kernel=FROZEN)

    def names_the_device(_session: Session, _remediation: Remediation | None, ticket: Ticket | None) -> None:
        assert ticket is not None
        part = ticket.evidence["part"]
        assert (part["memdev"], part["serial"], part["host"]) == ("mem1", "0x5a17c0df", "0000:36:00.0")
        # the kernel's line is in the evidence, found through the PCI function sysfs gives for the serial
        kinds = [e["kind"] for e in ticket.evidence["kernel_log"]]
        assert kinds == ["cxl_mem_disabled"]

    expect = Expect(
        "cxl-device-down",
        "drain",
        title=r"CXL memory mem1, serial 0x5a17c0df, 0000:36:00.0 on dt-host-01: CXL.mem disabled \(frozen",
        part_type="cxl_memory",
        part="0x5a17c0df",  # the serial sysfs gives for the PCI function the kernel named
        also=names_the_device,
    )
    return host, reports, expect


@case(
    "rasdaemon's AER UE row and the kernel's frozen-state line for the same error on mem1: one decision, not two",
    "cxl-aer-uncorrectable",
)
def cxl_kernel_and_rasdaemon(tmp: Path) -> tuple[SnapHost, list[Report], Expect]:
    host, reports = cxl_host(tmp, AER_UE, kernel=FROZEN)
    expect = Expect(
        "cxl-aer-uncorrectable",
        "drain",
        title=r"CXL memory mem1 \(serial 0x5a17c0df\).*Memory Data ECC Error",
        part_type="cxl_memory",
        part="0x5a17c0df",
        never=frozenset({"cxl-device-down", "cxl-aer-link"}),
    )
    return host, reports, expect
