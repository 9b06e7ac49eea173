"""The operator review's CXL scenarios at the decision level (/tmp/r3-cxl/test_r3cxl.py, turned into
cases; rules cxl-port-error, cxl-device-error, cxl-health-data-lost, cxl-health-temperature and the
negative cases of cxl-device-down), registered into tests/decisions/cases.py's CASES.

The kernel lines are in the kernel's wording (drivers/cxl/core/pci.c, drivers/cxl/pci.c,
drivers/firmware/efi/cper_cxl.c, drivers/pci/pcie/aer.c); the rows are the project's own fixtures
(tests/checker/fixtures/cxl, README.md there)."""

from __future__ import annotations

from pathlib import Path

from sqlalchemy.orm import Session

from bench.samples import ours
from checker.schemas import Report
from remediator.models import Remediation
from tests.decisions.cases import case
from tests.decisions.cases_cxl import AER_CE, cxl_host
from tests.decisions.harness import Expect, SnapHost, tickets_of
from ticketing.models import Ticket

FRU_ERROR, ALL_DATA_LOST, CAPACITY_DEGRADED, TEMPERATURE_WARNING = range(17, 21)
MEDIA_NORMAL = 16  # mem1's Memory Module record: Performance Degraded only, media Normal
AER_FATAL = (
    "[ 5.000000] pcieport 0000:34:02.0: AER: Uncorrected (Fatal) error received: 0000:36:00.0\n"
    "[ 5.000010] cxl_pci 0000:36:00.0: PCIe Bus Error: severity=Uncorrected (Fatal), type=Inaccessible, "
    "(Unregistered Agent ID)\n"
    "[ 5.100000] cxl_pci 0000:36:00.0: mem1: frozen state error detected, disable CXL.mem\n"
)


def cper(n: int, agent: str, address: str, uncor: int) -> str:
    """A firmware-first CXL Protocol Error record (ghes.c, cper.c, cper_cxl.c), without a serial line."""
    p = f"[ 5.0{n}] {{{n}}}[Hardware Error]: "
    return "".join(
        p + x + "\n"
        for x in [
            "Hardware error from APEI Generic Hardware Error Source: 1",
            "event severity: recoverable",
            " Error 0, type: recoverable",
            "  section_type: CXL Protocol Error",
            f"   agent_type: {agent}",
            f"   agent_address: {address}",
            "   Error log length: 0x0058",
            "   CXL Error Log:",
            f"   cxl_ras_uncor_status: 0x{uncor:08x}",
            "   cxl_ras_uncor_mask: 0x00000000",
            "   cxl_ras_cor_status: 0x00000000",
        ]
    )


@case(
    "a CPER CXL Protocol Error of a root port, Memory Data ECC: a port ticket in service naming mem0 below it",
    "cxl-port-error",
)
def cxl_root_port(tmp: Path) -> tuple[SnapHost, list[Report], Expect]:
    host, reports = cxl_host(tmp, tables=False, kernel=cper(1, "5, CXL Root Port", "0000:34:01.0", 0x80))
    expect = Expect(
        "cxl-port-error",
        "ticket",
        title=r"CXL port 0000:34:01\.0 \(CXL Root Port\) on dt-host-01: uncorrectable Memory Data ECC Error.*"
        r"below it: mem0, serial 0x5a17c0de, 0000:35:00\.0",
        part_type="pcie_device",
        part="0000:34:01.0",
        never=frozenset({"cxl-aer-uncorrectable", "cxl-aer-link"}),
        never_actions=frozenset({"drain"}),
    )
    return host, reports, expect


@case(
    "rasdaemon's corrected AER row on mem1 and the kernel's CPER uncorrectable Memory Data ECC of mem1: drain",
    "cxl-aer-uncorrectable",
)
def cxl_ce_row_and_kernel_ue(tmp: Path) -> tuple[SnapHost, list[Report], Expect]:
    host, reports = cxl_host(tmp, AER_CE, kernel=cper(2, "2, CXL Device", "0000:36:00.0", 0x80))
    expect = Expect(
        "cxl-aer-uncorrectable",
        "drain",
        title=r"CXL memory mem1 \(serial 0x5a17c0df\).*Memory Data ECC Error",
        part_type="cxl_memory",
        part="0x5a17c0df",
    )
    return host, reports, expect


