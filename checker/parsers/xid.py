"""NVIDIA GPU lines of the kernel log: Xid and SXid errors, a GPU fallen off the bus, and the lines
that name a GPU (its uuid and board serial).

The kernel-log classifier (checker.parsers.kernel_events.RULES) finds these lines by their needles
("Xid (", "SXid (", "NVRM: GPU ", "NVRM: The NVIDIA GPU", "fallen off the bus") and keeps them as
KernelEvents whose subject is the device's PCI address in the kernel's form (0000:9b:00.0); the
functions here read the fields back out of an event's lines, so the centre needs no second pass
over the log. Pure: stdlib and the report schema only.

Formats (the driver's, as printed by nv_report_error / the RM's error log and nvidia-nvswitch):
  NVRM: Xid (PCI:0000:9b:00): 119, pid=2024380, name=nvidia-smi, Timeout after 6s of waiting …
  NVRM: Xid (0000:01:00): 31, Ch 0000000b, engmask 00000120, intr 10000000     (older drivers)
  NVRM: GPU at PCI:0000:9b:00: GPU-509665ad-b600-ac93-3616-d754b23d636d
  NVRM: GPU Board Serial Number: 1650124014249
  NVRM: The NVIDIA GPU 0000:b3:00.0 / NVRM: (PCI ID: 10de:26b5) installed in this system has /
      NVRM: fallen off the bus and is not responding to commands.          (probe, one printk, 3 lines)
  NVRM: GPU 0000:3b:00.0: GPU has fallen off the bus.                       (at run time)
  nvidia-nvswitch2: SXid (PCI:0000:88:00.0): 12028, Non-fatal, Link 32 egress non-posted PRIV error (First)
  nvidia-nvswitch2: SXid (PCI:0000:88:00.0): 12028, Severity 0 Engine instance 32 Sub-engine instance 00
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Literal

from checker.parsers.common import Parsed, guarded
from checker.parsers.event_draft import EventDraft
from checker.schemas import KernelEvent, KernelEventKind, KernelLogState

K = KernelEventKind
GPU_KINDS = frozenset({K.gpu_xid, K.gpu_sxid, K.gpu_fallen_off_bus, K.gpu_identity})

# domain:bus:device, optionally .function; the domain is 4 digits in the kernel's form, 8 in nvidia-smi's
_ADDRESS = r"[0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}(?:\.[0-7])?"
_ADDRESS_PARTS = re.compile(r"^([0-9a-fA-F]{4,8}):([0-9a-fA-F]{2}):([0-9a-fA-F]{2})(?:\.([0-7]))?$")

# -- the classifier's patterns (kernel_events.RULES uses them; order there: SXid before Xid) ---------------

XID = (
    r"(?<![A-Za-z])Xid \((?:PCI:)?(?P<bdf>" + _ADDRESS + r")\): (?P<code>\d{1,5})\b"
    r"(?:, pid=(?P<pid>'?<?[^,]{0,24}?>?'?)(?:, name=(?P<name>[^,]{0,64}?))?)?(?:, ?(?P<text>.*?))?\s*$"
)
SXID = (
    r"^\s*(?P<prefix>(?:(?P<switch>[\w\-]{1,40}): )?SXid \((?:PCI:)?(?P<bdf>" + _ADDRESS + r")\): "
    r"(?P<code>\d{1,6}), )(?P<severity>Non-fatal|Fatal), (?P<text>.*?)\s*$"
)
GPU_IDENTITY = r"NVRM: GPU at PCI:(?P<bdf>" + _ADDRESS + r"): (?P<uuid>GPU-[0-9a-fA-F\-]{36})"
FALLEN_PROBE = r"NVRM: The NVIDIA GPU (?P<bdf>" + _ADDRESS + r")"
FALLEN_RUNTIME = r"NVRM: GPU (?P<bdf>" + _ADDRESS + r"): GPU has fallen off the bus"
FALLEN = "fallen off the bus"

Subject = Callable[[re.Match[str]], str | None]
Mode = Literal["none", "prefix", "nvrm"]


def bdf_subject(m: re.Match[str]) -> str | None:
    """The classifier's subject for every GPU line: the device's address in the kernel's form."""
    return gpu_bdf(m.group("bdf"))


