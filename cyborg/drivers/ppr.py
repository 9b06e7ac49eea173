"""Hard post-package repair through the SMI flow, on the real host.

CMCI (the production mode) gives no physical address; firmware-first (SMI) does, at the cost of
stalling every core while it logs. So: switch memory error reporting to firmware-first, wait for
the DIMM's next corrected error and record the physical addresses the firmware reports (GHES
memory-error records in the kernel log whose `DIMM location:` or `fru_text:` names the step's DIMM:
a record of another DIMM, or one naming none, is never repaired against it; if none names it, or
records come faster than CAPTURE_MAX_RATE, back to CMCI and fail with the records listed),
schedule a hard PPR of each for the next boot with
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
from typing import TYPE_CHECKING, Any, NoReturn

from checker.parsers.ghes import GhesSection, ghes_sections
from cyborg.actions import HardPprParams
from cyborg.commands import ActionContext, ActionFailed

if TYPE_CHECKING:
    from cyborg.drivers.linux import LinuxDriver

TEMPLATES = ("firmware_first", "cmci", "schedule")
MODE_TEMPLATE = "mode"  # optional: prints the mode the firmware reports errors in now
CMCI_DISABLED = "/sys/devices/system/machinecheck/machinecheck0/cmci_disabled"
# The capture gives up at once above this many memory records per second (each an SMI stalling every
# core for up to hundreds of ms, seed 000): our choice, the same 1/s as the SMI rules, and at that rate
# the errors span more rows than a DIMM has spares anyway. The rule (dimm-ce-ppr) starts below it.
CAPTURE_MAX_RATE = 1.0
CAPTURE_MIN_RECORDS = 5  # a burst of a few records right after the switch is not yet a rate
MAX_LISTED = 10
SWITCH_BACK_S = 30.0  # budget kept for the switch back to CMCI: a capture never eats the time it needs


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
    for section in ghes_sections(kernel_log.splitlines()):
        if section.memory and section.physical_address:
            seen.setdefault(section.physical_address, None)
    return list(seen)


def _norm(text: str) -> str:
    return re.sub(r"[^0-9a-z]", "", text.lower())


def dimm_of(section: GhesSection, params: HardPprParams) -> str:
    """`this` (the record names the step's DIMM), `other` (it names another), `unnamed` (no location).
    The host matches names only: the firmware's DIMM location (SMBIOS bank locator and locator, which
    is also ghes_edac's EDAC label) or fru_text against the step's DIMM and the locations the centre
    put in its params (it knows the board's label map; the host does not)."""
    names = [_norm(n) for n in section.names()]
    if not names:
        return "unnamed"
    wanted = {_norm(w) for w in (params.dimm, *params.locations) if _norm(w)}
    return "this" if any(n in wanted for n in names) else "other"


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


def _give_up(
    driver: LinuxDriver,
    params: HardPprParams,
    ctx: ActionContext,
    switches: list[dict[str, str]],
    why: str,
    seen: list[GhesSection],
) -> NoReturn:
    ctx.must(fill(_tool(driver, "cmci"), dimm=params.dimm))  # back to the cheap mode before giving up
    switches.append(_switch("cmci"))
    listed = "; ".join(s.summary() for s in seen[:MAX_LISTED]) or "none"
    more = f" (+{len(seen) - MAX_LISTED} more)" if len(seen) > MAX_LISTED else ""
    raise ActionFailed(
        f"{why} (firmware_first at {switches[0]['at']}, back to cmci at {switches[1]['at']}); "
        f"memory records seen: {listed}{more}"
    )


def hard_ppr(driver: LinuxDriver, params: HardPprParams, ctx: ActionContext) -> dict[str, Any]:
    for name in TEMPLATES:
        _tool(driver, name)
    known = {s.key for s in ghes_sections(ctx.must(["dmesg"], changes=False).splitlines())}
    ctx.must(fill(_tool(driver, "firmware_first"), dimm=params.dimm))
    switches = [_switch("firmware_first")]
    ctx.note("error reporting: firmware_first", switches[0]["at"])
    started = time.monotonic()
    give_up = started + params.capture_s
    mine: list[GhesSection] = []
    seen: list[GhesSection] = []
    while not ctx.dry_run:
        text = ctx.must(["dmesg"], changes=False)
        seen = [s for s in ghes_sections(text.splitlines()) if s.memory and s.key not in known]
        mine = [s for s in seen if s.physical_address and dimm_of(s, params) == "this"]
        elapsed = max(time.monotonic() - started, driver.poll_s, 1.0)
        if len(seen) >= CAPTURE_MIN_RECORDS and len(seen) / elapsed > CAPTURE_MAX_RATE:
            _give_up(
                driver,
                params,
                ctx,
                switches,
                f"{len(seen)} memory records in {elapsed:.0f} s in firmware-first mode, above "
                f"{CAPTURE_MAX_RATE:g}/s: every one is an SMI that stalls all cores; too many rows for PPR",
                seen,
            )
        if mine:
            break
        if time.monotonic() >= give_up or ctx.remaining() <= driver.poll_s + SWITCH_BACK_S:
            why = f"no error address for {params.dimm} within {params.capture_s} s in firmware-first mode"
            if seen:
                why += ": the records that came name another DIMM or none"
            _give_up(driver, params, ctx, switches, why, seen)
        ctx.sleep(driver.poll_s)
    addresses = list(dict.fromkeys(s.physical_address for s in mine if s.physical_address))
    for address in addresses:
        ctx.must(fill(_tool(driver, "schedule"), address=address, dimm=params.dimm))
    if not ctx.dry_run:
        _keep_switches(driver, switches)
    restarted = driver.restart(ctx, warm=False, release=driver.release())  # PPR runs during POST: cold
    ignored = [s.summary() for s in seen if s not in mine][:MAX_LISTED]
    return {
        "dimm": params.dimm,
        "addresses": addresses,
        "records": [s.summary() for s in mine][:MAX_LISTED],
        "ignored_records": ignored,
        "mode_switches": switches,
        **restarted,
    }


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
    """A host left in firmware-first (an interrupted PPR flow) back to CMCI. It has no DIMM: a `cmci`
    (or `mode`) template that needs one is refused rather than run with `{dimm}` empty."""
    for name in ("cmci", MODE_TEMPLATE):
        if any("{dimm}" in part for part in driver.ppr_tool.get(name) or []):
            raise ActionFailed(
                f"precondition: FLEETFIX_AGENT_PPR_TOOL's {name!r} command needs {{dimm}}, and restore_cmci "
                "switches the whole host: give it a command without one"
            )
    return _verified_cmci(driver, ctx, "")
