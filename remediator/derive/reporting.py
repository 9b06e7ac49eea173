"""SMI rate and the error-reporting mode: is the host reporting corrected memory errors firmware-first
(an SMI per error: every core stalls for up to hundreds of ms) or through CMCI (one core), and
does its class expect that mode (docs/error-reporting.md; seed 000's hybrid flow).

Pure, like the derivers: the caller (remediator.host_evaluation) hands the report, the signals
already derived from it (the error sources), the host's "smi" memory and what the inventory knows,
and keeps the memory returned. Runs after the other derivers because it needs their signals.

- `smi_rate`: SMIs per second over the time between two reports, from MSR_SMI_COUNT per package
  (the host's rate is the busiest package's: an SMI stops every package, so they are not added).
  A new boot, a count that went down (not a wrap), a gap over MAX_GAP_S or a first sight records only.
  The low 32 bits wrap: a drop from the top half to a small value within a boot is a wrap.
- `error_reporting_mode`: firmware_first when GHES records arrive (or came within MODE_MEMORY_S in
  this boot, newer than any native one), cmci when native EDAC/MCE errors arrive; without errors,
  ghes_edac as the EDAC driver says firmware_first and the kernel's CMCI left on says cmci, both
  `by: configuration` (a presumption: a BIOS set to firmware-first shows only when an error comes).
- `smi_rate_firmware_first`: the SMI rate of a host seen firmware-first whose class expects CMCI,
  with whether errors arrive and whether a hard-PPR flow has it in firmware-first on purpose.
- `corrected_errors_ignored`: machinecheck0/ignore_ce is 1 — corrected errors are not reported at all.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from typing import Any

from checker.schemas import KernelEventKind, Report
from remediator.signals import MAX_GAP_S, SignalValue

SMI_COUNTER_WRAP = 2**32
MODE_MEMORY_S = 3600.0  # GHES or native errors seen this long ago still say the mode (within the boot)
BASELINE_WEIGHT = 0.2  # a new quiet sample's weight in the host's own SMI baseline
BASELINE_CEILING = 1.0  # SMIs/s: samples at or above this (the rules' threshold) never move the baseline
NATIVE_KINDS = {
    KernelEventKind.edac_ce: "edac",
    KernelEventKind.edac_ue: "edac",
    KernelEventKind.mce_hardware_error: "mce",
    KernelEventKind.mce_logged: "mce",
    KernelEventKind.cmci_storm: "cmci_storm",
}
# Signals (already derived from this report) that mean memory errors are arriving.
ERROR_SIGNALS = {
    "dimm_ce_rate": "edac",
    "dimm_ue_rate": "edac",
    "dimm_ue": "edac",
    "edac_noinfo_ce_rate": "edac",
    "mce_memory_corrected": "mce",
    "mce_memory_uncorrected": "mce",
    "cmci_storm": "cmci_storm",
}


def _ghes_driver(report: Report) -> bool:
    edac = report.observations.edac
    return edac is not None and any((c.mc_name or "").startswith("ghes") for c in edac.controllers)


def error_sources(report: Report, signals: list[SignalValue]) -> tuple[int, list[str]]:
    """GHES records in this report, and the native sources (edac, mce, cmci_storm) of errors in it.
    Under ghes_edac, or beside GHES records, EDAC's counts are the GHES records': not native."""
    log = report.observations.kernel_log
    events = log.events if log is not None else []
    ghes = sum(e.count for e in events if e.kind == KernelEventKind.ghes_error)
    native = {NATIVE_KINDS[e.kind] for e in events if e.kind in NATIVE_KINDS}
    native |= {ERROR_SIGNALS[s.kind] for s in signals if s.kind in ERROR_SIGNALS and s.value > 0}
    if any(r.error_class == "memory" for r in report.observations.mce or []):
        native.add("mce")
    if ghes or _ghes_driver(report):
        # EDAC lines and counts beside GHES records are ghes_edac's decoding of the same records.
        native.discard("edac")
    return ghes, sorted(native)


def _mode(
    report: Report, ghes: int, native: list[str], state: dict[str, Any], now: dt.datetime, boot: str | None
) -> tuple[str, str, list[str], dict[str, Any]]:
    """(mode, by, evidence, new state)."""
    same_boot = state.get("boot") == boot
    seen = {k: state[k] for k in ("ghes_at", "native_at") if same_boot and isinstance(state.get(k), str)}
    if ghes:
        seen["ghes_at"] = now.isoformat()
    if native:
        seen["native_at"] = now.isoformat()
    evidence: list[str] = []
    if ghes:
        evidence.append(f"{ghes} GHES [Hardware Error] record(s) in the kernel log")
    if native:
        evidence.append(f"errors through the kernel's machine-check path ({', '.join(native)})")
    reporting = report.observations.error_reporting
    ghes_driver = _ghes_driver(report)
    if ghes_driver:
        evidence.append("EDAC driver is ghes_edac")
    if reporting is not None:
        if reporting.hest is not None:
            evidence.append(f"ACPI HEST {'present' if reporting.hest else 'absent'}")
        if reporting.ghes_sources:
            evidence.append(f"{reporting.ghes_sources} GHES error source(s) bound")
        if reporting.cmci_disabled is not None:
            evidence.append(f"cmci_disabled={int(reporting.cmci_disabled)}")
        if reporting.ghes_disabled:
            evidence.append("ghes.disable=1")
    horizon = (now - dt.timedelta(seconds=MODE_MEMORY_S)).isoformat()
    recent = {k: v for k, v in seen.items() if v >= horizon}
    if ghes and native:
        mode, by = "unknown", "ambiguous: GHES records and native machine-check errors in one report"
    elif ghes:
        mode, by = "firmware_first", "errors"
    elif native:
        mode, by = "cmci", "errors"
    elif recent:
        newest = max(recent, key=lambda k: recent[k])
        mode, by = ("firmware_first" if newest == "ghes_at" else "cmci"), "recent errors"
    elif ghes_driver:
        mode, by = "firmware_first", "configuration"
    elif reporting is not None and reporting.cmci_disabled is False:
        mode, by = "cmci", "configuration"
    else:
        mode, by = "unknown", "nothing conclusive"
    return mode, by, evidence, ({**seen, "boot": boot} if seen else {})


def _smi_rate(
    report: Report, state: dict[str, Any], now: dt.datetime, boot: str | None
) -> tuple[dict[str, Any] | None, dict[str, Any]]:
    """The rate's detail (None: nothing to compare with), and the counts to remember."""
    smi = report.observations.smi
    if smi is None or not smi.packages:
        return None, state
    counts = {str(p.package): p.count for p in smi.packages}
    kept = {"at": now.isoformat(), "boot": boot, "counts": counts}
    before = state.get("counts")
    at = state.get("at")
    if not isinstance(before, dict) or not isinstance(at, str) or (boot and state.get("boot") not in (None, boot)):
        return None, kept
    elapsed = (now - dt.datetime.fromisoformat(at)).total_seconds()
    if not 0 < elapsed <= MAX_GAP_S:
        return None, kept
    deltas: dict[str, int] = {}
    wrapped = False
    for package, count in counts.items():
        was = before.get(package)
        if not isinstance(was, int):
            continue
        if count >= was:
            deltas[package] = count - was
        elif was >= SMI_COUNTER_WRAP // 2 and count < SMI_COUNTER_WRAP // 2:
            deltas[package] = count + SMI_COUNTER_WRAP - was
            wrapped = True
        # else: the count went down within a boot without wrapping (a reset): no rate
    if not deltas:
        return None, kept
    package = max(deltas, key=lambda p: deltas[p])
    detail = {
        "delta": deltas[package],
        "elapsed_s": round(elapsed, 3),
        "source": smi.source,
        "cpus": [p.cpu for p in smi.packages],
        "packages": dict(sorted(deltas.items())),
        "wrapped": wrapped,
    }
    return detail, kept


