"""Verification under load: stressapptest on the drained host with the stall probe on (seed 000).

A repair of memory (hard PPR, a new DIMM) is not verified by a quiet CE rate alone: an idle host may
simply not touch the weak rows. Seed 000 reproduced memory errors with stressapptest and measured
their cost with a fine-grained stall detector; so this runs `stressapptest -s SECONDS -M MB` (MB a
share of MemAvailable, bounded) under the stall probe on the housekeeping CPUs, reads the EDAC
counters and the kernel log before and after, and passes only if stressapptest says PASS, no new
CE or UE was counted or logged, and no probed CPU stalled past the threshold. stressapptest missing
is a gap, never a pass: the step fails saying so, and the ticket it leads to carries it.
"""

from __future__ import annotations

import json
import re
import sys
from typing import TYPE_CHECKING, Any

from checker.agent.probe import probe_cpus
from checker.parsers.common import parse_cpu_list
from checker.parsers.kernel_events import match_line
from checker.parsers.stressapptest import parse_stressapptest
from checker.schemas import KernelEventKind
from cyborg.actions import VerifyMemoryUnderLoadParams
from cyborg.commands import ActionContext, ActionFailed
from cyborg.drivers.base import VerificationFailed

if TYPE_CHECKING:
    from cyborg.drivers.linux import LinuxDriver

TOOL = "stressapptest"
EDAC_MC = "/sys/devices/system/edac/mc"
MEMINFO = "/proc/meminfo"
ONLINE = "/sys/devices/system/cpu/online"
SELF_CGROUP = "/proc/self/cgroup"
CGROUP_ROOT = "/sys/fs/cgroup"
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
_MC = re.compile(r"mc\d{1,4}")


def edac_counts(driver: LinuxDriver) -> dict[str, int] | None:
    """Every memory controller's CE and UE totals ({'mc0': ce, 'mc0_ue': ue, …}); None without EDAC."""
    entries = driver.system.list_dir(EDAC_MC)
    if entries is None:
        return None
    counts: dict[str, int] = {}
    for mc in sorted(e for e in entries if _MC.fullmatch(e)):
        for kind in ("ce", "ue"):
            text = (driver.system.read_text(f"{EDAC_MC}/{mc}/{kind}_count") or "").strip()
            if text.isdigit():
                counts[f"{mc}_{kind}"] = int(text)
    return counts


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


def cgroup_room_mb(driver: LinuxDriver) -> tuple[int, str] | None:
    """What this process's cgroup (v2) still lets it allocate, and its memory.max path; None: no limit.
    The agent's unit caps its memory (deploy/fleetfix-agent.service, MemoryMax=), and stressapptest,
    its child, shares the cap: asked for more, it would be killed half-way."""
    own = next(
        (ln[3:].strip() for ln in (driver.system.read_text(SELF_CGROUP) or "").splitlines() if ln[:3] == "0::"), None
    )
    if own is None:
        return None
    limit_path = f"{CGROUP_ROOT}{own.rstrip('/')}/memory.max"
    limit = (driver.system.read_text(limit_path) or "max").strip()
    current = (driver.system.read_text(f"{CGROUP_ROOT}{own.rstrip('/')}/memory.current") or "0").strip()
    if not limit.isdigit():
        return None
    used = int(current) if current.isdigit() else 0
    return max(0, int(limit) - used) * 8 // 10 // (1024 * 1024), limit_path  # a fifth left for the agent


def memory_mb(driver: LinuxDriver, params: VerifyMemoryUnderLoadParams) -> tuple[int, list[str]]:
    """The memory stressapptest tests (-M), and the gaps: what bounded it below the share asked for."""
    for line in (driver.system.read_text(MEMINFO) or "").splitlines():
        if line.startswith("MemAvailable:"):
            available_mb = int(line.split()[1]) // 1024
            wanted = available_mb * params.memory_percent // 100
            megabytes, gaps = min(wanted, params.max_memory_mb or wanted), []
            room = cgroup_room_mb(driver)
            if room is not None and room[0] < megabytes:
                gaps.append(
                    f"only {room[0]} MB of the {megabytes} MB asked for tested: the agent's cgroup caps it "
                    f"({room[1]}; MemoryMax= of its unit)"
                )
                megabytes = room[0]
            if megabytes < 16:
                raise ActionFailed(f"precondition: {megabytes} MB to test is too little to verify memory")
            return megabytes, gaps
    raise ActionFailed(f"precondition: no MemAvailable in {MEMINFO}: cannot bound the memory stressapptest takes")


