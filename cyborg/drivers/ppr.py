"""Hard post-package repair through the SMI flow, on the real host.

CMCI (the production mode) gives no physical address; firmware-first (SMI) does, at the cost of
stalling every core while it logs. So: switch memory error reporting to firmware-first, wait for
the DIMM's next corrected error and record the physical addresses the firmware reports (GHES
`physical_address:` lines in the kernel log), schedule a hard PPR of each for the next boot with
the vendor/BMC tool, reboot (PPR runs during POST), and after the boot switch back to CMCI; the
remediator's settle period then checks the errors are gone. The commands are argv templates from
FLEETFIX_AGENT_PPR_TOOL (firmware_first, cmci, schedule), as vendors each have their own tool.
See docs/domain (seed 000) for why the flow is hybrid.
"""

from __future__ import annotations

import re
import time
from typing import TYPE_CHECKING, Any

from cyborg.actions import HardPprParams
from cyborg.commands import ActionContext, ActionFailed

if TYPE_CHECKING:
    from cyborg.drivers.linux import LinuxDriver

_ADDRESS = re.compile(r"physical_address:\s*(0x[0-9a-fA-F]+)")
TEMPLATES = ("firmware_first", "cmci", "schedule")


def physical_addresses(kernel_log: str) -> list[str]:
    """Distinct physical addresses of memory errors reported firmware-first (GHES), in order."""
    seen: dict[str, None] = {}
    for match in _ADDRESS.finditer(kernel_log):
        seen.setdefault(f"0x{int(match.group(1), 16):x}", None)
    return list(seen)


def fill(template: list[str], **values: str) -> list[str]:
    out = []
    for part in template:
        for name, value in values.items():
            part = part.replace("{" + name + "}", value)
        out.append(part)
    return out


def _tool(driver: LinuxDriver, name: str) -> list[str]:
    template = driver.ppr_tool.get(name)
    if not template:
        raise ActionFailed(f"precondition: FLEETFIX_AGENT_PPR_TOOL has no {name!r} command ({', '.join(TEMPLATES)})")
    return template


def hard_ppr(driver: LinuxDriver, params: HardPprParams, ctx: ActionContext) -> dict[str, Any]:
    for name in TEMPLATES:
        _tool(driver, name)
    known = set(physical_addresses(ctx.must(["dmesg"], changes=False)))
    ctx.must(fill(_tool(driver, "firmware_first"), dimm=params.dimm))
    addresses: list[str] = []
    give_up = time.monotonic() + params.capture_s
    while not addresses and not ctx.dry_run:
        addresses = [a for a in physical_addresses(ctx.must(["dmesg"], changes=False)) if a not in known]
        if addresses:
            break
        if time.monotonic() >= give_up or ctx.remaining() <= driver.poll_s:
            ctx.must(fill(_tool(driver, "cmci"), dimm=params.dimm))  # back to the cheap mode before giving up
            raise ActionFailed(f"no error address for {params.dimm} within {params.capture_s} s in firmware-first mode")
        ctx.sleep(driver.poll_s)
    for address in addresses:
        ctx.must(fill(_tool(driver, "schedule"), address=address, dimm=params.dimm))
    restarted = driver.restart(ctx, warm=False, release=driver.release())  # PPR runs during POST: cold
    return {"dimm": params.dimm, "addresses": addresses, **restarted}


def after_boot(driver: LinuxDriver, params: HardPprParams, ctx: ActionContext) -> dict[str, Any]:
    ctx.must(fill(_tool(driver, "cmci"), dimm=params.dimm))
    return {"error_reporting": "cmci"}
