"""Verification under load: stressapptest on the drained host with the stall probe on (seed 000).

A repair of memory (hard PPR, a new DIMM) is not verified by a quiet CE rate alone: an idle host may
simply not touch the weak rows. Seed 000 reproduced memory errors with stressapptest and measured
their cost with a fine-grained stall detector; so this runs `stressapptest -s SECONDS -M MB` (MB a
share of MemAvailable, bounded) under the stall probe, in a scope of its own on the housekeeping CPUs
(memtest_scope), reads the EDAC counters per DIMM (memtest_edac) and the kernel log before and after,
and passes only if stressapptest says PASS, no new CE or UE was counted or logged, no probed CPU
stalled past the threshold, and nothing left a gap. Gaps, never a pass: the centre did not confirm a
drain (nothing runs: the load would sit next to production work), stressapptest missing (nothing
runs), a run that covered less than `min_coverage_percent` of MemAvailable or was CPU-throttled by the
agent's cgroup, no EDAC counters. A gap fails the step saying so, and the ticket it leads to carries it.
"""

from __future__ import annotations

import json
import sys
from typing import TYPE_CHECKING, Any

from checker.agent.probe import probe_cpus
from checker.parsers.kernel_events import match_line
from checker.parsers.stressapptest import parse_stressapptest
from checker.schemas import EdacState, KernelEventKind
from cyborg.actions import VerifyMemoryUnderLoadParams
from cyborg.commands import ActionContext, ActionFailed
from cyborg.drivers.base import VerificationFailed
from cyborg.drivers.memtest_edac import describe, edac_changes, edac_snapshot
from cyborg.drivers.memtest_scope import Placement, coverage_gap, place

if TYPE_CHECKING:
    from cyborg.drivers.linux import LinuxDriver

TOOL = "stressapptest"
NOT_DRAINED = "host not drained: load test not run"
PROBE_CPUS = 2
PROBE_PERIOD_MS = 10.0  # finer than the agent's own probe: the run is short and the host drained
MEMORY_EVENTS = frozenset(
    {
        KernelEventKind.edac_ce,
        KernelEventKind.edac_ue,
        KernelEventKind.mce_hardware_error,
        KernelEventKind.mce_logged,
        KernelEventKind.cmci_storm,
        KernelEventKind.ghes_error,
        KernelEventKind.memory_failure,
    }
)


def memory_log_lines(before: str, after: str) -> list[str]:
    """Kernel-log lines printed during the run (in `after`, not in `before`) that report a memory error."""
    seen = set(before.splitlines())
    found = []
    for line in after.splitlines():
        if line in seen:
            continue
        message = line.split("] ", 1)[-1]
        hit = match_line(message)
        if hit is not None and hit[0].kind in MEMORY_EVENTS:
            found.append(line.strip()[:300])
    return found[:20]


def _gap(gap: str, ctx: ActionContext, **found: Any) -> VerificationFailed:
    """Nothing was run: the step fails as a gap, saying why."""
    ctx.note("gap", gap, kind="check")
    return VerificationFailed(f"verification gap: {gap}", {"verdict": "gap", "gap": gap, **found})


def verify_memory_under_load(
    driver: LinuxDriver, params: VerifyMemoryUnderLoadParams, ctx: ActionContext
) -> dict[str, Any]:
    what = f"DIMM {params.dimm}" if params.dimm else "the host's memory"
    if not params.drained:
        gap = f"{NOT_DRAINED} ({what} not verified: no scheduler drain confirmed by the centre)"
        raise _gap(gap, ctx, failures=[], dimm=params.dimm)
    if ctx.system.which(TOOL) is None:
        gap = f"{TOOL} is not installed: {what} is not verified under load (install the Debian package {TOOL})"
        raise _gap(gap, ctx)
    placement = place(driver, params, ctx)
    if placement.megabytes < 16:
        raise ActionFailed(f"precondition: {placement.megabytes} MB to test is too little to verify memory")
    cpus, why = probe_cpus(driver.system, set(placement.housekeeping), PROBE_CPUS)  # type: ignore[arg-type]
    if not cpus:
        raise ActionFailed(f"precondition: no CPU to run the stall probe on: {why}")
    edac_before = edac_snapshot(driver.system)
    log_before = ctx.must(["dmesg"], changes=False)
    argv = [*placement.prefix, sys.executable, "-m", "checker.agent.stallprobe", "--cpus", ",".join(map(str, cpus))]
    argv += ["--period-ms", f"{PROBE_PERIOD_MS:g}", "--threshold-ms", f"{params.stall_threshold_ms:g}"]
    argv += ["--timeout-s", str(params.seconds + 120), "--", TOOL, "-s", str(params.seconds)]
    argv += ["-M", str(placement.megabytes)]
    output = ctx.must(argv, timeout_s=params.seconds + 180)  # a load on the host: not run dry
    if ctx.dry_run:
        return {"verdict": "dry_run", "memory_mb": placement.megabytes, "probe_cpus": cpus, "scope": placement.scope}
    try:
        probed = json.loads(output)
        run = probed["run"]
    except (ValueError, KeyError, TypeError):
        raise ActionFailed(f"the stall probe printed no summary: {output[:300]!r}") from None
    edac_after = edac_snapshot(driver.system)
    new_log = memory_log_lines(log_before, ctx.must(["dmesg"], changes=False))
    stress = parse_stressapptest(str(run.get("output", ""))).value
    findings = _findings(params, placement, probed, run, stress, (edac_before, edac_after), new_log)
    if findings["failures"]:
        raise VerificationFailed(f"{what} failed verification under load: {'; '.join(findings['failures'])}", findings)
    if findings["gaps"]:
        findings["verdict"] = "gap"
        findings["gap"] = "; ".join(findings["gaps"])
        raise VerificationFailed(f"verification gap: {what}: {findings['gap']}", findings)
    return findings


