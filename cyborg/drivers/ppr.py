"""Hard post-package repair through the SMI flow, on the real host.

CMCI (the production mode) gives no physical address; firmware-first (SMI) does, at the cost of
stalling every core while it logs. So: switch memory error reporting to firmware-first, wait for
the DIMM's next corrected error and record the physical addresses the firmware reports (GHES
`physical_address:` lines in the kernel log), schedule a hard PPR of each for the next boot with
the vendor/BMC tool, reboot (PPR runs during POST), and after the boot switch back to CMCI; the
remediator's settle period then checks the errors are gone. The commands are argv templates from
FLEETFIX_AGENT_PPR_TOOL (firmware_first, cmci, schedule; optionally mode, which prints the current
mode), as vendors each have their own tool. See docs/error-reporting.md for why the flow is hybrid.

Every switch is recorded with its time (`mode_switches` in the step's result: firmware_first at t,
cmci at t), so the remediation and any ticket show how long the host spent in the costly mode. The
same `cmci` command, verified, is the `restore_cmci` action: a host an interrupted flow left in
firmware-first goes back (rule smi-firmware-first-left).
"""

from __future__ import annotations

import datetime as dt
import json
import re
import time
from typing import TYPE_CHECKING, Any

from cyborg.actions import HardPprParams
from cyborg.commands import ActionContext, ActionFailed

if TYPE_CHECKING:
    from cyborg.drivers.linux import LinuxDriver

_ADDRESS = re.compile(r"physical_address:\s*(0x[0-9a-fA-F]+)")
TEMPLATES = ("firmware_first", "cmci", "schedule")
MODE_TEMPLATE = "mode"  # optional: prints the mode the firmware reports errors in now
CMCI_DISABLED = "/sys/devices/system/machinecheck/machinecheck0/cmci_disabled"


SWITCHES_FILE = "ppr-mode-switches.json"  # in the agent's work dir: the record crosses the PPR reboot


def _switch(mode: str) -> dict[str, str]:
    return {"mode": mode, "at": dt.datetime.now(dt.UTC).isoformat(timespec="seconds")}


def _keep_switches(driver: LinuxDriver, switches: list[dict[str, str]]) -> None:
    try:
        driver.work_dir.mkdir(parents=True, exist_ok=True)
        (driver.work_dir / SWITCHES_FILE).write_text(json.dumps(switches), encoding="utf-8")
    except OSError:
        pass  # the record is lost, not the repair: the result then shows only the switch back


def _kept_switches(driver: LinuxDriver) -> list[dict[str, str]]:
    path = driver.work_dir / SWITCHES_FILE
    try:
        loaded = json.loads(path.read_text(encoding="utf-8"))
        path.unlink()
    except (OSError, ValueError):
        return []
    return [s for s in loaded if isinstance(s, dict)] if isinstance(loaded, list) else []


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
    switches = [_switch("firmware_first")]
    ctx.note("error reporting: firmware_first", switches[0]["at"])
    addresses: list[str] = []
    give_up = time.monotonic() + params.capture_s
    while not addresses and not ctx.dry_run:
        addresses = [a for a in physical_addresses(ctx.must(["dmesg"], changes=False)) if a not in known]
        if addresses:
            break
        if time.monotonic() >= give_up or ctx.remaining() <= driver.poll_s:
            ctx.must(fill(_tool(driver, "cmci"), dimm=params.dimm))  # back to the cheap mode before giving up
            switches.append(_switch("cmci"))
            raise ActionFailed(
                f"no error address for {params.dimm} within {params.capture_s} s in firmware-first mode "
                f"(firmware_first at {switches[0]['at']}, back to cmci at {switches[1]['at']})"
            )
        ctx.sleep(driver.poll_s)
    for address in addresses:
        ctx.must(fill(_tool(driver, "schedule"), address=address, dimm=params.dimm))
    if not ctx.dry_run:
        _keep_switches(driver, switches)
    restarted = driver.restart(ctx, warm=False, release=driver.release())  # PPR runs during POST: cold
    return {"dimm": params.dimm, "addresses": addresses, "mode_switches": switches, **restarted}


def _verified_cmci(driver: LinuxDriver, ctx: ActionContext, dimm: str) -> dict[str, Any]:
    """Run the tool's cmci command and check what the host shows: CMCI on in the kernel, and the
    tool's own `mode` answer where it has one. Without one the centre's next reports decide (the
    mode is then known from how errors arrive, and the SMI rate)."""
    ctx.must(fill(_tool(driver, "cmci"), dimm=dimm))
    switch = _switch("cmci")
    ctx.note("error reporting: cmci", switch["at"])
    checks: dict[str, Any] = {"error_reporting": "cmci", "mode_switches": [switch]}
    if (driver.system.read_text(CMCI_DISABLED) or "").strip() == "1":
        ctx.write(CMCI_DISABLED, "0")  # the kernel's CMCI back on too; never off
        checks["cmci_disabled"] = "was 1, now 0"
    template = driver.ppr_tool.get(MODE_TEMPLATE)
    if template and not ctx.dry_run:
        said = ctx.must(fill(template, dimm=dimm), changes=False).strip()
        if "cmci" not in said.lower() or "firmware" in said.lower():
            raise ActionFailed(f"{' '.join(template)} says {said[:200]!r} after the switch to CMCI: it did not take")
        checks["verified_by"] = " ".join(template)
    else:
        checks["verified_by"] = "the next reports (mode from how errors arrive, SMI rate)"
    return checks


def after_boot(driver: LinuxDriver, params: HardPprParams, ctx: ActionContext) -> dict[str, Any]:
    before = _kept_switches(driver)
    checks = _verified_cmci(driver, ctx, params.dimm)
    return {**checks, "mode_switches": before + checks["mode_switches"]}


def restore_cmci(driver: LinuxDriver, ctx: ActionContext) -> dict[str, Any]:
    """A host left in firmware-first (an interrupted PPR flow) back to CMCI."""
    return _verified_cmci(driver, ctx, "")
