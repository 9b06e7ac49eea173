"""PCIe signals from the report's `pcie` section (checker/collectors/pcie.py): links trained below what both
ends can do, and AER errors counted from the functions' own sysfs counters.

`pcie_link_downtrained`, subject the function's BDF (the downstream end of the link; one per link, the
lowest function): the link runs slower or narrower than the lesser of its two ends' capabilities. A link
trains to the highest speed and width both ends support (PCIe Base Specification, link training: the
LTSSM's Configuration and Recovery states), so a port wider or faster than the card in it is no fault:
the sample's x16 root port 00:03.0 running x8 to an x8 HBA, and the Gen5 switch port feeding a Gen4 NIC.
Value: the share of the capable bandwidth lost, in percent (8b/10b encoding up to 5 GT/s, 128b/130b
after). GPUs lower their link speed when idle (NVIDIA's power management), so for display controllers
only a narrower width counts. A function whose port's capability is not known (carried beside it by the
collector, or the port's own entry) is not judged. The port's LnkCtl2 Target Link Speed (lspci, or its
config space) caps the capable speed: a BIOS or driver may hold a slot below what both ends can do. A
VM's links are not judged (`virtual_machine`), nor one below an emulated port (QEMU's pcie-root-port,
vendor 1b36, advertises 16 GT/s x32 whatever the passthrough device's real link).

AER counters (aer_dev_correctable / nonfatal / fatal TOTAL_ERR_*, since boot) become
`device_event_count` of kind pcie_aer_corrected or pcie_aer_uncorrected (non-fatal plus fatal), the
errors of the last day, the same signal the kernel log and rasdaemon's aer_event give. Counting is per
function, never per host: a function the counters show (listed with its aer_* totals, and the deriver
has a fresh baseline) counts its corrected errors from them alone (they see every error; the kernel's
prints are rate-limited and rasdaemon may not run), and the kernel log and rasdaemon do not count its
corrected errors again (remediator/derive/core.py). Uncorrected records of the log and rasdaemon always
count too: a function re-enumerated at zero after a fatal error (DPC, hot-plug), one without AER, or a
record with no source id never reaches the counters. The detail's `source` says which counted.

Every AER count is keyed on the link, not on the end that logged it: both ends of a link log its
physical and data-link errors (the receiver logs), and in every corpus sample that is a root port. A
port's records count on the function below it (`link_keys`: the lowest function of the one device under
a root or downstream port); the detail's `reported_by` names the ends. A port with several devices below
it (a switch's upstream port) keeps its own BDF.

Deltas are against the previous report, whose time the memory keeps: a counter that went down, or a new
boot, starts from zero (the counts since the boot are new); a report more than a day after the previous
one spreads its difference over the gap (`span_s` in the detail), so three days of errors are not called
one day's. A cycle the counters were not read (the collector failed, or no baseline yet) is counted by
the log, and the next cycle takes a new baseline rather than count that cycle's errors twice; the log's
live buckets of a link the counters take over are carried into their count, not left beside it. Pure.
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Mapping

from pydantic import BaseModel, ConfigDict, Field

from checker.parsers.pcie import device_kind
from checker.schemas import MAX_PCIE_DEVICES, KernelEventKind, Observations, PcieDevice, PcieState
from remediator.derive.aer_disposition import disposition, short_name, types_in
from remediator.signals import SignalValue

K = KernelEventKind
DAY_S = 24 * 3600
HOUR_S = 3600
MAX_BUCKETED = 16  # links with recent errors, per kind
SAMPLE_LINES = 5
SYSFS_SOURCE = "sysfs aer_dev_*"
GPU_CLASS = "03"
PORT_CLASS = "06"
EMULATED_PORT_VENDORS = frozenset({"1b36"})  # Red Hat / QEMU: pcie-root-port, ioh3420's successors
_VM_PRODUCTS = ("kvm", "qemu", "vmware", "virtualbox", "virtual machine", "hvm domu", "openstack", "bochs")

Counters = tuple[int, int, int]  # correctable, non-fatal, fatal
Bucket = tuple[int, int]  # (epoch hour, errors)


class PcieMemory(BaseModel):
    model_config = ConfigDict(extra="ignore")

    boot: str | None = None
    at: dt.datetime | None = Field(None, description="The report the counters were last read from.")
    stale: bool = Field(False, description="A report since then did not read the counters: take a new baseline.")
    counters: dict[str, Counters] = Field(
        default_factory=dict, max_length=MAX_PCIE_DEVICES, description="BDF -> its non-zero AER totals last seen."
    )
    errors: dict[str, dict[str, list[Bucket]]] = Field(
        default_factory=dict, max_length=2, description="Kind -> link -> (epoch hour, errors) over the last day."
    )


def _encoding(speed: float) -> float:
    return 0.8 if speed <= 5.0 else 128 / 130


def bandwidth(speed: float, width: int) -> float:
    """Usable GB/s of a link, one direction."""
    return speed * _encoding(speed) * width / 8


def has_aer_counters(state: PcieState | None) -> bool:
    return state is not None and state.source == "sysfs" and state.aer_counters


def counts_from_sysfs(obs: Observations, previous: PcieMemory | None) -> bool:
    """Whether this report's AER errors are counted from the sysfs counters: the report has them and the
    deriver a fresh baseline to take deltas against (on the first sight, and after a cycle without them,
    the kernel log still counts while the baseline is taken)."""
    return previous is not None and previous.at is not None and not previous.stale and has_aer_counters(obs.pcie)


def counted_bdfs(obs: Observations, previous: PcieMemory | None) -> frozenset[str]:
    """The functions whose corrected errors the sysfs counters count in this report: those listed with
    their counters. Every other function's are counted by the log or rasdaemon."""
    if not counts_from_sysfs(obs, previous) or obs.pcie is None:
        return frozenset()
    return frozenset(d.bdf for d in obs.pcie.devices if d.aer_correctable is not None)