def _probe_cpus(driver: LinuxDriver) -> list[int]:
    online = set(parse_cpu_list(driver.system.read_text(ONLINE) or "").value)
    cpus, why = probe_cpus(driver.system, online, PROBE_CPUS)  # type: ignore[arg-type]  # read_text is all it uses
    if not cpus:
        raise ActionFailed(f"precondition: no CPU to run the stall probe on: {why}")
    return cpus


def verify_memory_under_load(
    driver: LinuxDriver, params: VerifyMemoryUnderLoadParams, ctx: ActionContext
) -> dict[str, Any]:
    what = f"DIMM {params.dimm}" if params.dimm else "the host's memory"
    if ctx.system.which(TOOL) is None:
        gap = f"{TOOL} is not installed: {what} is not verified under load (install the Debian package {TOOL})"
        ctx.note("gap", gap, kind="check")
        raise VerificationFailed(f"verification gap: {gap}", {"verdict": "gap", "gap": gap})
    megabytes, bounded = memory_mb(driver, params)
    cpus = _probe_cpus(driver)
    edac_before = edac_counts(driver)
    log_before = ctx.must(["dmesg"], changes=False)
    argv = [sys.executable, "-m", "checker.agent.stallprobe", "--cpus", ",".join(map(str, cpus))]
    argv += ["--period-ms", f"{PROBE_PERIOD_MS:g}", "--threshold-ms", f"{params.stall_threshold_ms:g}"]
    argv += ["--timeout-s", str(params.seconds + 120), "--", TOOL, "-s", str(params.seconds), "-M", str(megabytes)]
    output = ctx.must(argv, timeout_s=params.seconds + 180)  # a load on the host: not run dry
    if ctx.dry_run:
        return {"verdict": "dry_run", "memory_mb": megabytes, "probe_cpus": cpus}
    try:
        probed = json.loads(output)
        run = probed["run"]
    except (ValueError, KeyError, TypeError):
        raise ActionFailed(f"the stall probe printed no summary: {output[:300]!r}") from None
    edac_after = edac_counts(driver)
    new_log = memory_log_lines(log_before, ctx.must(["dmesg"], changes=False))
    stress = parse_stressapptest(str(run.get("output", ""))).value
    findings = _findings(params, megabytes, probed, run, stress, edac_before, edac_after, new_log)
    findings["gaps"] = bounded + findings["gaps"]
    if findings["failures"]:
        raise VerificationFailed(f"{what} failed verification under load: {'; '.join(findings['failures'])}", findings)
    return findings


def _findings(
    params: VerifyMemoryUnderLoadParams,
    megabytes: int,
    probed: dict[str, Any],
    run: dict[str, Any],
    stress: Any,
    edac_before: dict[str, int] | None,
    edac_after: dict[str, int] | None,
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
    new_errors = {
        key: edac_after[key] - edac_before.get(key, 0)
        for key in (edac_after or {})
        if edac_before is not None and edac_after is not None and edac_after[key] > edac_before.get(key, 0)
    }
    if new_errors:
        failures.append(
            "new EDAC errors during the run: " + ", ".join(f"{k} +{v}" for k, v in sorted(new_errors.items()))
        )
    if new_log:
        failures.append(f"{len(new_log)} memory-error lines in the kernel log during the run")
    worst = max((c["max_ms"] for c in probed.get("cpus", {}).values()), default=0.0)
    if worst >= params.stall_threshold_ms:
        failures.append(f"a {worst:.0f} ms stall on the probed CPUs (threshold {params.stall_threshold_ms:g} ms)")
    gaps = [] if edac_before is not None else ["no EDAC counters on this host: CE/UE counted from the kernel log only"]
    return {
        "verdict": "fail" if failures else "pass",
        "failures": failures,
        "gaps": gaps,
        "dimm": params.dimm,
        "stressapptest": {
            "status": stress.status,
            "reason": stress.reason,
            "hardware_incidents": stress.hardware_incidents,
            "errors": stress.errors,
            "lines": stress.hardware_lines or stress.process_lines,
            "seconds": params.seconds,
            "memory_mb": megabytes,
        },
        "edac_new": new_errors,
        "kernel_log_new": new_log,
        "stalls": {
            "cpus": probed.get("cpus", {}),
            "max_ms": worst,
            "coincident_count": probed.get("coincident_count", 0),
            "threshold_ms": params.stall_threshold_ms,
        },
    }
