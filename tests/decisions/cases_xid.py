"""NVIDIA Xid and SXid scenarios (rules gpu-xid-dbe, gpu-xid-dbe-unnamed, gpu-xid-rma, gpu-fallen-off-bus,
gpu-xid-reset, gpu-xid-reset-unnamed, gpu-xid-reboot, gpu-xid-nvlink, gpu-xid-contained-repeated,
gpu-sxid-fatal), registered into tests/decisions/cases.py's CASES.

The kernel log is the corpus's real GPU logs (gpu/dmesg-*) written to /dev/kmsg, the agent's kernel-log
collector reading them as on a host. Xid 74, 13, 43 and the SXid lines are ours, in the driver's wording
(the corpus has none of them), and so are 64 and 154; so are the repeated Xid 94 runs, the corpus's own 94
lines re-stamped.
"""

from __future__ import annotations

from pathlib import Path

from sqlalchemy import select
from sqlalchemy.orm import Session

from bench.samples import sample
from checker.schemas import Report
from remediator.models import Remediation
from tests.decisions.cases import case
from tests.decisions.cases_gpu import A10G, field, nvidia_smi
from tests.decisions.cases_gpu import gpu_host as smi_gpu_host
from tests.decisions.harness import Expect, SnapHost
from ticketing.models import Ticket

GSP = "gpu/dmesg-T-xid-119-gsp-rpc-timeout-h100-dell-xe9680.log"
DBE = "gpu/dmesg-iso-xid-48-dbe-63-row-remap-94-contained-peermem.log"
OFF_BUS = "gpu/dmesg-nvrm-fallen-off-bus-multiline-no-xid-10de-26b5-570.log"
APP = "gpu/dmesg-xid-31-mmu-fault-priv-violation-62-45-preemptive-cleanup.log"
HARDWARE_ACTIONS = frozenset({"drain", "reset_gpu", "power_cycle", "reboot", "reimage"})
XID_RULES = frozenset(
    {
        "gpu-xid-rma",
        "gpu-xid-dbe",
        "gpu-xid-dbe-unnamed",
        "gpu-fallen-off-bus",
        "gpu-xid-reset",
        "gpu-xid-reset-unnamed",
        "gpu-xid-reboot",
        "gpu-xid-nvlink",
        "gpu-xid-contained-repeated",
    }
)


def gpu_host(tmp: Path) -> SnapHost:
    return SnapHost(tmp, hostname="dt-gpu-01")  # the lab class: the harness's CPU is a laptop's


def stamped(minute: int, message: str) -> str:
    """A kernel line at `minute` into the scenario (the host booted ten minutes before it)."""
    return f"[{600 + minute * 60}.{minute:06d}] {message}\n"


def _serial(expected: str):  # type: ignore[no-untyped-def]
    def also(session: Session, remediation: Remediation | None, ticket: Ticket | None) -> None:
        assert ticket is not None
        part = (ticket.evidence or {}).get("part") or {}
        assert part.get("serial") == expected, part
        kernel = (ticket.evidence or {}).get("kernel_log") or []
        assert any("Xid" in line for e in kernel for line in e.get("lines") or []), kernel

    return also


@case(
    "Xid 48 double-bit ECC, then 63 and 94, on a GPU nvidia-smi does not list: no reset to name, drain and a ticket",
    "gpu-xid-dbe-unnamed",
)
def xid_dbe_unnamed(tmp: Path) -> tuple[SnapHost, list[Report], Expect]:
    host = gpu_host(tmp)
    host.kernel_log(sample(DBE))
    reports = [host.cycle(0)]
    return (
        host,
        reports,
        Expect(
            "gpu-xid-dbe-unnamed",
            "drain",
            title=r"GPU 0000:19:00\.0 on dt-gpu-01 \(serial .*\): Xid 48 double-bit ECC, and nvidia-smi does not list",
            part_type="gpu",
            never=frozenset({"gpu-xid-contained-repeated", "gpu-xid-rma", "gpu-xid-dbe"}),
        ),
    )


def dbe_on_the_a10g() -> str:
    """The corpus's 48 -> 63 -> 94 dmesg, moved to the A10G document's address (0000:00:1e)."""
    return sample(DBE).replace("PCI:0000:19:00", "PCI:0000:00:1e")


def _one_reset_and_no_ticket(session: Session, remediation: Remediation | None, ticket: Ticket | None) -> None:
    """Review MUST-FIX 2: one DBE used to give a reset AND a drain + replacement ticket."""
    assert remediation is not None
    host_rows = session.scalars(select(Remediation).where(Remediation.host_id == remediation.host_id)).all()
    assert [[s.action for s in r.steps] for r in host_rows] == [["reset_gpu"]], [
        (r.rule_id, r.steps) for r in host_rows
    ]
    assert session.scalars(select(Ticket).where(Ticket.hostname == "dt-gpu-01")).all() == []
    assert remediation.subject == "gpu0 00000000:00:1E.0"