# (kind, needle, regex, subject, block) for kernel_events.RULES, in its order. Block "nvrm": the lines
# after the headline that go on with "NVRM:" in the same burst belong to it (the GSP RPC history after an
# Xid 119, the board serial after "GPU at PCI", the probe message's own continuation lines).
GPU_RULES: tuple[tuple[KernelEventKind, str, str, Subject | None, Mode], ...] = (
    (K.gpu_sxid, "SXid (", SXID, bdf_subject, "prefix"),
    (K.gpu_xid, "Xid (", XID, bdf_subject, "nvrm"),
    (K.gpu_identity, "NVRM: GPU at PCI:", GPU_IDENTITY, bdf_subject, "nvrm"),
    (K.gpu_fallen_off_bus, "NVRM: The NVIDIA GPU ", FALLEN_PROBE, bdf_subject, "nvrm"),
    (K.gpu_fallen_off_bus, "fallen off the bus", FALLEN_RUNTIME, bdf_subject, "nvrm"),
)

_XID = re.compile(XID)
_SXID = re.compile(SXID.replace(r"^\s*", "", 1))  # a kept line is the raw one, its timestamp first
_IDENTITY = re.compile(GPU_IDENTITY)
_SERIAL = re.compile(r"NVRM: GPU Board Serial Number: (?P<serial>[\w\-]{1,64})")
_FALLEN_PROBE = re.compile(FALLEN_PROBE)
_FALLEN_RUNTIME = re.compile(FALLEN_RUNTIME)
_PCI_ID = re.compile(r"PCI ID: (?P<id>[0-9a-fA-F]{4}:[0-9a-fA-F]{4})")


def gpu_bdf(text: str | None) -> str | None:
    """A PCI address in the kernel's form, 0000:9b:00.0, from the driver's "PCI:0000:9b:00" (no
    function: a GPU is function 0), nvidia-smi's "00000000:9B:00.0" or the kernel's own."""
    if not text:
        return None
    m = _ADDRESS_PARTS.match(text.removeprefix("PCI:"))
    if m is None:
        return None
    domain, bus, device, function = m.groups()
    return f"{int(domain, 16):04x}:{bus.lower()}:{device.lower()}.{function or '0'}"


# -- what the centre reads back out of an event ------------------------------------------------------


@dataclass(frozen=True)
class XidRecord:
    """One Xid (or a fallen-off-the-bus message) on one GPU."""

    bdf: str
    code: int | None  # None: the fallen-off-the-bus message without an Xid 79 line
    pid: int | None = None
    process: str | None = None  # the driver's name=; None when '<unknown>'
    text: str = ""  # what follows the code: the driver's own words
    fallen_off_bus: bool = False
    pci_id: str | None = None  # vendor:device, when the message gives it (10de:26b5)


@dataclass(frozen=True)
class SxidRecord:
    """One SXid headline of an NVSwitch (its Severity/Data lines ride with it)."""

    bdf: str
    code: int
    fatal: bool
    switch: str | None = None  # nvidia-nvswitchN
    text: str = ""


@dataclass(frozen=True)
class GpuIdentity:
    bdf: str
    uuid: str | None = None
    serial: str | None = None


@dataclass
class GpuKernelLog:
    """The GPU lines of one kernel-log state, in log order."""

    xids: list[XidRecord] = field(default_factory=list)
    sxids: list[SxidRecord] = field(default_factory=list)
    identities: list[GpuIdentity] = field(default_factory=list)


