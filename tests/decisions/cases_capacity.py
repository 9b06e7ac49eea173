"""Lost-capacity scenarios (class 6): DIMMs, memory, CPUs, disks and NICs short of what the host's inventory,
its class's capacity block or its class's median says; DIMMs and processors firmware disabled (the SEL).
Registered in tests/decisions/cases.py's CASES through test_decisions.py.

The host's DIMMs are the corpus's real Supermicro X9DRT-P dmidecode (16 of 32 slots filled with 32 GB
DIMMs), a DIMM lost by turning its record into the empty-slot record the same dump prints
("Size: No Module Installed"). /proc/meminfo, the cpu present/online lists, /sys/block and /sys/class/net
are ours, in the kernel's formats: the corpus has none of them. The SEL lines are in `ipmitool sel elist`'s
layout with ipmitool's own event texts for IPMI sensor types 0Ch (Memory) and 07h (Processor); the corpus
has no SEL that logged a disabled DIMM or processor.
"""

from __future__ import annotations

import datetime as dt
import re
from pathlib import Path

from sqlalchemy import select
from sqlalchemy.orm import Session

from bench.samples import sample
from checker.schemas import BlockDevice, Capacity, DimmInventory, HostIdentity, Identity, Observations, Report
from remediator import capacity_class
from remediator.ingest import ingest
from remediator.inventory import HostInventory, apply_inventory
from remediator.models import Remediation, Signal
from tests.decisions.cases import case
from tests.decisions.harness import RULES, SUPERMICRO_DMIDECODE, T0, Expect, SnapHost, tickets_of
from ticketing.models import Ticket

LOCATORS = [f"P1-DIMM{c}{n}" for c in "ABCD" for n in (1, 2)] + [f"P2-DIMM{c}{n}" for c in "EFGH" for n in (1, 2)]
GIB_KB = 1024 * 1024
CAPACITY_RULES = frozenset(
    {
        "capacity-dimm-missing",
        "capacity-memory-missing",
        "capacity-cpu-missing",
        "capacity-disk-missing",
        "capacity-nic-missing",
    }
)


def baseline(**figures: object) -> str:
    lines = [f"      {key}: {value}" for key, value in figures.items()]
    return "version: 1\nclasses:\n  x9drt-lab:\n    capacity:\n" + "\n".join(lines) + "\n"


def meminfo(total_kb: int) -> str:
    """/proc/meminfo's first lines as the kernel prints them (fs/proc/meminfo.c: '%-16s%8lu kB')."""
    free = total_kb // 2
    return "".join(
        f"{name + ':':<16}{value:>8} kB\n"
        for name, value in (("MemTotal", total_kb), ("MemFree", free), ("MemAvailable", free + 1024), ("Buffers", 2048))
    )


def without_dimm(locator: str) -> str:
    """The real dmidecode with one DIMM's record turned into an empty slot's."""
    text = sample(SUPERMICRO_DMIDECODE)
    blocks = text.split("\n\n")
    for i, block in enumerate(blocks):
        if re.search(rf"^\s*Locator: {re.escape(locator)}\s*$", block, re.MULTILINE):
            blocks[i] = re.sub(r"Size: \d+ GB", "Size: No Module Installed", block)
    return "\n\n".join(blocks)


def capacity_host(tmp: Path, *, cpus: str = "0-7", online: str | None = None, mem_gib: float = 504.0) -> SnapHost:
    """The x9drt-lab host with its kernel's capacity files: 8 CPUs (the corpus's i7 cpuinfo), MemTotal a
    little under its 512 GiB of DIMMs, two disks and two NICs."""
    host = SnapHost(tmp)
    host.file("/proc/meminfo", meminfo(int(mem_gib * GIB_KB)))
    host.file("/sys/devices/system/cpu/present", cpus + "\n")
    host.file("/sys/devices/system/cpu/online", (online or cpus) + "\n")
    disk(host, "sda", "ST3500418AS", "naa.5000c5002f1e4a21", rotational=True)
    disk(host, "nvme0n1", "Samsung SSD 970 EVO 500GB", "S466NX0K701234A", rotational=False)
    host.file("/sys/block/loop0/size", "0\n")  # a loop device: never a disk
    nic(host, "eth0")
    nic(host, "eth1")
    host.file("/sys/class/net/lo/mtu", "65536\n")
    return host


