"""The CXL lines of the kernel-log classifier (checker/parsers/kernel_events.py builds its rules from
CXL_RULES and passes its events through `cxl_protocol_records`): what the kernel itself prints when a
CXL memory device fails, for hosts whose rasdaemon records no CXL events. The subject is always a PCI
address: the device's (cxl_pci's messages are `dev_warn(&pdev->dev, …)`: "cxl_pci 0000:35:00.0: …"),
or the firmware-first record's agent; the centre maps it to the memdev and its serial through sysfs
(CxlMemdev.host).

Wording per kernel (Linux 6.x):
- drivers/cxl/core/pci.c (ras.c in later trees) `cxl_error_detected`, the PCI error handler the AER
  core calls for an uncorrectable error: "%s: frozen state error detected, disable CXL.mem" (the
  memdev's name; the channel is frozen, the memdev's driver is released, a reset follows), "failure
  state error detected, request disconnect" (permanent failure), and "%s: memdev disabled, abort
  error handling" (an error on a device whose memdev driver is gone) -> `cxl_mem_disabled`. The RAS
  capability's status bits it reads first (cxl_handle_ras) go to the cxl_aer_uncorrectable_error
  trace event only: the log line does not say which error it was.
- drivers/cxl/pci.c `cxl_err` / `cxl_cmd_err`: "mailbox timeout (opcode: %#x), device state %s%s",
  "mailbox queue busy (…)", "timeout awaiting mailbox ready|idle, device state …", where the two %s
  are " fatal" (Memory Device Status bit 0, Device Fatal) and " firmware-halt" (bit 1, FW Halt,
  CXL 3.1 8.2.8.5.1.1) -> `cxl_device_failed` when either is set; a timeout with neither is no
  event. "timeout awaiting mailbox ready|idle" is cxl_pci_setup_mailbox's, at probe only.
  drivers/cxl/core/pci.c `cxl_await_media_ready` -> `cxl_dvsec_mem_range_active`: "timeout awaiting
  memory active after %d seconds" (at probe: the media never came up, its memory is missing)
  -> `cxl_device_failed`.
- drivers/cxl/pci.c `cxl_slot_reset` ("%s: restart CXL.mem after slot reset") and `cxl_error_resume`
  ("%s: error resume successful|failed": failed when the memdev's driver did not come back, its
  memory is lost for good) -> `cxl_mem_resumed`. A non-fatal uncorrectable error on a normal channel
  releases the memdev with no CXL line of its own: only the AER line and these show it.
- drivers/firmware/efi/cper.c `cper_estatus_print_section` and cper_cxl.c `cxl_cper_print_prot_err`
  (firmware-first): a GHES record whose section is "section_type: CXL Protocol Error", with
  "agent_type: %d, %s", "agent_address: %04x:%02x:%02x.%x" (or "rcrb_base_address: 0x%016llx" for
  an RCH downstream port), "lower_dw/upper_dw" (the device serial, device agents only) and the RAS
  capability's "cxl_ras_uncor_status: 0x%08x" / "cxl_ras_uncor_mask" / "cxl_ras_cor_status" /
  "cxl_ras_cor_mask" -> `cxl_protocol_error`, subject the agent's address (None without one: the
  centre names it by the serial, `protocol_serial`). Its other sections (General Media, DRAM, Memory
  Module records firmware-first) print as "section type: unknown, <guid>" with a hex dump and stay `ghes_error`.
Not CXL events: cxl_inject_poison's "poison inject dpa:…" and "poison clear dpa:…" (tests), a
mailbox timeout whose device state names neither flag, cxl_pci's AER lines ("PCIe Bus Error: …",
already `pcie_aer_*`), and a panic's "CXL cachemem error." (already `panic`; that panic exists only
in a proposed CXL protocol-error handling series, not mainline).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Literal

from checker.parsers.event_draft import EventDraft
from checker.schemas import KernelEventKind

K = KernelEventKind
Subject = Callable[[re.Match[str]], str | None]
Mode = Literal["none"]

_BDF = r"[0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]"
_DEVICE = r"(?:^|\s)(?:[\w-]{1,32} )?(?P<dev>" + _BDF + r"): "
_MEMDEV = r"(?P<memdev>[\w.:-]{1,32}): "
PROTOCOL_SECTION = "section_type: CXL Protocol Error"
_AGENT = re.compile(r"agent_address: (?P<bdf>" + _BDF + r")")
_RCRB = re.compile(r"rcrb_base_address: (?P<rcrb>0x[0-9a-fA-F]{1,16})")


def _device(m: re.Match[str]) -> str | None:
    return m.group("dev").lower()


# kind, needle (a literal the line must contain), regex, subject, block — the first match wins.
CXL_RULES: tuple[tuple[KernelEventKind, str, str, Subject | None, Mode], ...] = (
    (K.cxl_mem_disabled, "frozen state error detected",
     _DEVICE + _MEMDEV + r"frozen state error detected, disable CXL\.mem", _device, "none"),
    (K.cxl_mem_disabled, "failure state error detected",
     _DEVICE + r"failure state error detected, request disconnect", _device, "none"),
    (K.cxl_mem_disabled, "abort error handling",
     _DEVICE + _MEMDEV + r"memdev disabled, abort error handling", _device, "none"),
    (K.cxl_device_failed, ", device state",
     _DEVICE + r"(?:mailbox timeout|mailbox queue busy|timeout awaiting mailbox (?:ready|idle))[^,]*,"
     r" device state:? ?(?P<state> ?(?:fatal|firmware-halt)(?: firmware-halt)?)\s*$", _device, "none"),
    (K.cxl_device_failed, "timeout awaiting memory active",
     _DEVICE + r"timeout awaiting memory active after \d{1,9} seconds", _device, "none"),
    (K.cxl_mem_resumed, "restart CXL.mem after slot reset",
     _DEVICE + _MEMDEV + r"restart CXL\.mem after slot reset", _device, "none"),
    (K.cxl_mem_resumed, "error resume ",
     _DEVICE + _MEMDEV + r"error resume (?:successful|failed)\s*$", _device, "none"),
)  # fmt: skip
_SERIAL = re.compile(r"lower_dw: (?P<lower>0x[0-9a-fA-F]{1,8}), upper_dw: (?P<upper>0x[0-9a-fA-F]{1,8})")


def protocol_agent(lines: list[str]) -> str | None:
    """The agent a CPER CXL Protocol Error names: its PCI address, else its RCRB base address."""
    for line in lines:
        if (m := _AGENT.search(line)) is not None:
            return m.group("bdf").lower()
    for line in lines:
        if (m := _RCRB.search(line)) is not None:
            return f"rcrb {m.group('rcrb')}"
    return None


def protocol_serial(lines: list[str]) -> int | None:
    """The device serial (PCIe DSN) a CPER CXL Protocol Error of a device agent carries, upper_dw:lower_dw."""
    for line in lines:
        if (m := _SERIAL.search(line)) is not None:
            return (int(m.group("upper"), 16) << 32) | int(m.group("lower"), 16)
    return None


def cxl_protocol_records(events: list[EventDraft]) -> list[EventDraft]:
    """GHES records that carry a CXL Protocol Error section become `cxl_protocol_error` events, named
    by their agent (a CXL memory device, or a root, switch or RCH downstream port)."""
    out: list[EventDraft] = []
    for event in events:
        if event.kind is K.ghes_error and any(PROTOCOL_SECTION in line for line in event.lines):
            event = event.model_copy(update={"kind": K.cxl_protocol_error, "subject": protocol_agent(event.lines)})
        out.append(event)
    return out
