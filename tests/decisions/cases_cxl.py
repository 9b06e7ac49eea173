"""The CXL memory RAS scenarios (rules cxl-poison, cxl-poison-external, cxl-media-uncorrectable,
cxl-media-service, cxl-aer-uncorrectable, cxl-aer-link), registered into tests/decisions/cases.py's CASES.

The records are the project's own fixtures (tests/checker/fixtures/cxl, README.md there: no real CXL
RAS sample is public yet), in rasdaemon's cxl_* tables, read by the real collector: the first cycle
takes the cursors, the second the rows the scenario adds."""

from __future__ import annotations

from pathlib import Path

from checker.schemas import Report
from tests.checker.cxl_tree import add_rows, install
from tests.decisions.cases import case
from tests.decisions.harness import Expect, SnapHost

THRESHOLD, UNCORRECTABLE, DRAM_CE, POISON, INJECTED, AER_UE, AER_CE = range(7)
RELISTED, CLEARED, INJECTED_LISTED, EXTERNAL, PEER_POISON, PARITY_IDE, INJECT_MEDIA = range(7, 14)


def cxl_host(tmp: Path, *rows: int) -> tuple[SnapHost, list[Report]]:
    host = SnapHost(tmp)
    install(host.snap)
    first = host.cycle(0)
    add_rows(host.snap, *rows)
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
