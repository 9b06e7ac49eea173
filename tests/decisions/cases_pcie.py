"""The PCIe scenarios (rules pcie-link-downtrained, pcie-aer-corrected and pcie-aer-uncorrected from the
sysfs counters and the newest kernel wording), registered into tests/decisions/cases.py's CASES.

The host's PCI tree is the corpus's real sysfs extract (pcie/sysfs-pci-…-aer-counters-extract.ttar: AMD
root port 00:02.1 with a Micron NVMe, Intel root port 00:03.0 with an LSI SAS HBA), with the counters or
link files a scenario changes written as the kernel would; its slot file is ours.
"""

from __future__ import annotations

from pathlib import Path

from sqlalchemy import select
from sqlalchemy.orm import Session

from bench.samples import read_ttar, sample
from checker.schemas import Report
from remediator.models import Remediation
from tests.decisions.cases import case
from tests.decisions.harness import Expect, SnapHost
from ticketing.models import Ticket

TTAR = "pcie/sysfs-pci-current-max-link-speed-width-aer-counters-extract.ttar"
NEWEST = "pcie/journal-aer-ratelimit-multiple-correctable-headerof-uncorrectable-acsviol-kernel7-pve.log"
DATA_LINK = "pcie/dmesg-aer-corrected-data-link-timeout-transmitter-id-haswell-pch.log"
ENDPOINT = "kernel-log/dmesg-pcie-aer-nvme-endpoint-rxerr.log"
NVME = "pci0000:00/0000:00:02.1/0000:01:00.0"
HBA = "pci0000:00/0000:00:03.0/0000:03:00.0"
PCIE_RULES = frozenset(
    {"pcie-link-downtrained", "pcie-aer-corrected", "pcie-aer-uncorrected", "pcie-aer-uncorrected-in-service"}
)


def pcie_host(tmp: Path, **changed: str) -> SnapHost:
    """The real tree, with files changed: {'NVME__current_link_width': '2\\n'} (the __ is a slash)."""
    host = SnapHost(tmp)
    set_files(host, **changed)
    host.snap.file("/sys/bus/pci/slots/3/address", "0000:01:00\n")
    return host


def set_files(host: SnapHost, **changed: str) -> None:
    files = read_ttar(sample(TTAR), "fixtures/sys/devices/")
    paths = {"NVME": NVME, "HBA": HBA, "PORT": "pci0000:00/0000:00:02.1"}
    for key, text in changed.items():
        where, name = key.split("__", 1)
        files[f"{paths[where]}/{name}"] = text
    host.snap.files("/sys/devices", files)


def correctable(total: int, rx: int) -> str:
    return (
        f"RxErr {rx}\nBadTLP 0\nBadDLLP {total - rx}\nRollover 0\nTimeout 0\nNonFatalErr 0\nCorrIntErr 0\n"
        f"HeaderOF 0\nTOTAL_ERR_COR {total}\n"
    )


def fatal(total: int) -> str:
    names = [
        "Undefined",
        "DLP",
        "SDES",
        "TLP",
        "FCP",
        "CmpltTO",
        "CmpltAbrt",
        "UnxCmplt",
        "RxOF",
        "MalfTLP",
        "ECRC",
        "UnsupReq",
        "ACSViol",
    ]
    rest = ["UncorrIntErr", "BlockedTLP", "AtomicOpBlocked", "TLPBlockedErr", "PoisonTLPBlocked"]
    lines = [f"{n} {total if n == 'DLP' else 0}" for n in names + rest]
    return "\n".join(lines) + f"\nTOTAL_ERR_FATAL {total}\n"


@case(
    "the real NVMe's x4 link trained at x2 for 40 minutes: a ticket naming BDF, slot and device",
    "pcie-link-downtrained",
)
def link_downtrained(tmp: Path) -> tuple[SnapHost, list[Report], Expect]:
    host = pcie_host(tmp, NVME__current_link_width="2\n", PORT__current_link_width="2\n")
    reports = [host.cycle(minute) for minute in (0, 20, 40)]

    def names_the_part(session: object, remediation: Remediation | None, ticket: Ticket | None) -> None:
        assert ticket is not None
        part = ticket.evidence["part"]
        assert (part["bdf"], part["slot"], part["device"], part["vendor_device"]) == (
            "0000:01:00.0",
            "3",
            "NVMe",
            "c0a9:540a",
        )
        assert part["link"]["width"] == 2
        assert part["link"]["max_width"] == 4
        assert part["link"]["port_max_width"] == 8

    return (
        host,
        reports,
        Expect(
            "pcie-link-downtrained",
            "ticket",
            title=r"PCIe link of NVMe 0000:01:00.0 on dt-host-01: x2 at 8.0 GT/s, capable of x4 at 8.0 GT/s",
            part_type="pcie_device",
            never_actions=frozenset({"drain"}),
            also=names_the_part,
        ),
    )


