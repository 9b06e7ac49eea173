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
- `error_reporting_mode`: firmware_first when GHES memory-error records arrive (`section_type: memory
  error`: a PCIe or processor record says nothing of the memory path; the section types seen are
  listed), or came within MODE_MEMORY_S in this boot, newer than any native one; `persistent` once
  they have for PERSIST_S with no native error between; cmci when native EDAC/MCE errors arrive; without errors,
  ghes_edac as the EDAC driver says firmware_first and the kernel's CMCI left on says cmci, both
  `by: configuration` (a presumption: a BIOS set to firmware-first shows only when an error comes).
- `smi_rate_firmware_first`: the SMI rate of a host seen firmware-first whose class expects CMCI,
  with whether errors arrive and whether a hard-PPR flow has it in firmware-first on purpose.
- `corrected_errors_ignored`: machinecheck0/ignore_ce is 1 — corrected errors are not reported at all.

`errors_arriving` (in `smi_rate`) is True for any error (GHES of any section, native, the SEL's memory
ECC, PCIe AER), None when none arrive but CEs could be going unseen (ignore_ce, dont_log_ce,
cmci_disabled, no EDAC driver nor rasdaemon: `blind_spots`), False only when nothing hides them.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from checker.parsers.ghes import MEMORY_SECTION, section_types
from checker.schemas import KernelEventKind, Report
from remediator.signals import MAX_GAP_S, SignalValue

SMI_COUNTER_WRAP = 2**32
PERSIST_S = 6 * 3600.0  # firmware-first this long (errors still arriving) is `persistent`: longer than a PPR flow
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
# Kernel events of errors that are not memory errors but may cost an SMI each (firmware-first AER).
OTHER_KINDS = {KernelEventKind.pcie_aer_corrected: "pcie_aer", KernelEventKind.pcie_aer_uncorrected: "pcie_aer"}
# Signals (already derived from this report) that mean memory errors are arriving through the OS.
ERROR_SIGNALS = {
    "dimm_ce_rate": "edac",
    "dimm_ue_rate": "edac",
    "dimm_ue": "edac",
    "edac_noinfo_ce_rate": "edac",
    "mce_memory_corrected": "mce",
    "mce_memory_uncorrected": "mce",
    "cmci_storm": "cmci_storm",
}
# Errors that arrive, but say nothing of how the OS is told of memory errors: the BMC's SEL (a
# firmware-first BIOS may log CEs only there) and PCIe AER errors.
OTHER_SIGNALS = {"sel_memory_ecc": "sel"}
CE_RATE_SIGNALS = ("dimm_ce_rate", "edac_noinfo_ce_rate")
TRACKS_LOW, TRACKS_HIGH = 0.5, 2.0  # an SMI rate within this factor of the CE rate "tracks" it


@dataclass
class ErrorSources:
    """What this report shows arriving: GHES memory-error records (the only firmware-first evidence
    of the memory reporting mode), other GHES sections, native machine-check sources, and the rest."""

    ghes_memory: int = 0
    ghes_other: int = 0
    section_types: list[str] = field(default_factory=list)
    native: list[str] = field(default_factory=list)
    other: list[str] = field(default_factory=list)

    @property
    def any(self) -> bool:
        return bool(self.ghes_memory or self.ghes_other or self.native or self.other)

    def names(self) -> list[str]:
        ghes = ["ghes"] if self.ghes_memory else []
        return ghes + self.native + (["ghes_other"] if self.ghes_other else []) + self.other


def _ghes_driver(report: Report) -> bool:
    edac = report.observations.edac
    return edac is not None and any((c.mc_name or "").startswith("ghes") for c in edac.controllers)


def error_sources(report: Report, signals: list[SignalValue]) -> ErrorSources:
    """GHES records in this report by section type, and the native sources (edac, mce, cmci_storm)
    and others (sel, pcie_aer) of errors in it. Under ghes_edac, or beside GHES memory records,
    EDAC's counts are the GHES records': not native."""
    log = report.observations.kernel_log
    events = log.events if log is not None else []
    found = ErrorSources()
    types: dict[str, None] = {}
    for event in events:
        # a CPER record with a CXL Protocol Error section is relabelled cxl_protocol_error by the parser
        # (checker/parsers/cxl_log.py): still a GHES record, counted as one
        if event.kind not in (KernelEventKind.ghes_error, KernelEventKind.cxl_protocol_error):
            continue
        kinds = section_types(event.lines) or ["unknown section"]
        types.update(dict.fromkeys(kinds))
        if MEMORY_SECTION in kinds:
            found.ghes_memory += event.count
        else:
            found.ghes_other += event.count
    found.section_types = list(types)
    native = {NATIVE_KINDS[e.kind] for e in events if e.kind in NATIVE_KINDS}
    native |= {ERROR_SIGNALS[s.kind] for s in signals if s.kind in ERROR_SIGNALS and s.value > 0}
    if any(r.error_class == "memory" for r in report.observations.mce or []):
        native.add("mce")
    if found.ghes_memory or _ghes_driver(report):
        # EDAC lines and counts beside GHES records are ghes_edac's decoding of the same records.
        native.discard("edac")
    other = {OTHER_KINDS[e.kind] for e in events if e.kind in OTHER_KINDS}
    other |= {OTHER_SIGNALS[s.kind] for s in signals if s.kind in OTHER_SIGNALS and s.value > 0}
    other |= {
        "pcie_aer"
        for s in signals
        if s.kind == "device_event_count"
        and str(s.detail.get("kind", "")).startswith("pcie_aer")
        and s.detail.get("new")
    }
    found.native, found.other = sorted(native), sorted(other)
    return found