@case(
    "a fatal AER (type Inaccessible) then mem1's frozen state: drain, ONE ticket, the AER lines and candidates on it",
    "cxl-device-down",
)
def cxl_frozen_with_aer(tmp: Path) -> tuple[SnapHost, list[Report], Expect]:
    host, reports = cxl_host(tmp, tables=False, kernel=AER_FATAL)

    def one_ticket(session: Session, _remediation: Remediation | None, ticket: Ticket | None) -> None:
        assert ticket is not None
        assert [t.id for t in tickets_of(session, "dt-host-01")] == [ticket.id]
        kinds = sorted(e["kind"] for e in ticket.evidence["kernel_log"])
        assert kinds == ["cxl_mem_disabled", "pcie_aer_uncorrected"]
        assert ticket.evidence["part"]["candidates"][:2] == [
            "the device: CXL memory mem1, serial 0x5a17c0df, 0000:36:00.0",
            "its link: 0000:36:00.0 to port 0000:34:02.0",
        ]

    expect = Expect(
        "cxl-device-down",
        "drain",
        title=r"CXL memory mem1, serial 0x5a17c0df, 0000:36:00.0 on dt-host-01: CXL.mem disabled \(frozen",
        part_type="cxl_memory",
        part="0x5a17c0df",
        never=frozenset({"pcie-aer-uncorrected", "pcie-aer-uncorrected-in-service"}),
        also=one_ticket,
    )
    return host, reports, expect


@case(
    "a non-fatal AER on mem1, CXL.mem restarted, then 'error resume failed': drain, one CXL ticket",
    "cxl-device-down",
)
def cxl_resume_failed(tmp: Path) -> tuple[SnapHost, list[Report], Expect]:
    text = (
        "[ 5.0] cxl_pci 0000:36:00.0: PCIe Bus Error: severity=Uncorrected (Non-Fatal), type=Transaction Layer, "
        "(Requester ID)\n"
        "[ 5.1] cxl_pci 0000:36:00.0: mem1: restart CXL.mem after slot reset\n"
        "[ 5.2] cxl_pci 0000:36:00.0: mem1: error resume failed\n"
    )
    host, reports = cxl_host(tmp, tables=False, kernel=text)
    expect = Expect(
        "cxl-device-down",
        "drain",
        title=r"CXL memory mem1, serial 0x5a17c0df, 0000:36:00\.0 on dt-host-01: error resume failed",
        part_type="cxl_memory",
        part="0x5a17c0df",
        never=frozenset({"pcie-aer-uncorrected", "pcie-aer-uncorrected-in-service"}),
    )
    return host, reports, expect


@case(
    "at boot mem1's mailbox never ready (state fatal) and mem0's media never active: tickets in service, no drain",
    "cxl-device-error",
)
def cxl_probe_failures(tmp: Path) -> tuple[SnapHost, list[Report], Expect]:
    text = (
        "[ 5.0] cxl_pci 0000:36:00.0: timeout awaiting mailbox ready, device state  fatal\n"
        "[ 5.1] cxl_pci 0000:35:00.0: timeout awaiting memory active after 60 seconds\n"
    )
    host, reports = cxl_host(tmp, tables=False, kernel=text)
    expect = Expect(
        "cxl-device-error",
        "ticket",
        title=r"CXL memory mem0, serial 0x5a17c0de, 0000:35:00\.0 on dt-host-01: media never became active, at "
        r"probe \(probe\)",
        part_type="cxl_memory",
        part="0x5a17c0de",
        never=frozenset({"cxl-device-down"}),
        never_actions=frozenset({"drain"}),
    )
    return host, reports, expect