@case("the real tree: a x8 port at x4 to a x4 NVMe, a x16 port at x8 to a x8 HBA: links at their best, nothing", None)
def link_at_the_lesser_end(tmp: Path) -> tuple[SnapHost, list[Report], Expect]:
    host = pcie_host(tmp)
    return host, [host.cycle(minute) for minute in (0, 20, 40)], Expect(None, never=PCIE_RULES)


@case("the NVMe's own AER counter grows by 150 corrected errors: a ticket, counted from sysfs", "pcie-aer-corrected")
def corrected_from_sysfs(tmp: Path) -> tuple[SnapHost, list[Report], Expect]:
    host = pcie_host(tmp)
    first = host.cycle(0)  # the baseline
    set_files(host, NVME__aer_dev_correctable=correctable(150, 140))
    second = host.cycle(10)

    def from_sysfs(session: object, remediation: Remediation | None, ticket: Ticket | None) -> None:
        assert remediation is not None
        assert remediation.signal is not None
        detail = remediation.signal["detail"]
        assert (detail["source"], detail["device"], detail["new"]) == ("sysfs aer_dev_*", "NVMe", 150)
        assert detail["types"] == {"correctable:RxErr": 140, "correctable:BadDLLP": 10}

    return (
        host,
        [first, second],
        Expect(
            "pcie-aer-corrected",
            "ticket",
            title="PCIe corrected errors on .* 0000:01:00.0: 150 in a day",
            part_type="pcie_device",
            also=from_sysfs,
        ),
    )


@case("the HBA's aer_dev_fatal counts a DLP error: drain, then a ticket", "pcie-aer-uncorrected")
def fatal_from_sysfs(tmp: Path) -> tuple[SnapHost, list[Report], Expect]:
    host = pcie_host(tmp)
    first = host.cycle(0)
    set_files(host, HBA__aer_dev_fatal=fatal(1))
    return (
        host,
        [first, host.cycle(10)],
        Expect(
            "pcie-aer-uncorrected", "drain", title="PCIe uncorrected error on .* 0000:03:00.0", part_type="pcie_device"
        ),
    )


@case("60 corrected errors both logged and counted in sysfs: counted once, below 100, nothing", None)
def counted_once(tmp: Path) -> tuple[SnapHost, list[Report], Expect]:
    host = pcie_host(tmp)
    reports = [host.cycle(0)]
    port = "pci0000:00/0000:00:02.1"
    lines = sample(DATA_LINK).replace("0000:00:1c.1", "0000:00:02.1").replace("8086:8c12", "1022:1634")
    for step in range(1, 21):  # the root port's three logged timeouts per cycle, its counter 3 more each time
        host.kernel_log(lines)
        host.snap.file(f"/sys/devices/{port}/aer_dev_correctable", correctable(3 * step, 0))
        reports.append(host.cycle(10 * step))
    return host, reports, Expect(None, never=PCIE_RULES)


@case(
    "Linux 6.16's rate-limited 'Correctable' storm (110 suppressed): the count includes them, a ticket",
    "pcie-aer-corrected",
)
def ratelimited_storm(tmp: Path) -> tuple[SnapHost, list[Report], Expect]:
    host = SnapHost(tmp)
    host.kernel_log("".join(line + "\n" for line in sample(NEWEST).splitlines()[:5]))  # the corrected part
    return (
        host,
        [host.cycle(0)],
        Expect(
            "pcie-aer-corrected",
            "ticket",
            title="PCIe corrected errors on .* 0000:80:1b.4: 111 in a day",
            part_type="pcie_device",
        ),
    )


# -- the review's fixes (tests/remediator/test_pcie_review.py has the deriver's side) --------------------------

FATAL_GONE = (
    "pcieport 0000:00:1c.0: AER: Uncorrected (Fatal) error received: 0000:05:00.0\n"
    "nvme 0000:05:00.0: AER: PCIe Bus Error: severity=Uncorrected (Fatal), type=Transaction Layer, (Receiver ID)\n"
    "nvme 0000:05:00.0: AER:   device [144d:a808] error status/mask=00040000/00000000\n"
    "nvme 0000:05:00.0: AER:    [18] MalfTLP                (First)\n"
)  # the kernel's wording (drivers/pci/pcie/aer.c); the function is not in the sysfs tree (gone, or back at zero)
RECOVERED = (
    "pcieport 0000:00:03.0: AER: Uncorrected (Non-Fatal) error received: 0000:03:00.0\n"
    "mpt3sas 0000:03:00.0: AER: PCIe Bus Error: severity=Uncorrected (Non-Fatal), type=Transaction Layer, "
    "(Requester ID)\n"
    "mpt3sas 0000:03:00.0: AER:   device [1000:00ab] error status/mask=00004000/00000000\n"
    "mpt3sas 0000:03:00.0: AER:    [14] CmpltTO                (First)\n"
    "pcieport 0000:00:03.0: AER: device recovery successful\n"
)
UNPLUG = (
    "pcieport 0000:00:03.0: pciehp: Slot(4): Card not present\n"
    "pcieport 0000:00:03.0: AER: PCIe Bus Error: severity=Uncorrected (Fatal), type=Data Link Layer, (Receiver ID)\n"
    "pcieport 0000:00:03.0: AER:   device [8086:6f08] error status/mask=00000020/00000000\n"
    "pcieport 0000:00:03.0: AER:    [ 5] SDES                   (First)\n"
)
NO_DRAIN = frozenset({"pcie-aer-uncorrected"})