def blind_spots(report: Report) -> list[str]:
    """Why corrected memory errors could be happening without this report showing them."""
    obs = report.observations
    reporting = obs.error_reporting
    out = []
    if reporting is not None:
        out += [f"{name}=1" for name in ("ignore_ce", "dont_log_ce", "cmci_disabled") if getattr(reporting, name)]
    if (obs.edac is None or not obs.edac.controllers) and obs.rasdaemon is None:
        out.append("no EDAC driver or rasdaemon: nothing counts corrected errors per DIMM")
    return out


def _mode(
    report: Report, found: ErrorSources, state: dict[str, Any], now: dt.datetime, boot: str | None
) -> tuple[str, str, list[str], dict[str, Any]]:
    """(mode, by, evidence, new state). Only memory-error GHES records say firmware-first."""
    ghes, native = found.ghes_memory, found.native
    same_boot = state.get("boot") == boot
    seen = {k: state[k] for k in ("ghes_at", "native_at", "ghes_since") if same_boot and isinstance(state.get(k), str)}
    if ghes:
        seen["ghes_at"] = now.isoformat()
        seen.setdefault("ghes_since", now.isoformat())  # firmware-first since, with no native error between
    if native:
        seen["native_at"] = now.isoformat()
        seen.pop("ghes_since", None)
    evidence: list[str] = []
    if ghes:
        evidence.append(f"{ghes} GHES memory-error record(s) in the kernel log")
    if found.ghes_other:
        evidence.append(
            f"{found.ghes_other} GHES record(s) of other sections ({', '.join(found.section_types)}): "
            "not evidence of how memory errors are reported"
        )
    if native:
        evidence.append(f"errors through the kernel's machine-check path ({', '.join(native)})")
    if found.other:
        evidence.append(f"errors outside the memory reporting path ({', '.join(found.other)})")
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
    recent = {k: v for k, v in seen.items() if v >= horizon and k != "ghes_since"}
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


def _persistence(mode: str, by: str, state: dict[str, Any], now: dt.datetime) -> dict[str, Any]:
    """Since when memory errors have arrived firmware-first in this boot (no native error since), and
    whether that is PERSIST_S or longer with errors still arriving (within the hour): a mode the
    PPR flow did not leave for a moment, and that a rule may ticket even at a low error rate."""
    since = state.get("ghes_since") if mode == "firmware_first" and by in ("errors", "recent errors") else None
    lasting = since is not None and (now - dt.datetime.fromisoformat(since)).total_seconds() >= PERSIST_S
    return {"firmware_first_since": since, "persistent": lasting}


def _tracking(smi_rate: float, signals: list[SignalValue]) -> dict[str, Any]:
    """The CE rate beside the SMI rate, and whether the SMIs track it: on platforms where the firmware
    sees every corrected error first (Intel eMCA gen2, or a BIOS logging CEs to the SEL) each CE is
    an SMI and then a CMCI, so CMCI mode does not mean the CEs cost no SMIs."""
    ce = sum(s.value for s in signals if s.kind in CE_RATE_SIGNALS and s.value > 0)
    tracks = ce > 0 and TRACKS_LOW <= smi_rate / ce <= TRACKS_HIGH
    return {"ce_rate": round(ce, 4), "tracks_ce_rate": tracks}


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
    found = error_sources(report, signals)
    out: list[SignalValue] = []
    mode, by, evidence, mode_state = _mode(report, found, memory.get("mode") or {}, now, boot)
    blind = blind_spots(report)
    # True: errors arrive; None: none arrive, but corrected errors could be going unseen; False: none.
    arriving: bool | None = True if found.any else (None if blind else False)
    sources = found.names()
    in_flow = ppr_active() if mode == "firmware_first" else False
    if obs.error_reporting is not None or found.any or obs.smi is not None:
        mismatch = expected is not None and mode not in ("unknown", expected)
        mode_detail: dict[str, Any] = {
            "mode": mode,
            "by": by,
            "expected_mode": expected,
            "evidence": evidence,
            "hardware_class": hardware_class,
            "ppr_active": in_flow,
            "section_types": found.section_types,
            **_persistence(mode, by, mode_state, now),
        }
        out.append(SignalValue("error_reporting_mode", "host", 1.0 if mismatch else 0.0, mode_detail))
    reporting = obs.error_reporting
    if reporting is not None and reporting.ignore_ce:
        ignored = {
            "dont_log_ce": reporting.dont_log_ce,
            "cmci_disabled": reporting.cmci_disabled,
            "mode": mode,
            "expected_mode": expected,
        }
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
            "blind_spots": blind,
            "mode": mode,
            "baseline": round(baseline, 4) if baseline is not None else None,
            **_tracking(rate, signals),
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