@case("Xid 48 on a GPU nvidia-smi lists: reset that GPU (WORKFLOW_XID_48), no replacement", "gpu-xid-dbe")
def xid_dbe(tmp: Path) -> tuple[SnapHost, list[Report], Expect]:
    host = smi_gpu_host(tmp, "0000:00:1e.0", hostname="dt-gpu-01")
    nvidia_smi(host, sample(A10G))
    host.kernel_log(dbe_on_the_a10g())
    expect = Expect(
        "gpu-xid-dbe",
        "reset_gpu",
        never=frozenset({"gpu-xid-rma", "gpu-xid-dbe-unnamed"}),
        also=_one_reset_and_no_ticket,
    )
    return host, [host.cycle(1)], expect


@case("Xid 48 and the remap pending in the same report: one reset, no replacement ticket", "gpu-row-remap-pending")
def xid_dbe_with_remap_pending(tmp: Path) -> tuple[SnapHost, list[Report], Expect]:
    host = smi_gpu_host(tmp, "0000:00:1e.0", hostname="dt-gpu-01")
    nvidia_smi(host, field(field(sample(A10G), "remapped_row_unc", "1"), "remapped_row_pending", "Yes"))
    host.kernel_log(dbe_on_the_a10g())
    # the remap rule plans first; the DBE's firing finds the host's one remediation and plans nothing of its own
    expect = Expect(
        "gpu-row-remap-pending", "reset_gpu", never=frozenset({"gpu-xid-rma"}), also=_one_reset_and_no_ticket
    )
    return host, [host.cycle(1), host.cycle(6)], expect


@case("Xid 48 a report before nvidia-smi shows the remap pending: still one reset, no ticket", "gpu-xid-dbe")
def xid_dbe_before_remap_pending(tmp: Path) -> tuple[SnapHost, list[Report], Expect]:
    host = smi_gpu_host(tmp, "0000:00:1e.0", hostname="dt-gpu-01")
    nvidia_smi(host, sample(A10G))
    host.kernel_log(dbe_on_the_a10g())
    first = host.cycle(1)
    nvidia_smi(host, field(field(sample(A10G), "remapped_row_unc", "1"), "remapped_row_pending", "Yes"))
    reports = [first, host.cycle(6), host.cycle(11)]
    expect = Expect("gpu-xid-dbe", "reset_gpu", never=frozenset({"gpu-xid-rma"}), also=_one_reset_and_no_ticket)
    return host, reports, expect


@case("Xid 64, a row remapping failure: drain and a ticket to replace the GPU", "gpu-xid-rma")
def xid_remap_failed(tmp: Path) -> tuple[SnapHost, list[Report], Expect]:
    """Ours, in the driver's wording (the corpus has no Xid 64 line)."""
    host = gpu_host(tmp)
    host.kernel_log(
        stamped(0, "NVRM: Xid (PCI:0000:19:00): 64, pid='<unknown>', name=<unknown>, Row Remapper: Failed to remap "
                   "row (0x00000012bac1c3e0): no spare rows in the bank")
    )  # fmt: skip
    expect = Expect(
        "gpu-xid-rma",
        "drain",
        title=r"Replace GPU 0000:19:00\.0 on dt-gpu-01: Xid 64, row remapping or page retirement failed",
        part_type="gpu",
        part="0000:19:00.0",
        never=frozenset({"gpu-xid-dbe", "gpu-xid-reset"}),
    )
    return host, [host.cycle(0)], expect


@case("a GPU fell off the bus (no Xid 79 line): drain, then a cold power cycle", "gpu-fallen-off-bus")
def xid_off_bus(tmp: Path) -> tuple[SnapHost, list[Report], Expect]:
    host = gpu_host(tmp)
    host.kernel_log(sample(OFF_BUS))
    return host, [host.cycle(0)], Expect("gpu-fallen-off-bus", "drain", never_actions=frozenset({"reboot"}))


@case(
    "Xid 119 GSP timeouts with nvidia-smi silent (no index): a ticket, nothing drained for a reset it would refuse",
    "gpu-xid-reset-unnamed",
)
def xid_gsp(tmp: Path) -> tuple[SnapHost, list[Report], Expect]:
    """Review #5: the reset used to be planned, the host drained, and the step refused for want of an index."""
    host = gpu_host(tmp)
    host.kernel_log(sample(GSP))
    expect = Expect(
        "gpu-xid-reset-unnamed",
        "ticket",
        title=r"GPU 0000:9b:00\.0 on dt-gpu-01: Xid 119 .*needs a GPU reset, and nvidia-smi does not list the GPU",
        part_type="gpu",
        never=frozenset({"gpu-xid-reset", "gpu-xid-rma"}),
        never_actions=frozenset({"drain", "reset_gpu"}),
        also=_serial("1650124014249"),
    )
    return host, [host.cycle(0)], expect


