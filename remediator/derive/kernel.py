"""kernel_event_count: how many events of each kernel-log kind a host logged within that kind's window.

A report's kernel log is incremental (the agent keeps a /dev/kmsg cursor), and events already
counted are skipped again by sequence number within the same boot, so a redelivered or
re-read record is counted once. Counts live in memory as coarse buckets (window / BUCKETS
wide), so an event leaves the count between `window` and `window + window / BUCKETS` after
it happened, and memory stays bounded however many events a storm brings.
"""

from __future__ import annotations

import datetime as dt
import re
from collections import defaultdict
from collections.abc import Collection, Mapping

from checker.parsers.os_events import oom_facts
from checker.schemas import KernelEvent, KernelEventKind, KernelLogState
from remediator.derive.aer_disposition import disposition, is_fatal, merge, types_in
from remediator.derive.memory import Bucket, KernelMemory, Span
from remediator.signals import SignalValue

K = KernelEventKind
DAY_S = 24 * 3600
DEFAULT_WINDOW_S = DAY_S
WINDOWS_S: dict[KernelEventKind, int] = {
    # A host that panics or locks up hard twice in a week is as suspect as one that does it twice a day.
    K.panic: 7 * DAY_S,
    K.hard_lockup: 7 * DAY_S,
    K.oops: 7 * DAY_S,
    # Throttling matters while it lasts (cooling, a failed fan); yesterday's heat wave does not.
    K.thermal_throttle: 3600,
}
# A link coming up is the recovery of nic_link_down, not a fault.
IGNORED_KINDS = frozenset({K.nic_link_up, K.gpu_identity})  # nor is a GPU naming itself
BUCKETS = 24
SAMPLE_LINES = 5
MAX_SUBJECTS = 5
# Kinds that name a device a technician can act on (a NIC port, a PCIe function, a disk): counted per
# device too, as `device_event_count`, so a rule can ticket the port that flaps rather than the host.
DEVICE_KINDS = frozenset(
    {K.nic_link_down, K.nic_tx_timeout, K.pcie_aer_corrected, K.pcie_aer_uncorrected, K.nvme_timeout, K.nvme_reset}
    | {K.fs_error, K.fs_readonly}  # a filesystem by its device (sdd1, dm-4): remediator/derive/os_faults.py
    | {K.oom_kill}  # one OOM by its memory cgroup (or `host`): remediator/derive/os_faults.py oom_signals
)
MAX_DEVICES = 16  # per kind
# Kinds whose kernel_event_count carries its counted span (`since`, `counted`): those a rule tickets a part
# for that a repair can fix while its count lasts (thermal-throttling's airflow ticket; remediator.recount).
COUNTED_KINDS = frozenset({K.thermal_throttle.value})


# A panic the hardware caused (a fatal machine check, the NMI watchdog's hard lockup, an NMI for a bus
# or memory error, firmware-first reporting's fatal error, an arm64 SError, EDAC's panic on a UE) is
# counted apart, as `hardware_fatal`: a reinstall cannot help it, so it must never add up to
# kernel-panic-repeated's reimage. (Not "*panic*": rules match subjects by substring.)
HARDWARE_FATAL = "hardware_fatal"
HARDWARE_FATAL_WINDOW_S = 7 * DAY_S
_HARDWARE_PANIC = re.compile(
    r"machine check|hard lockup|\bnmi\b|not all cpus entered broadcast exception handler|"
    r"uncorrected hardware memory error|\bmce\b|hardware error|\bserror\b|^ue |cxl cachemem error",
    re.IGNORECASE,
)  # ghes.c "Fatal hardware error", arm64 "Asynchronous SError Interrupt", EDAC's panic_on_ue "UE …", and
# "CXL cachemem error." (the panic on a CXL device's uncorrectable error in a PROPOSED CXL protocol-error
# handling series, not mainline: kept as one alternative, harmless where no kernel prints it)


# A panic a filesystem asked for (errors=panic: "Kernel panic - not syncing: EXT4-fs (device sda1): panic
# forced after error", XFS's panic_mask, btrfs): the filesystem's fault, which a reimage would wipe before
# anyone checked it. It is counted as that device's read-only event (the fs-readonly ticket), never as a panic.
_FS_PANIC = re.compile(r"(?:EXT[234]-fs|XFS|BTRFS)(?: \w+)? \((?:device )?(?P<dev>[^)\s]{1,64})")