def reporting_signals(
    report: Report,
    signals: list[SignalValue],
    memory: dict[str, Any],
    *,
    expected: str | None,
    hardware_class: str,
    ppr_active: Callable[[], bool],
) -> tuple[list[SignalValue], dict[str, Any]]:
    """The SMI and reporting-mode signals of a report, and the host's new "smi" memory (empty: nothing to keep)."""
    now = report.captured_at.astimezone(dt.UTC)
    boot = report.host.boot_id
    obs = report.observations
    ghes, native = error_sources(report, signals)
    out: list[SignalValue] = []
    mode, by, evidence, mode_state = _mode(report, ghes, native, memory.get("mode") or {}, now, boot)
    arriving = bool(ghes or native)
    sources = (["ghes"] if ghes else []) + native
    in_flow = ppr_active() if mode == "firmware_first" else False
    if obs.error_reporting is not None or arriving or obs.smi is not None:
        mismatch = expected is not None and mode not in ("unknown", expected)
        mode_detail: dict[str, Any] = {
            "mode": mode,
            "by": by,
            "expected_mode": expected,
            "evidence": evidence,
            "hardware_class": hardware_class,
            "ppr_active": in_flow,
        }
        out.append(SignalValue("error_reporting_mode", "host", 1.0 if mismatch else 0.0, mode_detail))
    reporting = obs.error_reporting
    if reporting is not None and reporting.ignore_ce:
        ignored = {"dont_log_ce": reporting.dont_log_ce, "cmci_disabled": reporting.cmci_disabled}
        out.append(SignalValue("corrected_errors_ignored", "machinecheck0", 1.0, ignored))
    rate_detail, smi_state = _smi_rate(report, memory.get("counter") or {}, now, boot)
    baseline = memory.get("baseline")
    baseline = float(baseline) if isinstance(baseline, int | float) else None
    new_memory: dict[str, Any] = {k: v for k, v in (("mode", mode_state), ("counter", smi_state)) if v}
    if rate_detail is not None:
        rate = rate_detail["delta"] / rate_detail["elapsed_s"] if rate_detail["elapsed_s"] else 0.0
        detail: dict[str, Any] = {
            **rate_detail,
            "errors_arriving": arriving,
            "error_sources": sources,
            "mode": mode,
            "baseline": round(baseline, 4) if baseline is not None else None,
        }
        out.append(SignalValue("smi_rate", "host", rate, detail))
        if mode == "firmware_first" and expected == "cmci":
            out.append(
                SignalValue(
                    "smi_rate_firmware_first",
                    "host",
                    rate,
                    {**detail, "expected_mode": expected, "ppr_active": in_flow, "evidence": evidence, "by": by},
                )
            )
        if mode != "firmware_first" and rate < BASELINE_CEILING:
            baseline = rate if baseline is None else baseline + BASELINE_WEIGHT * (rate - baseline)
    if baseline is not None:
        new_memory["baseline"] = round(baseline, 6)
    return out, new_memory