def link_keys(state: PcieState | None) -> dict[str, str]:
    """A port's BDF -> the link's downstream function (the lowest function of the one device below it),
    for the ports of the section with their devices listed. Both ends of a link log its errors."""
    if state is None:
        return {}
    below: dict[str, list[str]] = {}
    for device in state.devices:
        if device.parent:
            below.setdefault(device.parent, []).append(device.bdf)
    keys: dict[str, str] = {}
    for port, children in below.items():
        if len({bdf[:-2] for bdf in children}) == 1:  # one device: a root or downstream port's link
            keys[port] = min(children)
    return keys


def adopted_buckets(
    devices: Mapping[str, dict[str, list[Bucket]]], counted: frozenset[str], links: Mapping[str, str]
) -> tuple[dict[str, list[Bucket]], dict[str, dict[str, list[Bucket]]]]:
    """The log's (or rasdaemon's) live corrected buckets of the links the counters now count, taken out of
    the kernel memory's `devices` to join the counters' count: one count per link, not two each below the
    threshold. Returns them and the devices left. Their buckets are epoch hours too (a day's window / 24)."""
    keys = {links.get(bdf, bdf) for bdf in counted}
    corrected = devices.get(K.pcie_aer_corrected.value) or {}
    adopt = {link: buckets for link, buckets in corrected.items() if link in keys}
    if not adopt:
        return {}, dict(devices)
    left = {name: dict(by_device) for name, by_device in devices.items()}
    for link in adopt:
        left[K.pcie_aer_corrected.value].pop(link, None)
    if not left[K.pcie_aer_corrected.value]:
        left.pop(K.pcie_aer_corrected.value)
    return adopt, left


def naming(device: PcieDevice, partner: PcieDevice | None) -> dict[str, object]:
    """What a technician needs to find and identify the part."""
    return {
        "bdf": device.bdf,
        "slot": device.slot or (partner.slot if partner is not None else None),
        "device": device_kind(device.class_code),
        "vendor_device": f"{device.vendor}:{device.device}" if device.vendor and device.device else None,
        "name": device.name,
        "driver": device.driver,
        "port": device.parent,
    }


def virtual_machine(obs: Observations | None) -> bool:
    """A guest, by the CPU's hypervisor flag (the stall probe reads it) or the DMI system product: its
    ports are the hypervisor's emulation (QEMU's pcie-root-port advertises 16 GT/s x32), so a passthrough
    device's link to it says nothing about the hardware."""
    if obs is None:
        return False
    if obs.stalls is not None and obs.stalls.hypervisor:
        return True
    firmware = obs.identity.firmware if obs.identity is not None else None
    names = f"{firmware.system_manufacturer or ''} {firmware.system_product or ''}".lower() if firmware else ""
    return any(word in names for word in _VM_PRODUCTS)