def _names_the_smi_gpu(session: Session, remediation: Remediation | None, ticket: Ticket | None) -> None:
    assert remediation is not None
    assert remediation.subject == "gpu0 00000000:00:1E.0"  # nvidia-smi's subject: reset_gpu takes index 0 from it
    detail = remediation.evidence["signal"]["detail"]
    assert (detail["index"], detail["bdf"], detail["code"]) == (0, "00000000:00:1E.0", 119)


@case("Xid 119 on the A10G nvidia-smi lists: the reset names the GPU by nvidia-smi's index", "gpu-xid-reset")
def xid_gsp_named_by_nvidia_smi(tmp: Path) -> tuple[SnapHost, list[Report], Expect]:
    """The corpus's A10G document (00000000:00:1E.0) and the GSP sample's Xid line, moved to that address."""
    host = smi_gpu_host(tmp, "0000:00:1e.0")
    nvidia_smi(host, sample(A10G))
    line = next(line for line in sample(GSP).splitlines() if ": 119, " in line).split("] ", 1)[1]
    host.kernel_log(stamped(0, line.replace("PCI:0000:9b:00", "PCI:0000:00:1e")))
    expect = Expect("gpu-xid-reset", "reset_gpu", also=_names_the_smi_gpu)
    return host, [host.cycle(1)], expect


@case("the corpus's 31, 62, 45 dmesg as captured, on a GPU nvidia-smi lists: 62 resets the GPU", "gpu-xid-reset")
def xid_62_resets(tmp: Path) -> tuple[SnapHost, list[Report], Expect]:
    """Review #7: the application case strips the 62 line; this one keeps the sample whole. The A10G document is
    moved to the sample's address (0000:0a:00.0)."""
    host = smi_gpu_host(tmp, "0000:0a:00.0", hostname="dt-gpu-01")
    nvidia_smi(host, field(sample(A10G), "pci_bus_id", "00000000:0A:00.0"))
    host.kernel_log(sample(APP))

    def _62(session: Session, remediation: Remediation | None, ticket: Ticket | None) -> None:
        assert remediation is not None
        detail = remediation.evidence["signal"]["detail"]
        assert (detail["code"], detail["index"], remediation.subject) == (62, 0, "gpu0 00000000:0A:00.0")

    return host, [host.cycle(1)], Expect("gpu-xid-reset", "reset_gpu", also=_62)


@case("Xid 154 naming Node Reboot Required: drain and reboot", "gpu-xid-reboot")
def xid_154_reboot(tmp: Path) -> tuple[SnapHost, list[Report], Expect]:
    """Review #6: 154 was `watch` whatever recovery it named. Ours, in NVIDIA's wording (no 154 in the corpus)."""
    host = gpu_host(tmp)
    host.kernel_log(
        stamped(0, "NVRM: Xid (PCI:0000:4e:00): 154, pid='<unknown>', name=<unknown>, GPU recovery action changed "
                   "from 0x0 (None) to 0x2 (Node Reboot Required)")
    )  # fmt: skip
    return host, [host.cycle(0)], Expect("gpu-xid-reboot", "drain", never=frozenset({"gpu-xid-reset"}))


@case("Xid 154 back to None: nothing to do", None)
def xid_154_none(tmp: Path) -> tuple[SnapHost, list[Report], Expect]:
    host = gpu_host(tmp)
    host.kernel_log(
        stamped(0, "NVRM: Xid (PCI:0000:4e:00): 154, pid='<unknown>', name=<unknown>, GPU recovery action changed "
                   "from 0x1 (GPU Reset Required) to 0x0 (None)")
    )  # fmt: skip
    return host, [host.cycle(0)], Expect(None, never=XID_RULES, never_actions=HARDWARE_ACTIONS)


@case("application Xids 13, 31, 43 and 45, again and again: counted, nothing done to the host", None)
def xid_application(tmp: Path) -> tuple[SnapHost, list[Report], Expect]:
    host = gpu_host(tmp)
    real = [line for line in sample(APP).splitlines() if ": 62, " not in line]  # 62 is a reset (the catalog)
    reports = []
    for minute in range(0, 40, 10):
        host.kernel_log(
            "\n".join(real) + "\n"
            + stamped(minute, "NVRM: Xid (PCI:0000:07:00): 13, pid=4242, name=python3, Graphics SM Warp Exception on "
                              "(GPC 0, TPC 1, SM 0): Out Of Range Address")
            + stamped(minute, "NVRM: Xid (PCI:0000:07:00): 43, pid=4242, name=python3, Ch 00000010")
        )  # fmt: skip
        reports.append(host.cycle(minute))
    return host, reports, Expect(None, never=XID_RULES, never_actions=HARDWARE_ACTIONS)


