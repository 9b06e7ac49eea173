"""Lost-capacity scenarios added after the class's review, through the real collectors and ingest: FRB2 at
boot (a POST error, never a drain), SEL history replayed when the BMC's entry count falls, a disk lost while
the names shift, a persistent-memory host, a NIC lost on a host whose usb0 and SR-IOV VF would hide it, and a
class two thirds through a memory upgrade. Registered in tests/decisions/cases.py's CASES through
test_decisions.py.

The host is cases_capacity's (the corpus's real Supermicro X9DRT-P dmidecode, our /proc and /sys files in
the kernel's formats). SEL lines are in `ipmitool sel elist`'s layout with ipmitool's event texts for IPMI
sensor type 07h (Processor); the corpus has no SEL with a processor entry.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from bench.samples import sample
from checker.schemas import Report
from remediator.models import Remediation
from tests.decisions.cases import case
from tests.decisions.cases_capacity import (
    CAPACITY_RULES,
    GIB_KB,
    LOCATORS,
    baseline,
    capacity_host,
    disk,
    meminfo,
    nic,
    peers,
    remove,
)
from tests.decisions.harness import SUPERMICRO_DMIDECODE, Expect, SnapHost
from ticketing.models import Ticket

SEL_FRB2 = " 2b3 | 09/01/2026 | 07:52:02 | Processor CPU1 Status | FRB2/Hang in POST failure | Asserted\n"


@case("FRB2 (a hang in POST) logged at boot: an in-service firmware ticket, no drain", "sel-processor-post-error")
def sel_frb2_at_boot(tmp: Path) -> tuple[SnapHost, list[Report], Expect]:
    host = capacity_host(tmp)
    host.sel(SEL_FRB2)
    return (
        host,
        [host.cycle(0)],
        Expect(
            "sel-processor-post-error",
            "ticket",
            title=r"POST error in the SEL, CPU1 Status: .*FRB2",
            part_type="host",
            never=frozenset({"sel-processor-fault"}),
            never_actions=frozenset({"drain"}),
        ),
    )


SEL_HISTORY = (
    " 0a | 07/14/2026 | 11:02:40 | Power Supply PS2 Status | Presence detected | Asserted\n"
    " 10 | 02/13/2026 | 03:10:00 | Processor CPU1 Status | IERR | Asserted\n"
    " 11 | 02/13/2026 | 03:10:01 | Processor CPU1 Status | FRB3/Processor startup/init failure | Asserted\n"
    " 12 | 02/13/2026 | 03:10:02 | Memory DIMM_F1 | Memory Device Disabled | Asserted\n"
    " 13 | 09/01/2026 | 07:40:00 | Power Supply PS1 Status | Presence detected | Asserted\n"
)


@case("the BMC drops its oldest SEL entry and lists a 200-day-old IERR again: history, no drain", None)
def sel_history_replayed(tmp: Path) -> tuple[SnapHost, list[Report], Expect]:
    host = capacity_host(tmp)
    host.sel(SEL_HISTORY)
    first = host.cycle(0)
    host.sel_lines = host.sel_lines[1:]  # the count falls: the collector lists the log whole
    host.sel("")
    return host, [first, host.cycle(10)], Expect(None, never_actions=frozenset({"drain"}))


@case(
    "sdb lost and the host rebooted, sdc now named sdb: the ticket names the lost serial, not the healthy one",
    "capacity-disk-missing",
)
def disk_lost_names_shift(tmp: Path) -> tuple[SnapHost, list[Report], Expect]:
    host = capacity_host(tmp)
    disk(host, "sdb", "ST3500418AS", "naa.5000c5002f1e4b77", rotational=True)
    disk(host, "sdc", "ST3500418AS", "naa.5000c5002f1e4c88", rotational=True)
    host.baselines = baseline(disks=4)
    first = host.cycle(0)
    remove(host, "/sys/block/sdc")
    host.file("/sys/block/sdb/device/wwid", "naa.5000c5002f1e4c88\n")  # the old sdc is sdb after the reboot
    host.snap.boot(boot_id="5b0c3f1e-rebooted-0000-000000000002")

    def lost_serial(session: object, remediation: Remediation | None, ticket: Ticket | None) -> None:
        assert ticket is not None
        assert ticket.evidence["part"]["gone"] == [{"device": "sdb", "serial": "naa.5000c5002f1e4b77"}]

    return (
        host,
        [first, host.cycle(10)],
        Expect(
            "capacity-disk-missing",
            "ticket",
            title=r"1 disk\(s\) missing.*serial naa\.5000c5002f1e4b77 \(was sdb\)$",
            part="disks",
            serial="naa.5000c5002f1e4b77",
            also=lost_serial,  # type: ignore[arg-type]
        ),
    )


def _with_pmem(count: int) -> str:
    """The real dmidecode with its first `count` DIMMs turned into 128 GB Optane modules (Type Detail
    Non-Volatile, as dmidecode prints it for persistent memory)."""
    blocks = sample(SUPERMICRO_DMIDECODE).split("\n\n")
    done = 0
    for i, block in enumerate(blocks):
        if done < count and "Memory Device" in block and re.search(r"Size: \d+ GB", block):
            block = re.sub(r"Size: \d+ GB", "Size: 128 GB", block)
            blocks[i] = block.replace("Type Detail: Synchronous", "Type Detail: Synchronous Non-Volatile")
            done += 1
    return "\n\n".join(blocks)


@case("a host with 4 Optane PMem modules in App Direct mode: MemTotal holds only its DRAM, no ticket", None)
def pmem_host(tmp: Path) -> tuple[SnapHost, list[Report], Expect]:
    host = capacity_host(tmp, mem_gib=376.0)  # 12 x 32 GB DRAM, less the kernel's share
    host.snap.command(["dmidecode", "-t", "memory"], _with_pmem(4))
    host.baselines = baseline(dimms=16)  # memory: the DIMMs the board lists
    return host, [host.cycle(0), host.cycle(10)], Expect(None, never=CAPACITY_RULES)


@case("eth1 lost on a host whose BMC usb0 and an SR-IOV VF would have hidden it: a ticket", "capacity-nic-missing")
def nic_lost_behind_usb0_and_vf(tmp: Path) -> tuple[SnapHost, list[Report], Expect]:
    host = capacity_host(tmp)
    nic(host, "usb0")
    nic(host, "eth0v0")
    host.snap.directory_only("/sys/class/net/eth0v0/device/physfn")
    realpaths = {"/sys/class/net/usb0/device": "/sys/devices/pci0000:00/0000:00:14.0/usb1/1-3/1-3:1.0"}
    (host.snap.directory / "realpaths.json").write_text(json.dumps(realpaths))
    host.baselines = baseline(nics=2)
    first = host.cycle(0)
    remove(host, "/sys/class/net/eth1")
    return (
        host,
        [first, host.cycle(10)],
        Expect("capacity-nic-missing", "ticket", title=r"1 NIC\(s\) missing, 1 of 2.*eth1", part="nics"),
    )


@case("a class two thirds through an upgrade to 16 DIMMs, this host still at 8: ambiguous, no ticket", None)
def class_upgrade_two_thirds(tmp: Path) -> tuple[SnapHost, list[Report], Expect]:
    host = capacity_host(tmp, mem_gib=252.0)
    peers(host, [16, 16, 16, 16, 16, 16, 8, 8])  # with this host: 6 of 9 upgraded
    blocks = sample(SUPERMICRO_DMIDECODE)
    for locator in LOCATORS[8:]:
        parts = blocks.split("\n\n")
        for i, block in enumerate(parts):
            if re.search(rf"^\s*Locator: {re.escape(locator)}\s*$", block, re.MULTILINE):
                parts[i] = re.sub(r"Size: \d+ GB", "Size: No Module Installed", block)
        blocks = "\n\n".join(parts)
    host.snap.command(["dmidecode", "-t", "memory"], blocks)
    host.file("/proc/meminfo", meminfo(int(252.0 * GIB_KB)))
    return host, [host.cycle(0)], Expect(None, never=CAPACITY_RULES)


@case("a lone Presence Detected deassert while dmidecode lists every DIMM: not confirmed, no ticket", None)
def sel_presence_deassert_unconfirmed(tmp: Path) -> tuple[SnapHost, list[Report], Expect]:
    host = capacity_host(tmp)
    host.baselines = baseline(dimms=16)
    first = host.cycle(0)
    host.sel(" 1a4 | 09/01/2026 | 08:05:11 | Memory DIMM_F1 | Presence Detected | Deasserted\n")
    return host, [first, host.cycle(10)], Expect(None, never=CAPACITY_RULES | {"sel-memory-disabled"})