@case(
    "with the counters in use, a kernel-logged fatal error on a function not in the sysfs tree: drain and a ticket",
    "pcie-aer-uncorrected",
)
def fatal_on_a_gone_function(tmp: Path) -> tuple[SnapHost, list[Report], Expect]:
    host = pcie_host(tmp)
    first = host.cycle(0)  # the counters' baseline
    host.kernel_log(FATAL_GONE)
    return (
        host,
        [first, host.cycle(10)],
        Expect(
            "pcie-aer-uncorrected",
            "drain",
            title="PCIe uncorrected error on .* 0000:05:00.0",
            part_type="pcie_device",
            part="0000:05:00.0",
        ),
    )


@case(
    "the real Proxmox ACSViol (a passthrough configuration): a ticket, the host left in service",
    "pcie-aer-uncorrected-in-service",
)
def acs_violation(tmp: Path) -> tuple[SnapHost, list[Report], Expect]:
    host = SnapHost(tmp)
    lines = sample(NEWEST).splitlines()
    host.kernel_log(
        "".join(line + "\n" for line in lines[lines.index(next(x for x in lines if "Uncorrectable" in x)) :])
    )
    return (
        host,
        [host.cycle(0)],
        Expect(
            "pcie-aer-uncorrected-in-service",
            "ticket",
            title=r"PCIe uncorrected error on .* 0000:80:1b.4 \(config\)",
            part_type="pcie_device",
            never=NO_DRAIN,
            never_actions=frozenset({"drain"}),
        ),
    )


@case("a non-fatal completion timeout the kernel recovered from: no drain, a ticket in service", None)
def recovered_non_fatal(tmp: Path) -> tuple[SnapHost, list[Report], Expect]:
    host = pcie_host(tmp)
    host.kernel_log(RECOVERED)
    return (
        host,
        [host.cycle(0)],
        Expect(
            "pcie-aer-uncorrected-in-service",
            "ticket",
            title=r"\(recovered\)",
            never=NO_DRAIN,
            never_actions=frozenset({"drain"}),
        ),
    )


@case("a Surprise Down as pciehp reports the slot's card gone (a hot-unplug): no drain", None)
def hot_unplug(tmp: Path) -> tuple[SnapHost, list[Report], Expect]:
    host = pcie_host(tmp)
    host.kernel_log(UNPLUG)
    return (
        host,
        [host.cycle(0)],
        Expect(
            "pcie-aer-uncorrected-in-service",
            "ticket",
            title=r"\(hot_unplug\)",
            never=NO_DRAIN,
            never_actions=frozenset({"drain"}),
        ),
    )


@case(
    "root port 00:03.0 and the HBA below it both count 60 corrected errors on their link: one ticket, on the HBA",
    "pcie-aer-corrected",
)
def one_link_one_ticket(tmp: Path) -> tuple[SnapHost, list[Report], Expect]:
    host = pcie_host(tmp)
    first = host.cycle(0)
    port = "pci0000:00/0000:00:03.0"
    host.snap.file(f"/sys/devices/{port}/aer_dev_correctable", correctable(60, 60))
    set_files(host, HBA__aer_dev_correctable=correctable(60, 60))
    host.snap.file(f"/sys/devices/{port}/aer_dev_correctable", correctable(60, 60))
    text = sample(ENDPOINT).replace("0000:00:1d.0", "0000:00:03.0")  # the corpus's two-ended record
    host.kernel_log(text)

    def one_ticket(session: Session, remediation: Remediation | None, ticket: Ticket | None) -> None:
        tickets = session.scalars(select(Ticket).where(Ticket.hostname == host.hostname)).all()
        assert [t.part for t in tickets] == ["0000:03:00.0"]
        assert remediation is not None
        assert remediation.signal is not None
        assert remediation.signal["detail"]["reported_by"] == ["0000:00:03.0", "0000:03:00.0"]
        assert ticket is not None  # the evidence keeps both ends' records
        assert {e.get("subject") for e in ticket.evidence["kernel_log"]} == {"0000:00:03.0", "0000:03:00.0"}

    return (
        host,
        [first, host.cycle(10)],
        Expect(
            "pcie-aer-corrected",
            "ticket",
            title="PCIe corrected errors on .* 0000:03:00.0: 120 in a day",
            part_type="pcie_device",
            part="0000:03:00.0",
            also=one_ticket,
        ),
    )
