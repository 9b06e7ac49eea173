"""Soft-offlining a memory page on the real host, for a page that keeps correcting errors.

What mcelog's and rasdaemon's page triggers do (`memory-ce-action = soft`, PAGE_CE_ACTION=soft): the
page's physical address into /sys/devices/system/memory/soft_offline_page (CONFIG_MEMORY_FAILURE, root).
The kernel migrates the page's contents to another page and never hands it out again until the next
boot; nothing running notices, so the host stays in service.

Refused before anything is written: an address outside every "System RAM" range of /proc/iomem (a
device's or firmware's memory; an /proc/iomem of zeros, read without CAP_SYS_ADMIN, tells nothing and
refuses too), a host whose kernel has no soft_offline_page file, and a host that already has
`max_offlined_pages` poisoned pages (/proc/meminfo HardwareCorrupted counts every poisoned page,
soft-offlined or hard-offlined by the kernel, in kB; counted here in 4 KiB pages, so a kernel with larger
pages reaches the cap sooner).

What is verified: the kernel accepts the write only when the page is offline afterwards (it answers
EBUSY or EIO when it could not migrate the page, and the write fails); HardwareCorrupted growing says this
write offlined it, not growing says it was poisoned already (idempotent from Linux 5.10 only: before commit
5a2ffca3c233, "mm,hwpoison: return 0 if the page is already poisoned in soft-offline", the kernel answered
EBUSY for a page poisoned already, so there a second offline of one page fails and the escalation's ticket
says to see the step). What is not: that the errors
stop, since the patrol scrubber still reads the cell (the next reports show it), and there is no kernel
log line to match: "Soft offlining pfn … at process virtual address" is printed by
madvise(MADV_SOFT_OFFLINE) only, not by the sysfs file. A reboot brings the page back: the deriver then
sees its errors again and the rule offlines it again.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from cyborg.actions import PAGE_SIZE, SoftOfflinePageParams
from cyborg.commands import ActionContext, ActionFailed

if TYPE_CHECKING:
    from cyborg.drivers.linux import LinuxDriver

MEMORY_DIR = "/sys/devices/system/memory"
SOFT_OFFLINE = f"{MEMORY_DIR}/soft_offline_page"
IOMEM = "/proc/iomem"
MEMINFO = "/proc/meminfo"
_IOMEM_LINE = re.compile(r"^(\s*)([0-9a-fA-F]+)-([0-9a-fA-F]+) : (.+?)\s*$")
_CORRUPTED = re.compile(r"^HardwareCorrupted:\s+(\d+) kB\s*$", re.M)


def system_ram(text: str) -> list[tuple[int, int]]:
    """The top-level "System RAM" ranges of /proc/iomem, inclusive."""
    ranges: list[tuple[int, int]] = []
    for line in text.splitlines():
        m = _IOMEM_LINE.match(line)
        if m is not None and not m[1] and m[4] == "System RAM":
            ranges.append((int(m[2], 16), int(m[3], 16)))
    return ranges


def hardware_corrupted_kb(text: str | None) -> int | None:
    m = _CORRUPTED.search(text or "")
    return int(m[1]) if m else None


def soft_offline_page(driver: LinuxDriver, params: SoftOfflinePageParams, ctx: ActionContext) -> dict[str, Any]:
    address = int(params.address, 16)
    iomem = driver.system.read_text(IOMEM)
    if iomem is None:
        raise ActionFailed(f"precondition: {IOMEM} is not readable")
    ranges = system_ram(iomem)
    if not ranges or all(start == end == 0 for start, end in ranges):
        raise ActionFailed(
            f"precondition: {IOMEM} shows no System RAM addresses (read without CAP_SYS_ADMIN it shows zeros): "
            f"cannot tell whether {params.address} is memory"
        )
    ram = next(((start, end) for start, end in ranges if start <= address and address + PAGE_SIZE - 1 <= end), None)
    if ram is None:
        raise ActionFailed(
            f"refused: {params.address} is in no System RAM range of {IOMEM}: a device's or the firmware's memory "
            "is not the kernel's to offline"
        )
    if "soft_offline_page" not in (driver.system.list_dir(MEMORY_DIR) or []):
        raise ActionFailed(f"precondition: no {SOFT_OFFLINE} (a kernel without CONFIG_MEMORY_FAILURE)")
    before = hardware_corrupted_kb(driver.system.read_text(MEMINFO))
    if before is None:
        raise ActionFailed(f"precondition: no HardwareCorrupted line in {MEMINFO}: the offline could not be verified")
    poisoned = before * 1024 // PAGE_SIZE
    if poisoned >= params.max_offlined_pages:
        raise ActionFailed(
            f"refused: the host has {poisoned} poisoned pages already (HardwareCorrupted {before} kB), the cap is "
            f"{params.max_offlined_pages}: its memory is a person's to judge (the DIMM ticket), not more offlining"
        )
    changed: dict[str, Any] = {
        "address": params.address,
        "pfn": f"0x{address // PAGE_SIZE:x}",
        "system_ram": f"0x{ram[0]:x}-0x{ram[1]:x}",
        "hardware_corrupted_kb_before": before,
    }
    try:
        ctx.write(SOFT_OFFLINE, params.address)
    except ActionFailed as error:
        raise ActionFailed(f"the kernel did not offline {params.address} ({error})") from None
    if ctx.dry_run:
        return changed
    after = hardware_corrupted_kb(driver.system.read_text(MEMINFO))
    if after is None:
        raise ActionFailed(f"{MEMINFO} lost its HardwareCorrupted line after the write: cannot verify")
    changed.update(
        hardware_corrupted_kb_after=after,
        offlined=True,
        already_offlined=after <= before,  # the kernel accepted it and counted nothing new: it was poisoned before
    )
    return changed
