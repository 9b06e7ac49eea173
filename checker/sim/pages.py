"""The dimm_ce_page fault: one weak cell, a few corrected errors an hour on one 4 KiB page of one DIMM,
as rasdaemon records them (mc_event rows with the address and grain), EDAC counts them and the EDAC core
prints them; and the soft_offline_page action that takes the page out of use.

The fault's `variant` is the page's physical address. rasdaemon runs on a simulated host once such a
fault has shown (a healthy host's report stays as it was). A soft-offlined page is no longer read by
anything on the host but the memory controller's patrol scrubber, which still reads the cell: one of
the page's would-be errors in SCRUB_EVERY (by the ten-minute slot of its time, so the same run gives the
same hits) is still logged, as "memory scrubbing error", and the rule must not take it for the page's
fault returning (remediator.offlined_pages counts an offlined page from its offline). A reboot brings
the page back into use, errors and all.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from checker.schemas import CollectorRun, CollectorStatus, RasdaemonState, RasMemoryEvent
from checker.sim import logs

if TYPE_CHECKING:
    from checker.sim.faults import Fault
    from checker.sim.host import SimDimm, VirtualHost

PAGE_SIZE = 4096
RAM_BASE = 1 << 32  # the sim's page addresses lie above the 4 GiB hole
BACKLOG = 6  # errors the page logged in the hours before the fault is first seen
BACKLOG_SPACING = dt.timedelta(minutes=25)
MAX_OFFLINED_PAGES = 64  # cyborg.actions.MAX_OFFLINED_PAGES (the sim does not import cyborg)
GRAIN_BITS = {"skx_edac": 5, "i10nm_edac": 5}  # grain 32 bytes; the others print grain:64
SCRUB_EVERY = 6  # ten-minute slots: after its offline, the scrubber's hit on the cell comes about hourly
SCRUB_SLOT_S = 600


@dataclass
class RasdaemonSim:
    """What rasdaemon's database holds on a simulated host, and the pages the host took out of use."""

    running: bool = False
    next_id: int = 1
    pending: list[RasMemoryEvent] = field(default_factory=list)  # rows since the last report
    offlined: set[int] = field(default_factory=set)  # page addresses soft-offlined this boot


def page_address(rng_bits: int) -> str:
    """A page of the first 4 GiB above the hole: inside every class's memory."""
    return f"0x{RAM_BASE + (rng_bits % (1 << 20)) * PAGE_SIZE:x}"


def _layers(host: VirtualHost, dimm: SimDimm) -> tuple[int, int, int]:
    if dimm.layout == "csrow":
        return dimm.row, dimm.channel, -1
    return dimm.channel, 0, -1


def record(host: VirtualHost, fault: Fault, at: dt.datetime, count: int = 1, *, live: bool = True) -> None:
    """Corrected errors on the fault's page at `at`: an mc_event row and, `live`, the EDAC counter and line."""
    address = int(fault.variant, 16)
    scrubbed = address in host.ras.offlined
    if scrubbed and int(at.timestamp()) // SCRUB_SLOT_S % SCRUB_EVERY:
        return  # nothing but the patrol scrubber reads an offlined page, and it only now and then
    dimm = host.dimms[fault.dimm_index]
    host.ras.running = True
    top, middle, lower = _layers(host, dimm)
    offset = 0x380
    host.ras.pending.append(
        RasMemoryEvent(
            id=host.ras.next_id,
            timestamp=at.strftime("%Y-%m-%d %H:%M:%S +0000"),
            err_count=count,
            err_type="Corrected",
            err_msg="memory scrubbing error" if scrubbed else "memory read error",
            label=dimm.label,
            mc=dimm.mc,
            top_layer=top,
            middle_layer=middle,
            lower_layer=lower,
            address=address + offset,
            grain=GRAIN_BITS.get(host.hardware.edac_driver, 6),
        )
    )
    host.ras.next_id += 1
    if live:
        dimm.ce_count += count
        host.log(at, [logs.edac_ce(host.hardware.edac_driver, dimm, count, address + offset)])


def backlog(host: VirtualHost, fault: Fault, seen: dt.datetime) -> None:
    """The errors the page logged in the hours before the fault is seen: rasdaemon's database kept them (the
    sim's EDAC counter and kernel log start with the fault, so they show no burst that never happened)."""
    for i in range(BACKLOG, 0, -1):
        record(host, fault, seen - BACKLOG_SPACING * i, live=False)


def rasdaemon_state(host: VirtualHost) -> RasdaemonState | None:
    """The rasdaemon collector's section: the rows since the last report, and its cursor."""
    if not host.ras.running:
        return None
    rows, host.ras.pending = host.ras.pending, []
    last = host.ras.next_id - 1
    return RasdaemonState(memory_events=rows, last_id=last, last_ids={"mc_event": last})


def collector_run(host: VirtualHost) -> CollectorRun | None:
    if not host.ras.running:
        return None
    return CollectorRun(status=CollectorStatus.ok, duration_ms=0.8, source="rasdaemon")


def soft_offline_page(host: VirtualHost, params: dict[str, Any]) -> dict[str, Any]:
    """The page out of use, as the kernel's soft_offline_page does; refused outside RAM and past the cap."""
    address = int(str(params["address"]), 16)
    top = RAM_BASE + sum(d.size_mb for d in host.dimms) * 1024 * 1024
    if address % PAGE_SIZE or not RAM_BASE <= address < top:
        raise ValueError(f"refused: {params['address']} is in no System RAM range of {host.hostname}")
    cap = int(params.get("max_offlined_pages", MAX_OFFLINED_PAGES))
    before = len(host.ras.offlined)
    already = address in host.ras.offlined
    if not already and before >= cap:
        raise ValueError(f"refused: {host.hostname} has {before} poisoned pages already, the cap is {cap}")
    host.ras.offlined.add(address)
    return {
        "address": f"0x{address:x}",
        "pfn": f"0x{address // PAGE_SIZE:x}",
        "hardware_corrupted_kb_before": before * 4,
        "hardware_corrupted_kb_after": len(host.ras.offlined) * 4,
        "offlined": True,
        "already_offlined": already,
    }