@case("Xid 74 NVLink error: a ticket naming the GPU", "gpu-xid-nvlink")
def xid_nvlink(tmp: Path) -> tuple[SnapHost, list[Report], Expect]:
    host = gpu_host(tmp)
    host.kernel_log(
        stamped(0, "NVRM: GPU at PCI:0000:4e:00: GPU-8a7c1d2e-3f40-5b61-c7d8-e9f0a1b2c3d4")
        + stamped(0, "NVRM: GPU Board Serial Number: 1324520045123")
        + stamped(0, "NVRM: Xid (PCI:0000:4e:00): 74, pid=9001, name=nccl-tests, NVLink: fatal error detected on "
                     "link 4(0x0, 0x0, 0x10000, 0x0, 0x0, 0x0, 0x0)")
    )  # fmt: skip
    expect = Expect(
        "gpu-xid-nvlink",
        "ticket",
        title=r"NVLink error on GPU 0000:4e:00\.0 of dt-gpu-01: Xid 74",
        part_type="gpu",
        also=_serial("1324520045123"),
    )
    return host, [host.cycle(0)], expect


def contained(minute: int) -> str:
    """The corpus's Xid 94 run (a headline, then one line per channel), stamped at `minute`."""
    lines = [line.split("+00:00 ", 1)[1] for line in sample(DBE).splitlines() if ": 94, " in line]
    return "".join(stamped(minute, line) for line in lines)


@case("contained ECC errors (Xid 94) three times in a day: a ticket, the host in service", "gpu-xid-contained-repeated")
def xid_contained_repeated(tmp: Path) -> tuple[SnapHost, list[Report], Expect]:
    host = gpu_host(tmp)
    reports = []
    for minute in (0, 30, 60):
        host.kernel_log(contained(minute))
        reports.append(host.cycle(minute))
    expect = Expect(
        "gpu-xid-contained-repeated",
        "ticket",
        title=r"GPU 0000:19:00\.0 on dt-gpu-01: 3 contained ECC errors",
        never_actions=HARDWARE_ACTIONS,
    )
    return host, reports, expect


@case("one contained ECC error (its nine per-channel lines): the application's restart, nothing more", None)
def xid_contained_once(tmp: Path) -> tuple[SnapHost, list[Report], Expect]:
    host = gpu_host(tmp)
    host.kernel_log(contained(0))
    return host, [host.cycle(0), host.cycle(10)], Expect(None, never=XID_RULES)


SXID_FATAL = "nvidia-nvswitch0: SXid (PCI:0000:05:00.0): 20034, Fatal, Link 20 LTSSM Fault Up"
SXID_NON_FATAL = (
    "nvidia-nvswitch2: SXid (PCI:0000:88:00.0): 12028, Non-fatal, Link 32 egress non-posted PRIV error (First)"
)


def _names_the_switch(session: Session, remediation: Remediation | None, ticket: Ticket | None) -> None:
    assert ticket is not None
    part = ticket.evidence["part"]
    assert (part["bdf"], part["switch"], part["sxid_codes"]) == ("0000:05:00.0", "nvidia-nvswitch0", [20034])
    lines = [line for e in ticket.evidence["kernel_log"] for line in e["lines"]]
    assert any("SXid (PCI:0000:05:00.0): 20034, Fatal" in line for line in lines), lines
    assert not any("0000:88:00.0" in line for line in lines)  # the other switch's non-fatal SXid is not this part's


@case("a fatal SXid on an NVSwitch: drain, and a ticket naming the switch", "gpu-sxid-fatal")
def sxid_fatal(tmp: Path) -> tuple[SnapHost, list[Report], Expect]:
    host = gpu_host(tmp)
    host.kernel_log(stamped(0, SXID_NON_FATAL) + stamped(1, SXID_FATAL))
    expect = Expect(
        "gpu-sxid-fatal",
        "drain",
        title=r"NVSwitch nvidia-nvswitch0 \(0000:05:00\.0\)",
        part_type="nvswitch",
        also=_names_the_switch,
    )
    return host, [host.cycle(2)], expect


@case("non-fatal SXids only: counted, nothing done", None)
def sxid_non_fatal(tmp: Path) -> tuple[SnapHost, list[Report], Expect]:
    host = gpu_host(tmp)
    host.kernel_log(stamped(0, SXID_NON_FATAL) + stamped(1, SXID_NON_FATAL))
    return host, [host.cycle(2)], Expect(None, never=frozenset({"gpu-sxid-fatal"}))