def disk(host: SnapHost, name: str, model: str, serial: str, *, rotational: bool) -> None:
    base = f"/sys/block/{name}"
    host.file(f"{base}/device/uevent", "DEVTYPE=disk\n")
    host.file(f"{base}/device/model", model + "\n")
    host.file(f"{base}/device/{'serial' if name.startswith('nvme') else 'wwid'}", serial + "\n")
    host.file(f"{base}/size", "976773168\n")
    host.file(f"{base}/queue/rotational", ("1" if rotational else "0") + "\n")


def remove(host: SnapHost, path: str) -> None:
    import shutil

    shutil.rmtree(host.snap.path(path))


def nic(host: SnapHost, name: str) -> None:
    host.file(f"/sys/class/net/{name}/device/uevent", "DRIVER=e1000e\n")


@case(
    "a DIMM lost at boot on a class that fills 16 slots: a ticket naming the slot and its serial",
    "capacity-dimm-missing",
)
def dimm_lost(tmp: Path) -> tuple[SnapHost, list[Report], Expect]:
    host = capacity_host(tmp)
    host.baselines = baseline(dimms=16, dimm_locators=LOCATORS, memory_gib=512)
    first = host.cycle(0)
    host.snap.command(["dmidecode", "-t", "memory"], without_dimm("P2-DIMMF1"))
    host.file("/proc/meminfo", meminfo(int(472.0 * GIB_KB)))
    later = host.cycle(10)

    def slot_and_serial(session: Session, remediation: Remediation | None, ticket: Ticket | None) -> None:
        assert ticket is not None
        assert remediation is not None
        part = ticket.evidence["part"]
        assert (part["id"], part["serial"], part["empty_slots"]) == ("dimms", "45402D1D", ["P2-DIMMF1"])
        assert remediation.signal is not None
        assert remediation.signal["detail"]["source"] == "baseline"
        # one lost DIMM, one ticket: no memory ticket beside it (MemTotal fell by the DIMM's 32 GiB too)
        assert [t.part for t in tickets_of(session, host.hostname)] == ["dimms"]

    return (
        host,
        [first, later],
        Expect(
            "capacity-dimm-missing",
            "ticket",
            title=r"1 DIMM\(s\) missing, 15 of 16 \(baseline\): P2-DIMMF1",
            part_type="capacity",
            part="dimms",
            never=frozenset({"capacity-memory-missing"}),  # one lost DIMM, one ticket
            also=slot_and_serial,
        ),
    )


@case("MemTotal 440 GiB where 16 DIMMs of 32 GB are all listed: memory mapped out, a ticket", "capacity-memory-missing")
def memory_mapped_out(tmp: Path) -> tuple[SnapHost, list[Report], Expect]:
    host = capacity_host(tmp, mem_gib=440.0)
    host.baselines = baseline(dimms=16)  # memory: from the DIMMs the board lists (512 GiB)
    return (
        host,
        [host.cycle(0)],
        Expect("capacity-memory-missing", "ticket", title=r"72\.0 GiB of memory missing.*installed", part="memory"),
    )


@case("6 of 8 CPUs present on a class of 8: a ticket", "capacity-cpu-missing")
def cpus_disabled(tmp: Path) -> tuple[SnapHost, list[Report], Expect]:
    host = capacity_host(tmp, cpus="0-5")
    host.baselines = baseline(cpus=8)
    return (
        host,
        [host.cycle(0)],
        Expect("capacity-cpu-missing", "ticket", title=r"2 CPU\(s\) missing, 6 of 8", part="cpus"),
    )