def _edac(
    params: VerifyMemoryUnderLoadParams, readings: tuple[EdacState | None, EdacState | None]
) -> tuple[list[str], dict[str, Any]]:
    """The failure lines for new EDAC errors, naming the DIMMs, and what goes into the findings."""
    before, after = readings
    if before is None or after is None:
        return [], {"edac_new": {}, "dimms_erred": [], "edac_unplaced": {}, "dimm_erred": None}
    changes = edac_changes(before, after)
    labels = {d.label for c in after.controllers for d in c.dimms if d.label}
    lines, target_erred = describe(changes, params.dimm, labels)
    if changes["dimms"] and target_erred is False:
        lines.append(f"not the DIMM verified ({params.dimm}): another DIMM erred under load")
    found = {
        "edac_new": changes["edac_new"],
        "dimms_erred": changes["dimms"],
        "edac_unplaced": changes["unplaced"],
        "dimm_erred": target_erred,
    }
    return lines, found


def _findings(
    params: VerifyMemoryUnderLoadParams,
    placement: Placement,
    probed: dict[str, Any],
    run: dict[str, Any],
    stress: Any,
    edac: tuple[EdacState | None, EdacState | None],
    new_log: list[str],
) -> dict[str, Any]:
    failures: list[str] = []
    if run.get("timed_out"):
        failures.append(f"{TOOL} did not finish within {params.seconds + 120} s")
    elif stress.procedural:
        failures.append(f"{TOOL} could not test: {'; '.join(stress.process_lines[:2]) or stress.reason}")
    elif not stress.passed:
        failures.append(
            f"{TOOL} {stress.status or 'printed no status'}: {stress.hardware_incidents} hardware incidents, "
            f"{stress.errors} errors"
        )
    edac_lines, edac_found = _edac(params, edac)
    failures += edac_lines
    if new_log:
        failures.append(f"{len(new_log)} memory-error lines in the kernel log during the run")
    worst = max((c["max_ms"] for c in probed.get("cpus", {}).values()), default=0.0)
    if worst >= params.stall_threshold_ms:
        failures.append(f"a {worst:.0f} ms stall on the probed CPUs (threshold {params.stall_threshold_ms:g} ms)")
    gaps = list(placement.gaps)
    short = coverage_gap(placement, params)
    if short is not None:
        gaps.append(short)
    if edac[0] is None:
        gaps.append("no EDAC counters on this host: CE/UE counted from the kernel log only, no DIMM named")
    elif edac[1] is None:  # read before the run, not after: its new CE/UE are unknown, never taken for none
        gaps.append("the EDAC counters could not be read after the run: CE/UE counted from the kernel log only")
    return {
        "verdict": "fail" if failures else ("gap" if gaps else "pass"),
        "failures": failures,
        "gaps": gaps,
        "dimm": params.dimm,
        "coverage": placement.coverage(params),
        "stressapptest": {
            "status": stress.status,
            "reason": stress.reason,
            "hardware_incidents": stress.hardware_incidents,
            "errors": stress.errors,
            "lines": stress.hardware_lines or stress.process_lines,
            "seconds": params.seconds,
            "memory_mb": placement.megabytes,
        },
        **edac_found,
        "kernel_log_new": new_log,
        "stalls": {
            "cpus": probed.get("cpus", {}),
            "max_ms": worst,
            "coincident_count": probed.get("coincident_count", 0),
            "threshold_ms": params.stall_threshold_ms,
        },
    }