def _fs_panic(event: KernelEvent) -> KernelEvent | None:
    """The panic as its filesystem's fs_readonly event, when its reason names a filesystem's device."""
    for text in [event.subject or "", *event.lines[:1]]:
        if (m := _FS_PANIC.search(text)) is not None:
            return event.model_copy(update={"kind": K.fs_readonly, "subject": m.group("dev")})
    return None


def _hardware_panic(event: KernelEvent) -> bool:
    """The panic's reason ("Kernel panic - not syncing: Fatal machine check") names the hardware."""
    return bool(_HARDWARE_PANIC.search(event.subject or "")) or any(
        _HARDWARE_PANIC.search(line) for line in event.lines[:1]
    )


def window_of(kind: KernelEventKind) -> int:
    return WINDOWS_S.get(kind, DEFAULT_WINDOW_S)


def live_buckets(buckets: list[Bucket], now_s: float, window_s: int) -> list[Bucket]:
    width = max(1, window_s // BUCKETS)
    start = now_s - window_s
    return [(index, n) for index, n in buckets if (index + 1) * width > start and n > 0][-(BUCKETS + 1) :]


def counted_span(buckets: list[Bucket], window_s: int, spans: list[Span] | None = None) -> dict[str, object]:
    """`since` (the first counted event's own time, else its bucket's start), `counted` ([epoch seconds,
    count, first, last event's time] per bucket: its start; [epoch seconds, count] for a bucket without its
    events' times) and `counted_s` (the buckets' width): remediator.recount recounts them from a repair on,
    a bucket the resolve falls in by its events' times (review of the counted spans, finding 2)."""
    width = max(1, window_s // BUCKETS)
    if not buckets:
        return {}
    timed = {span[0]: (span[0] * width + span[1], span[0] * width + span[2]) for span in spans or []}
    counted = [[index * width, n, *timed.get(index, ())] for index, n in buckets]
    since = dt.datetime.fromtimestamp(counted[0][2] if len(counted[0]) == 4 else counted[0][0], dt.UTC).isoformat()
    return {"since": since, "counted": counted, "counted_s": width}


def note_time(spans: list[Span], had: list[Bucket], at_s: float, window_s: int) -> list[Span]:
    """Keep an event's own time beside its bucket (the first and last of each), before it is added to `had`.
    A bucket that already counted events without their times (memory kept before times were) stays untimed."""
    width = max(1, window_s // BUCKETS)
    index = int(at_s) // width
    offset = int(at_s) - index * width  # seconds from the bucket's start: a few digits, not an epoch's ten
    by_index = {span[0]: span for span in spans}
    if index not in by_index and any(b[0] == index for b in had):
        return spans
    _, first, last = by_index.get(index, (index, offset, offset))
    by_index[index] = (index, min(first, offset), max(last, offset))
    return sorted(by_index.values())[-(BUCKETS + 1) :]


def _live_times(times: dict[str, list[Span]], buckets: dict[str, list[Bucket]]) -> dict[str, list[Span]]:
    """The times of the buckets still counted (`buckets`: the same keys)."""
    kept = {}
    for key, spans in times.items():
        live = {b[0] for b in buckets.get(key, [])}
        if found := [span for span in spans if span[0] in live]:
            kept[key] = found
    return kept


def add_to_bucket(buckets: list[Bucket], at_s: float, window_s: int, n: int = 1) -> list[Bucket]:
    index = int(at_s) // max(1, window_s // BUCKETS)
    merged = dict(buckets)
    merged[index] = merged.get(index, 0) + n
    return sorted(merged.items())[-(BUCKETS + 1) :]


def _seqs(state: KernelLogState) -> list[int]:
    return [e.seq for e in state.events if e.seq is not None]


AER_KINDS = frozenset({K.pcie_aer_corrected, K.pcie_aer_uncorrected})


def kernel_signals(
    state: KernelLogState | None,
    previous: KernelMemory | None,
    *,
    now: dt.datetime,
    boot_id: str | None,
    aer_elsewhere: bool = False,
    aer_counted: Collection[str] = (),
    aer_links: Mapping[str, str] | None = None,
) -> tuple[list[SignalValue], KernelMemory | None]:
    """Counts per kind, and per device for DEVICE_KINDS. AER records are counted per device unless another
    source counts the same errors: with `aer_elsewhere` (rasdaemon's rows: remediator/derive/aer.py) the
    corrected ones, and the corrected ones of the functions in `aer_counted` (their own sysfs counters:
    remediator/derive/pcie.py). Uncorrected records are always counted here: a fatal error on a function
    the counters cannot see (re-enumerated at zero after DPC, no AER capability, no source id) must not
    be lost. `aer_links` keys each AER record on its link (remediator/derive/pcie.py link_keys)."""
    if state is None:
        return [], previous
    prev = previous or KernelMemory()
    boot = state.boot_id or boot_id
    last_seq = prev.seq if boot is not None and prev.boot == boot else None
    now_s = now.timestamp()

    fresh: dict[KernelEventKind, list[KernelEvent]] = defaultdict(list)
    for event in state.events:
        if event.seq is not None and last_seq is not None and event.seq <= last_seq:
            continue  # counted when it was first reported
        if event.kind not in IGNORED_KINDS:
            fresh[event.kind].append(event)
    # The cursor is the collector's (events recovered from a previous boot's pstore carry that
    # boot's numbers); without one, the newest event's number. It never moves back within a boot.
    high = state.last_seq if state.last_seq is not None else max(_seqs(state), default=None)
    if last_seq is not None:
        high = last_seq if high is None else max(high, last_seq)

    panics = fresh.pop(K.panic, [])
    if fs_panics := [found for e in panics if (found := _fs_panic(e)) is not None]:
        fresh[K.fs_readonly] = fresh.get(K.fs_readonly, []) + fs_panics
        panics = [e for e in panics if _fs_panic(e) is None]
    hardware = [e for e in panics if _hardware_panic(e)]
    if software := [e for e in panics if not _hardware_panic(e)]:
        fresh[K.panic] = software
    groups: dict[str, tuple[int, list[KernelEvent]]] = {
        kind.value: (window_of(kind), events) for kind, events in fresh.items()
    }
    if hardware:
        groups[HARDWARE_FATAL] = (HARDWARE_FATAL_WINDOW_S, hardware)
    windows = {kind.value: window_of(kind) for kind in KernelEventKind} | {HARDWARE_FATAL: HARDWARE_FATAL_WINDOW_S}
    times = dict(prev.times)  # the events' own times of the counted kinds' and links' buckets
    counts: dict[str, list[Bucket]] = {}
    for name, buckets in prev.counts.items():
        if name in windows and (live := live_buckets(buckets, now_s, windows[name])):
            counts[name] = live

    signals: list[SignalValue] = []
    for name in [k.value for k in KernelEventKind] + [HARDWARE_FATAL]:
        if name not in groups:
            continue
        window_s, events = groups[name]
        buckets = counts.get(name, [])
        for event in events:
            at = min(event.timestamp or now, now).timestamp()
            if at > now_s - window_s:  # an event older than its window (a replayed ring buffer) is old news
                if name in COUNTED_KINDS:
                    times[name] = note_time(times.get(name, []), buckets, at, window_s)
                buckets = add_to_bucket(buckets, at, window_s)
        if buckets:
            counts[name] = buckets
        value = sum(n for _, n in live_buckets(buckets, now_s, window_s))
        if value <= 0:
            continue
        newest = events[-1]
        subjects = list(dict.fromkeys(e.subject for e in events if e.subject))[-MAX_SUBJECTS:]
        detail: dict[str, object] = {
            "window_s": window_s,
            "new": len(events),
            "errors": sum(e.count for e in events),
            "subject": newest.subject,
            "subjects": subjects,
            "lines": list(newest.lines[:SAMPLE_LINES]),
        }
        if state.lost_records:
            detail["lost_records"] = state.lost_records
        if name in COUNTED_KINDS:  # heat before an airflow repair does not reopen its ticket (remediator.recount)
            detail.update(counted_span(live_buckets(buckets, now_s, window_s), window_s, times.get(name)))
        signals.append(SignalValue("kernel_event_count", name, float(value), detail))
    per_device = {k: v for k, v in fresh.items() if not (aer_elsewhere and k is K.pcie_aer_corrected)}
    if aer_counted and K.pcie_aer_corrected in per_device:
        kept = [e for e in per_device[K.pcie_aer_corrected] if e.subject not in aer_counted]
        per_device[K.pcie_aer_corrected] = kept
    by_device, devices = device_signals(per_device, prev.devices, now, links=aer_links, times=times)
    flat = {**counts, **{f"{kind} {dev}": b for kind, by in devices.items() for dev, b in by.items()}}
    times = _live_times(times, flat)
    return signals + by_device, KernelMemory(boot=boot, seq=high, counts=counts, devices=devices, times=times)


def device_signals(
    fresh: dict[KernelEventKind, list[KernelEvent]],
    previous: dict[str, dict[str, list[Bucket]]],
    now: dt.datetime,
    *,
    links: Mapping[str, str] | None = None,
    times: dict[str, list[Span]] | None = None,
) -> tuple[list[SignalValue], dict[str, dict[str, list[Bucket]]]]:
    """Per device of the DEVICE_KINDS: events within the kind's window, for the devices with new ones. An
    AER record counts on its link (`links`: the reporting function -> the link's downstream function; the
    detail's `reported_by` names the ends that logged), an uncorrected one with its `disposition`. `times`
    (updated in place): the events' own times of each link's downs ('nic_link_down <device>'), for its span."""
    times = times if times is not None else {}
    now_s = now.timestamp()
    devices: dict[str, dict[str, list[Bucket]]] = {}
    for name, by_device in previous.items():
        kind = next((k for k in DEVICE_KINDS if k.value == name), None)
        if kind is None:
            continue
        window_s = window_of(kind)
        live = {dev: kept for dev, b in by_device.items() if (kept := live_buckets(b, now_s, window_s))}
        if live:
            devices[name] = live
    signals: list[SignalValue] = []
    for kind in sorted(DEVICE_KINDS):
        events = [e for e in fresh.get(kind, []) if e.subject]
        if not events:
            continue
        window_s = window_of(kind)
        by_device = devices.setdefault(kind.value, {})
        newest: dict[str, KernelEvent] = {}
        ends: dict[str, list[KernelEvent]] = defaultdict(list)
        for event in events:
            at = min(event.timestamp or now, now).timestamp()
            device = str(event.subject)
            if kind in AER_KINDS and links:
                device = links.get(device, device)
            ends[device].append(event)
            if at <= now_s - window_s or (device not in by_device and len(by_device) >= MAX_DEVICES):
                continue
            if kind is K.nic_link_down:
                key = f"{kind.value} {device}"
                times[key] = note_time(times.get(key, []), by_device.get(device, []), at, window_s)
            # An AER record carries the records the kernel's rate limit suppressed before it (count > 1).
            by_device[device] = add_to_bucket(by_device.get(device, []), at, window_s, max(1, event.count))
            newest[device] = event
        for device, event in newest.items():
            value = sum(n for _, n in live_buckets(by_device[device], now_s, window_s))
            detail: dict[str, object] = {
                "kind": kind.value,
                "window_s": window_s,
                "new": sum(max(1, e.count) for e in ends[device]),
                "lines": list(event.lines[:SAMPLE_LINES]),
            }
            if kind in AER_KINDS:
                detail["reported_by"] = sorted({str(e.subject) for e in ends[device]})
            if kind is K.nic_link_down:  # a repair's own down does not reopen its ticket (counted_before_repair)
                downs = live_buckets(by_device[device], now_s, window_s)
                detail.update(counted_span(downs, window_s, times.get(f"{kind.value} {device}")))
            if kind is K.oom_kill:  # the newest OOM's cgroup, constraint and victims (checker/parsers/os_events.py)
                detail.update(oom_facts(list(event.lines)))
            if kind is K.pcie_aer_uncorrected:
                outcomes = [
                    disposition(types_in(e.lines), list(e.lines), fatal=is_fatal(e.lines)) for e in ends[device]
                ]
                detail.update(merge(outcomes))
            signals.append(SignalValue("device_event_count", device, float(value), detail))
        if not by_device:
            devices.pop(kind.value, None)
    return signals, devices