@case("CPUs taken offline through sysfs (all 8 present): not lost capacity", None)
def cpus_offline(tmp: Path) -> tuple[SnapHost, list[Report], Expect]:
    host = capacity_host(tmp, cpus="0-7", online="0-5")
    host.baselines = baseline(cpus=8, dimms=16, disks=2, nics=2)
    return host, [host.cycle(0), host.cycle(10)], Expect(None, never=CAPACITY_RULES)


@case("an NVMe drive gone from /sys/block: a ticket naming it and its serial", "capacity-disk-missing")
def disk_gone(tmp: Path) -> tuple[SnapHost, list[Report], Expect]:
    host = capacity_host(tmp)
    host.baselines = baseline(disks=2)
    first = host.cycle(0)
    remove(host, "/sys/block/nvme0n1")
    return (
        host,
        [first, host.cycle(10)],
        Expect(
            "capacity-disk-missing",
            "ticket",
            title=r"1 disk\(s\) missing.*serial S466NX0K701234A \(was nvme0n1\)",
            part="disks",
        ),
    )


@case("a hot-spare disk beside the class's two: nothing is missing", None)
def hot_spare(tmp: Path) -> tuple[SnapHost, list[Report], Expect]:
    host = capacity_host(tmp)
    disk(host, "sdb", "ST3500418AS", "naa.5000c5002f1e4b77", rotational=True)
    host.baselines = baseline(disks=2, nics=2, dimms=16, cpus=8)
    return host, [host.cycle(0), host.cycle(10)], Expect(None, never=CAPACITY_RULES)


@case("a NIC that did not come back: a ticket naming the interface", "capacity-nic-missing")
def nic_gone(tmp: Path) -> tuple[SnapHost, list[Report], Expect]:
    host = capacity_host(tmp)
    host.baselines = baseline(nics=2)
    first = host.cycle(0)
    remove(host, "/sys/class/net/eth1")
    return (
        host,
        [first, host.cycle(10)],
        Expect("capacity-nic-missing", "ticket", title=r"NIC\(s\) missing.*eth1", part="nics"),
    )


@case("a DIMM taken out on purpose and the host's inventory says 15: no ticket", None)
def dimm_removed_on_purpose(tmp: Path) -> tuple[SnapHost, list[Report], Expect]:
    host = capacity_host(tmp)
    host.baselines = baseline(dimms=16, dimm_locators=LOCATORS)
    host.labels = {"capacity.dimms": "15", "capacity.memory": "480"}
    host.snap.command(["dmidecode", "-t", "memory"], without_dimm("P2-DIMMF1"))
    host.file("/proc/meminfo", meminfo(int(472.0 * GIB_KB)))
    return host, [host.cycle(0), host.cycle(10)], Expect(None, never=CAPACITY_RULES)


def peers(host: SnapHost, dimm_counts: list[int]) -> None:
    """The rest of the host's class, each with its inventory ingested half an hour before the host's."""

    def add(session: Session) -> None:
        capacity_class.clear_cache()
        rows = [
            HostInventory(hostname=f"{host.hostname}-peer{i}", hardware_class=host.hardware_class, datacenter="ams1")
            for i in range(len(dimm_counts))
        ]
        apply_inventory(session, rows, actor="test")
        at = T0 - dt.timedelta(minutes=30)
        reports = [
            Report(
                host=HostIdentity(hostname=row.hostname, boot_id="peer-boot"),
                captured_at=at,
                observations=Observations(
                    identity=Identity(dimms=[DimmInventory(locator=loc, size_mb=32768) for loc in LOCATORS[:count]]),
                    capacity=Capacity(
                        mem_total_kb=count * 32 * GIB_KB * 98 // 100,
                        cpus_present=8,
                        disks=[BlockDevice(name="sda"), BlockDevice(name="nvme0n1")],
                        nics=["eth0", "eth1"],
                    ),
                ),
            )
            for row, count in zip(rows, dimm_counts, strict=True)
        ]
        assert not ingest(session, reports, ruleset=RULES).refused

    host.setup.append(add)