def _unknown(value: str | None) -> str | None:
    value = (value or "").strip().strip("'")
    return None if not value or value == "<unknown>" else value


def xid_record(event: KernelEvent) -> XidRecord | None:
    """The Xid or fallen-off-the-bus record of a gpu_xid / gpu_fallen_off_bus event (None for other kinds)."""
    if event.kind is K.gpu_xid:
        m = next((m for line in event.lines[:1] if (m := _XID.search(line))), None)
        bdf = gpu_bdf(m.group("bdf")) if m else None
        if m is None or bdf is None:
            return None
        pid = _unknown(m.group("pid"))
        code = int(m.group("code"))
        return XidRecord(
            bdf=bdf,
            code=code,
            pid=int(pid) if pid and pid.isdecimal() else None,
            process=_unknown(m.group("name")),
            text=(m.group("text") or "").strip()[:240],
            fallen_off_bus=code == 79,
        )
    if event.kind is K.gpu_fallen_off_bus:
        joined = " ".join(event.lines).replace("\\x0a", " ")
        m = _FALLEN_PROBE.search(joined) or _FALLEN_RUNTIME.search(joined)
        bdf = gpu_bdf(m.group("bdf")) if m else None
        if bdf is None:
            return None
        pci = _PCI_ID.search(joined)
        return XidRecord(bdf=bdf, code=None, text=FALLEN, fallen_off_bus=True, pci_id=pci.group("id") if pci else None)
    return None


def sxid_record(event: KernelEvent) -> SxidRecord | None:
    if event.kind is not K.gpu_sxid or not event.lines:
        return None
    m = _SXID.search(event.lines[0])
    bdf = gpu_bdf(m.group("bdf")) if m else None
    if m is None or bdf is None:
        return None
    return SxidRecord(
        bdf=bdf, code=int(m.group("code")), fatal=m.group("severity") == "Fatal", switch=m.group("switch"),
        text=m.group("text")[:240],
    )  # fmt: skip


def identity(event: KernelEvent) -> GpuIdentity | None:
    """A GPU's uuid and board serial, from the lines the driver prints before its first Xid."""
    if event.kind is not K.gpu_identity:
        return None
    m = next((m for line in event.lines if (m := _IDENTITY.search(line))), None)
    bdf = gpu_bdf(m.group("bdf")) if m else None
    if m is None or bdf is None:
        return None
    serial = next((s.group("serial") for line in event.lines if (s := _SERIAL.search(line))), None)
    return GpuIdentity(bdf, m.group("uuid"), serial)


def unconfirmed(event: KernelEvent | EventDraft) -> bool:
    """A probe message ("The NVIDIA GPU … installed in this system …") that is not about a GPU fallen off
    the bus (an unsupported GPU, a driver mismatch): the classifier drops it."""
    return event.kind is K.gpu_fallen_off_bus and not any(FALLEN in line for line in event.lines)


def drop_unconfirmed(events: list[EventDraft]) -> list[EventDraft]:
    return [e for e in events if not unconfirmed(e)]


@guarded(GpuKernelLog)
def gpu_lines(state: KernelLogState | None) -> Parsed[GpuKernelLog]:
    """The Xid, SXid and identity records of a kernel-log state, in log order."""
    found = GpuKernelLog()
    problems: list[str] = []
    for event in state.events if state is not None else ():
        if event.kind not in GPU_KINDS:
            continue
        if (x := xid_record(event)) is not None:
            found.xids.append(x)
        elif (s := sxid_record(event)) is not None:
            found.sxids.append(s)
        elif (i := identity(event)) is not None:
            found.identities.append(i)
        else:
            problems.append(f"{event.kind.value} event without a readable headline: {(event.lines or [''])[0][:200]}")
    return Parsed(found, problems)


def identities(records: Iterable[GpuIdentity]) -> dict[str, GpuIdentity]:
    """BDF -> the newest identity the log gave for it."""
    return {r.bdf: r for r in records}
