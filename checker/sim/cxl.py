"""CXL memory RAS in the simulated fleet: hosts of a class with CXL memory expanders (one memN per CPU-less
node) report them with their serials, and rasdaemon's cxl_* rows as the collector reads them (the first
report takes the cursors only). The `cxl_media_errors` fault logs, once, on the expander the fault's DIMM
index picks: variant `uncorrectable`, a host read that hit an uncorrectable ECC error and its poison list
entry (drain and replace); variant `threshold`, the device's patrol scrub crossing its corrected-error
threshold with Maintenance Needed (a ticket); variant `frozen`, a host whose rasdaemon records no CXL
events (the collector lists the devices, `rasdaemon` false) where an uncorrectable error froze the
device's channel: the kernel prints cxl_error_detected's "memN: frozen state error detected, disable
CXL.mem" (drivers/cxl/core/pci.c), which the next report's kernel log carries (drain and ticket the
device, named by its serial through its PCI function). Serials come from the hostname (no draw from
the host's generator).
"""

from __future__ import annotations

import datetime as dt
import zlib
from typing import TYPE_CHECKING

from checker.schemas import CollectorRun, CollectorStatus, CxlEvent, CxlMemdev, CxlRasState

if TYPE_CHECKING:
    from checker.sim.host import VirtualHost

REGION_BASE = 0x1050000000
KERNEL_ONLY = "frozen"  # the variant on a host whose rasdaemon keeps no cxl_* tables


def _bdf(index: int) -> str:
    return f"0000:{0x35 + index:02x}:00.0"


def _kernel_only(host: VirtualHost) -> bool:
    return any(f.kind == "cxl_media_errors" and f.variant == KERNEL_ONLY for f in host.faults)


def _devices(host: VirtualHost) -> list[CxlMemdev]:
    return [
        CxlMemdev(
            memdev=f"mem{i}",
            serial=zlib.crc32(f"{host.hostname}/mem{i}".encode()),
            firmware="2.1.4",
            ram_bytes=host.hardware.cxl_node_mb * 1024 * 1024,
            host=_bdf(i),
        )
        for i in range(host.hardware.cxl_nodes)
    ]


def _events(host: VirtualHost, device: CxlMemdev, variant: str, at: dt.datetime) -> list[CxlEvent]:
    index = int(device.memdev[3:])
    common = {
        "memdev": device.memdev,
        "host": _bdf(index),
        "serial": device.serial,
        "timestamp": at.strftime("%Y-%m-%d %H:%M:%S +0000"),
        "region": f"region{index}",
        "channel": 1,
        "rank": 0,
    }
    dpa = 0x40001000
    hpa = REGION_BASE + index * 0x2000000000 + dpa - 0x40000000
    if variant == "threshold":
        return [
            CxlEvent(
                table="cxl_general_media_event",
                id=1,
                log="Informational",
                uncorrectable=False,
                kind="ECC Error",
                transaction="Internal Media Scrub",
                threshold=True,
                flags=["Maintenance Needed"],
                dpa=dpa,
                hpa=hpa,
                **common,
            )
        ]
    return [
        CxlEvent(
            table="cxl_general_media_event",
            id=1,
            log="Failure",
            uncorrectable=True,
            kind="ECC Error",
            transaction="Host Read",
            flags=["Hardware Replacement Needed"],
            dpa=dpa,
            hpa=hpa,
            **common,
        ),
        CxlEvent(
            table="cxl_poison_event",
            id=1,
            uncorrectable=True,
            kind="Poison List",
            source="Internal",
            dpa=dpa,
            hpa=hpa,
            **{k: v for k, v in common.items() if k not in ("channel", "rank")},
        ),
    ]


def cxl_state(host: VirtualHost, now: dt.datetime) -> CxlRasState | None:
    devices = _devices(host)
    if not devices:
        return None
    if _kernel_only(host):
        state = CxlRasState(devices=devices, rasdaemon=False)
    else:
        state = CxlRasState(devices=devices, first_sight=host.first_at == now)
    fault = next((f for f in host.faults if f.kind == "cxl_media_errors"), None)
    if fault is not None and not fault.logged and host.first_at != now:
        fault.logged = True  # what rasdaemon stored (or the kernel printed) since the last read: once
        device = devices[fault.dimm_index % len(devices)]
        if fault.variant == KERNEL_ONLY:  # cxl_error_detected's dev_warn on the PCI function (level 4)
            message = f"cxl_pci {device.host}: {device.memdev}: frozen state error detected, disable CXL.mem"
            host.log(now, [(4, message)])  # the agent reads it next cycle: sim/render.py reads the log first
        else:
            state.events = _events(host, device, fault.variant or "uncorrectable", now)
    for event in state.events:
        state.last_ids[event.table] = event.id
    return state


def collector_run(host: VirtualHost) -> CollectorRun:
    if host.hardware.cxl_nodes and _kernel_only(host):
        problem = "rasdaemon records no CXL events here: no cxl_* table; the kernel log is their only record"
        return CollectorRun(status=CollectorStatus.ok, duration_ms=0.3, source="sysfs", problems=[problem])
    if host.hardware.cxl_nodes:
        return CollectorRun(status=CollectorStatus.ok, duration_ms=0.6, source="rasdaemon")
    return CollectorRun(
        status=CollectorStatus.unavailable,
        duration_ms=0.1,
        reason="no CXL memory devices (/sys/bus/cxl/devices lists no memN)",
    )