@case(
    "one DIMM short of a class of six whose median is 16: a ticket naming the slot the class fills",
    "capacity-dimm-missing",
)
def below_class_median(tmp: Path) -> tuple[SnapHost, list[Report], Expect]:
    host = capacity_host(tmp, mem_gib=472.0)
    peers(host, [16] * 6)
    host.snap.command(["dmidecode", "-t", "memory"], without_dimm("P2-DIMMH2"))

    def from_median(session: Session, remediation: Remediation | None, ticket: Ticket | None) -> None:
        assert remediation is not None
        assert remediation.signal is not None
        detail = remediation.signal["detail"]
        assert (detail["source"], detail["n"], detail["empty_slots"]) == ("median", 7, ["P2-DIMMH2"])

    return (
        host,
        [host.cycle(0)],
        Expect("capacity-dimm-missing", "ticket", title=r"15 of 16 \(median\): P2-DIMMH2", also=from_median),
    )


@case("a class split half 16 DIMMs, half 8, and no capacity block: ambiguous, no ticket", None)
def split_class(tmp: Path) -> tuple[SnapHost, list[Report], Expect]:
    host = capacity_host(tmp, mem_gib=252.0)
    peers(host, [16, 16, 16, 16, 8, 8])
    host.snap.command(["dmidecode", "-t", "memory"], _eight())

    def said_ambiguous(session: Session, remediation: Remediation | None, ticket: Ticket | None) -> None:
        kinds = session.scalars(select(Signal.subject).where(Signal.kind == capacity_class.AMBIGUOUS)).all()
        assert "dimms" in kinds

    return host, [host.cycle(0)], Expect(None, never=CAPACITY_RULES, also=said_ambiguous)


def _eight() -> str:
    """The real dmidecode with the second socket's eight DIMMs gone."""
    text = sample(SUPERMICRO_DMIDECODE)
    for locator in LOCATORS[8:]:
        blocks = text.split("\n\n")
        for i, block in enumerate(blocks):
            if re.search(rf"^\s*Locator: {re.escape(locator)}\s*$", block, re.MULTILINE):
                blocks[i] = re.sub(r"Size: \d+ GB", "Size: No Module Installed", block)
        text = "\n\n".join(blocks)
    return text


SEL_DIMM_DISABLED = " 1a3 | 09/01/2026 | 07:58:10 | Memory DIMM_F1 | Memory Device Disabled | Asserted\n"
SEL_DIMM_GONE = " 1a4 | 09/01/2026 | 07:58:11 | Memory DIMM_F1 | Presence Detected | Deasserted\n"
SEL_IERR = " 2b0 | 09/01/2026 | 07:59:02 | Processor CPU2 Status | IERR | Asserted\n"


@case("the BMC logged Memory Device Disabled for DIMM_F1: a ticket for that DIMM", "sel-memory-disabled")
def sel_dimm_disabled(tmp: Path) -> tuple[SnapHost, list[Report], Expect]:
    host = capacity_host(tmp)
    host.sel(SEL_DIMM_DISABLED + SEL_DIMM_GONE)
    return (
        host,
        [host.cycle(0)],
        Expect("sel-memory-disabled", "ticket", title=r"DIMM DIMM_F1 disabled by firmware", part_type="dimm"),
    )


@case("the BMC logged a processor IERR: drain and a CPU ticket", "sel-processor-fault")
def sel_ierr(tmp: Path) -> tuple[SnapHost, list[Report], Expect]:
    host = capacity_host(tmp)
    host.sel(SEL_IERR)
    return (
        host,
        [host.cycle(0)],
        Expect("sel-processor-fault", "drain", title=r"processor fault in the SEL, CPU2 Status", part_type="cpu"),
    )


@case("a DIMM whose presence was asserted (fitted): no capacity finding", None)
def sel_dimm_fitted(tmp: Path) -> tuple[SnapHost, list[Report], Expect]:
    host = capacity_host(tmp)
    host.sel(" 1a5 | 09/01/2026 | 07:58:12 | Memory DIMM_F1 | Presence Detected | Asserted\n")
    return host, [host.cycle(0)], Expect(None, never=CAPACITY_RULES | {"sel-memory-disabled"})