def link_signals(state: PcieState | None, obs: Observations | None = None) -> list[SignalValue]:
    """Links below what both ends can do; none in a VM (`virtual_machine`) or below an emulated port."""
    if state is None or virtual_machine(obs):
        return []
    by_bdf = {d.bdf: d for d in state.devices}
    links: set[tuple[str, str]] = set()
    signals: list[SignalValue] = []
    for device in sorted(state.devices, key=lambda d: d.bdf):
        partner = by_bdf.get(device.parent) if device.parent else None
        # the port's capability as the agent read it beside the function, else from the port's own entry
        port_speed, port_width = device.port_max_speed_gts, device.port_max_width
        port_target = device.port_target_speed_gts
        if partner is not None:
            port_speed = partner.max_speed_gts if port_speed is None else port_speed
            port_width = partner.max_width if port_width is None else port_width
            port_target = partner.target_speed_gts if port_target is None else port_target
        if device.parent is None or port_speed is None or port_width is None:
            continue  # no partner known: the link cannot be judged
        if partner is not None and partner.vendor in EMULATED_PORT_VENDORS:
            continue
        link = (device.parent, device.bdf[:-2])  # the functions of one device share its link
        if link in links:
            continue
        links.add(link)
        speeds = (device.speed_gts, device.max_speed_gts, port_speed)
        widths = (device.width, device.max_width, port_width)
        if None in speeds or None in widths or not device.width:
            continue  # not known, or the link is down (width 0): nothing to compare
        speed, own_speed, their_speed = (float(s or 0) for s in speeds)
        width, own_width, their_width = (int(w or 0) for w in widths)
        capable_speed, capable_width = min(own_speed, their_speed), min(own_width, their_width)
        if port_target:  # the port's Target Link Speed (LnkCtl2), a BIOS or driver cap: the link may not exceed it
            capable_speed = min(capable_speed, float(port_target))
        gpu = (device.class_code or "").startswith(GPU_CLASS)
        slower = speed < capable_speed and not gpu
        narrower = width < capable_width
        if not (slower or narrower) or capable_width <= 0 or capable_speed <= 0:
            continue
        lost = 1 - bandwidth(speed if slower else capable_speed, width) / bandwidth(capable_speed, capable_width)
        detail: dict[str, object] = {
            **naming(device, partner),
            "speed_gts": speed,
            "width": width,
            "capable_speed_gts": capable_speed,
            "capable_width": capable_width,
            "max_speed_gts": own_speed,
            "max_width": own_width,
            "port_max_speed_gts": their_speed,
            "port_max_width": their_width,
            "port_target_speed_gts": port_target,
            "slower": slower,
            "narrower": narrower,
            "source": state.source,
        }
        signals.append(SignalValue("pcie_link_downtrained", device.bdf, round(100 * lost, 1), detail))
    return signals