@case(
    "`cxl disable-memdev mem1`, then a corrected error: 'memdev disabled, abort error handling' drains nothing",
    "cxl-device-error",
)
def cxl_disabled_memdev_corrected(tmp: Path) -> tuple[SnapHost, list[Report], Expect]:
    text = (
        "[ 7.000000] pcieport 0000:34:02.0: AER: Correctable error message received from 0000:36:00.0\n"
        "[ 7.000010] cxl_pci 0000:36:00.0: PCIe Bus Error: severity=Correctable, type=Physical Layer, (Receiver ID)\n"
        "[ 7.000100] cxl_pci 0000:36:00.0: mem1: memdev disabled, abort error handling\n"
    )
    host, reports = cxl_host(tmp, tables=False, kernel=text)
    expect = Expect(
        "cxl-device-error",
        "ticket",
        title=r"CXL memory mem1.* on dt-host-01: corrected error on a memdev already disabled",
        part_type="cxl_memory",
        never=frozenset({"cxl-device-down"}),
        never_actions=frozenset({"drain"}),
    )
    return host, reports, expect


@case("kernel lines that look like CXL errors and are not (no CXL tables): nothing at all", None)
def cxl_kernel_not_errors(tmp: Path) -> tuple[SnapHost, list[Report], Expect]:
    host, reports = cxl_host(tmp, tables=False, kernel=ours("cxl/kernel-cxl-not-errors.log"))
    return host, reports, Expect(None, never=frozenset({"cxl-device-down", "cxl-device-error"}))


@case(
    "a CXL device's Memory Module records say media Normal, then All Data Lost: drain, replace the device",
    "cxl-health-data-lost",
)
def cxl_health_data_lost(tmp: Path) -> tuple[SnapHost, list[Report], Expect]:
    host, reports = cxl_host(tmp, MEDIA_NORMAL, ALL_DATA_LOST)
    expect = Expect(
        "cxl-health-data-lost",
        "drain",
        title=r"Replace CXL memory mem1 \(serial 0x5a17c0df\) on dt-host-01: media All Data Lost",
        part_type="cxl_memory",
        part="0x5a17c0df",
        never=frozenset({"cxl-health-service"}),
    )
    return host, reports, expect


@case(
    "a CXL device's Memory Media FRU Error names its FRU (component DIMM-B2): a service ticket",
    "cxl-health-service",
)
def cxl_health_fru(tmp: Path) -> tuple[SnapHost, list[Report], Expect]:
    host, reports = cxl_host(tmp, FRU_ERROR)

    def component(_session: Session, _remediation: Remediation | None, ticket: Ticket | None) -> None:
        assert ticket is not None
        assert ticket.evidence["part"]["component_id"] == "DIMM-B2"
        # rasdaemon stores no validity flags: the ticket says the identifier may not have been marked valid
        assert "valid flag is not stored" in ticket.evidence["part"]["component_id_note"]

    expect = Expect(
        "cxl-health-service",
        "ticket",
        title=r"Service CXL memory mem0 \(serial 0x5a17c0de\) on dt-host-01: Memory Media FRU Error "
        r"\(Unsupported Memory Media FRU, component DIMM-B2\)",
        part_type="cxl_memory",
        part="0x5a17c0de",
        never_actions=frozenset({"drain"}),
        also=component,
    )
    return host, reports, expect


@case(
    "a CXL device's temperature at Warning by its own thresholds: a ticket naming the device, in service",
    "cxl-health-temperature",
)
def cxl_health_warm(tmp: Path) -> tuple[SnapHost, list[Report], Expect]:
    host, reports = cxl_host(tmp, TEMPERATURE_WARNING)
    expect = Expect(
        "cxl-health-temperature",
        "ticket",
        title=r"CXL memory mem0 \(serial 0x5a17c0de\) on dt-host-01 runs hot, temperature Warning \(78 C\)",
        part_type="cxl_memory",
        part="0x5a17c0de",
        never=frozenset({"cxl-health-temperature-critical", "cxl-health-service"}),
        never_actions=frozenset({"drain"}),
    )
    return host, reports, expect