def _live(buckets: list[Bucket], now_h: int) -> list[Bucket]:
    return [(hour, n) for hour, n in buckets if hour > now_h - DAY_S // HOUR_S and n > 0]


def _lines(obs: Observations, kind: KernelEventKind, bdfs: list[str]) -> list[str]:
    """The newest kernel-log record of these functions and kind in the same report, for the evidence."""
    if obs.kernel_log is None:
        return []
    events = [e for e in obs.kernel_log.events if e.kind is kind and e.subject in bdfs]
    return list(events[-1].lines) if events else []


def _merge(buckets: list[Bucket], more: list[Bucket]) -> list[Bucket]:
    merged = dict(buckets)
    for hour, n in more:
        merged[hour] = merged.get(hour, 0) + n
    return sorted(merged.items())[-25:]


def _counters(state: PcieState) -> dict[str, Counters]:
    found: dict[str, Counters] = {}
    for d in state.devices:
        totals = (d.aer_correctable or 0, d.aer_nonfatal or 0, d.aer_fatal or 0)
        if any(totals):
            found[d.bdf] = totals
    return found


def aer_counter_signals(
    obs: Observations,
    previous: PcieMemory | None,
    *,
    now: dt.datetime,
    boot: str | None,
    adopt: Mapping[str, list[Bucket]] | None = None,
) -> tuple[list[SignalValue], PcieMemory | None]:
    """`adopt`: the log's live corrected buckets of the links counted here (remediator/derive/core.py)."""
    state = obs.pcie
    if state is None or not has_aer_counters(state):
        # not read this cycle: the log counted it, so the next difference would count it again
        return [], previous.model_copy(update={"stale": True}) if previous is not None else None
    now_h = int(now.timestamp()) // HOUR_S
    counters = _counters(state)
    if not counts_from_sysfs(obs, previous) or previous is None:
        # the baseline: since boot, over an unknown span (or after a cycle the log counted)
        recent = previous.errors if previous is not None else {}
        return [], PcieMemory(boot=boot, at=now, counters=counters, errors=recent)
    rebooted = boot is not None and previous.boot not in (None, boot)
    span_s = (now - previous.at).total_seconds() if previous.at is not None else 0.0
    errors = {
        kind: kept
        for kind, by_link in previous.errors.items()
        if (kept := {link: live for link, b in by_link.items() if (live := _live(b, now_h))})
    }
    for link, logged in (adopt or {}).items():
        carried = errors.setdefault(K.pcie_aer_corrected.value, {})
        carried[link] = _merge(carried.get(link, []), _live(logged, now_h))
    keys = link_keys(state)
    by_bdf = {d.bdf: d for d in state.devices}
    new: dict[tuple[str, str], dict[str, Counters]] = {}  # (kind, link) -> reporting BDF -> its deltas
    for bdf, now_totals in counters.items():
        before = (0, 0, 0) if rebooted else previous.counters.get(bdf, (0, 0, 0))
        if any(n < b for n, b in zip(now_totals, before, strict=True)):
            before = (0, 0, 0)  # went down within a boot: the function was reset or re-enumerated
        delta = (now_totals[0] - before[0], now_totals[1] - before[1], now_totals[2] - before[2])
        link = keys.get(bdf, bdf)
        if delta[0] > 0:
            new.setdefault((K.pcie_aer_corrected.value, link), {})[bdf] = delta
        if delta[1] + delta[2] > 0:
            new.setdefault((K.pcie_aer_uncorrected.value, link), {})[bdf] = delta
    signals: list[SignalValue] = []
    for (kind_value, link), ends in sorted(new.items()):
        kind = K(kind_value)
        corrected = kind is K.pcie_aer_corrected
        raw = sum(d[0] if corrected else d[1] + d[2] for d in ends.values())
        # a gap longer than the window: its errors spread over it, not all in the current hour
        counted = math.ceil(raw * DAY_S / span_s) if span_s > DAY_S else raw
        buckets = errors.setdefault(kind.value, {})
        if link not in buckets and len(buckets) >= MAX_BUCKETED:
            continue
        buckets[link] = _merge(buckets.get(link, []), [(now_h, counted)])
        device = by_bdf[link] if link in by_bdf else by_bdf[next(iter(ends))]
        partner = by_bdf.get(device.parent) if device.parent else None
        prefix: tuple[str, ...] = ("correctable:",) if corrected else ("nonfatal:", "fatal:")
        types: dict[str, int] = {}
        for bdf in ends:
            for name, n in by_bdf[bdf].aer_types.items():
                if name.startswith(prefix):
                    types[name] = types.get(name, 0) + n
        lines = _lines(obs, kind, sorted(ends))
        detail: dict[str, object] = {
            "kind": kind.value,
            "window_s": DAY_S,
            "new": raw,
            **naming(device, partner),
            "reported_by": sorted(ends),
            "types": types,
            "since_boot": sum(counters[b][0] if corrected else counters[b][1] + counters[b][2] for b in ends),
            "source": SYSFS_SOURCE,
            "preferred": "the function's own counters: every error, where the kernel log is rate-limited",
            "lines": lines[:SAMPLE_LINES],
        }
        if not corrected:
            detail["nonfatal"] = sum(d[1] for d in ends.values())
            detail["fatal"] = sum(d[2] for d in ends.values())
            named = {short_name(t.split(":", 1)[1]) for t in types} | types_in(lines)
            detail.update(disposition(named, lines, fatal=bool(detail["fatal"])))
        if span_s > DAY_S:
            detail["span_s"] = round(span_s)
        value = sum(n for _, n in buckets[link])
        signals.append(SignalValue("device_event_count", link, float(value), detail))
    return signals, PcieMemory(boot=boot, at=now, counters=counters, errors=errors)


def pcie_signals(
    obs: Observations,
    previous: PcieMemory | None,
    *,
    now: dt.datetime,
    boot: str | None,
    adopt: Mapping[str, list[Bucket]] | None = None,
) -> tuple[list[SignalValue], PcieMemory | None]:
    """Both kinds of PCIe signal, and the memory to keep."""
    found, memory = aer_counter_signals(obs, previous, now=now, boot=boot, adopt=adopt)
    return link_signals(obs.pcie, obs) + found, memory
