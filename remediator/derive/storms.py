"""CMCI storms, attributed to the DIMM whose errors caused them.

A CMCI storm is the kernel giving up on one interrupt per corrected error for a machine-check
bank: before Linux 6.8 at 15 CMCIs within a second on a CPU ("CMCI storm detected: switching to
poll mode"), from 6.8 per bank at 5 of its last 64 polls ("CPU3 BANK13 CMCI storm detected").
While it lasts the bank is polled, so EDAC's count of the DIMM's errors is a floor. It is evidence
about a DIMM, never a reason to turn the reporting off.

Attribution, from what the same report carries (the storm and the errors behind it arrive together):
1. machine checks of the storm's bank (mcelog, rasdaemon's mce_record): if they are not memory
   errors the storm is a CPU's (a cache or interconnect bank) and no DIMM signal is made;
2. the DIMMs whose corrected errors this report shows (EDAC sysfs counters, rasdaemon's mc_event,
   the EDAC lines of the kernel log): one DIMM with at least ATTRIBUTE_SHARE of them, and at least
   as many as the storm itself took (MIN_STORM_ERRORS), is the one (`attributed: true`);
3. otherwise the storm is unattributed: its subject is the CPU and bank, and the candidates are the
   DIMMs whose counters rose, or every DIMM the host reports when none did.
Pure: the caller hands the report and the signals already derived from it.
"""

from __future__ import annotations

import re

from checker.schemas import MceRecord, Report
from remediator.signals import SignalValue

ATTRIBUTE_SHARE = 0.8
# The fewest corrected errors one DIMM must show in the storm's report to carry it: a storm is at least
# 15 errors within a second before 6.8 (CMCI_STORM_THRESHOLD) and 5 of a bank's last 64 polls from 6.8
# on (mce/threshold.c). A DIMM with fewer cannot be the storm's source, whatever its share of a report
# in which the storm's own errors went uncounted (a cache bank's, say).
MIN_STORM_ERRORS = {"before 6.8": 15.0, "6.8 on": 5.0}
MAX_CANDIDATES = 16
_CPU_BANK = re.compile(r"CPU (?P<cpu>\d+)(?: Bank (?P<bank>\d+))?")


def _storm_sources(storm: SignalValue) -> list[tuple[int | None, int | None]]:
    subjects = [str(s) for s in storm.detail.get("subjects") or []] or [str(storm.detail.get("subject") or "")]
    found: list[tuple[int | None, int | None]] = []
    for subject in subjects:
        m = _CPU_BANK.fullmatch(subject.strip())
        if m is None:
            found.append((None, None))
        else:
            found.append((int(m.group("cpu")), int(m.group("bank")) if m.group("bank") else None))
    return list(dict.fromkeys(found))


def _machine_checks(report: Report) -> list[MceRecord]:
    obs = report.observations
    records = list(obs.mce or [])
    records += list(getattr(obs.rasdaemon, "mce_records", None) or [])
    return records


def _bank_class(records: list[MceRecord], bank: int | None) -> str | None:
    """'memory' or the class of the bank's corrected machine checks in this report; None when none says."""
    if bank is None:
        return None
    classes = {r.error_class for r in records if r.bank == bank}
    if not classes:
        return None
    return "memory" if "memory" in classes else sorted(classes)[0]


def _dimm_errors(report: Report, signals: list[SignalValue]) -> dict[str, float]:
    """Corrected errors per DIMM in this report: from EDAC's counters, rasdaemon's records and the EDAC
    lines of the kernel log (the only source on a host's first report, before any rate): the largest."""
    errors: dict[str, float] = {}
    for signal in signals:
        if signal.kind == "dimm_ce_rate":
            delta = float(signal.detail.get("delta") or 0)
            errors[signal.subject] = max(errors.get(signal.subject, 0.0), delta)
    logged: dict[str, float] = {}
    klog = report.observations.kernel_log
    for event in klog.events if klog is not None else []:
        if event.kind == "edac_ce" and event.subject:
            logged[event.subject] = logged.get(event.subject, 0.0) + event.count
    for label, count in logged.items():
        errors[label] = max(errors.get(label, 0.0), count)
    return errors


def _all_dimms(report: Report) -> list[str]:
    edac = report.observations.edac
    if edac is None:
        return []
    return [d.label or f"mc{d.mc}/{d.name}" for c in edac.controllers for d in c.dimms][:MAX_CANDIDATES]


def storm_signals(report: Report, signals: list[SignalValue]) -> list[SignalValue]:
    storm = next((s for s in signals if s.kind == "kernel_event_count" and s.subject == "cmci_storm"), None)
    if storm is None or not storm.detail.get("new"):
        return []
    records = _machine_checks(report)
    errors = _dimm_errors(report, signals)
    total = sum(errors.values())
    sources = _storm_sources(storm)
    cpu, bank = sources[0]
    storms = int(storm.detail.get("new") or 1)
    classes = {_bank_class(records, b) for _, b in sources}
    if classes and all(c is not None and c != "memory" for c in classes):
        return []  # a cache or interconnect bank: the CPU's, judged by the machine-check rules
    era = "6.8 on" if bank is not None else "before 6.8"
    detail: dict[str, object] = {
        "cpu": cpu,
        "bank": bank,
        "storms": storms,
        "kernel": "per bank, 5 of 64 polls (Linux 6.8 on)" if bank is not None else "per CPU, 15 CMCIs/s (before 6.8)",
        "era": era,
        "bank_class": next((c for c in classes if c is not None), None),
        "lines": storm.detail.get("lines") or [],
        "errors_by_dimm": dict(sorted(errors.items(), key=lambda kv: -kv[1])[:MAX_CANDIDATES]),
    }
    top = max(errors, key=lambda label: errors[label]) if errors else None
    enough = top is not None and errors[top] >= MIN_STORM_ERRORS[era]
    if top is not None and enough and total > 0 and errors[top] / total >= ATTRIBUTE_SHARE:
        share = round(errors[top] / total, 3)
        detail.update(attributed=True, attribution="corrected-error counters", share=share, candidates=[top])
        return [SignalValue("cmci_storm", top, float(storms), detail)]
    candidates = sorted(errors, key=lambda label: -errors[label]) if errors else _all_dimms(report)
    where = f"cpu{cpu} bank{bank}" if bank is not None else (f"cpu{cpu}" if cpu is not None else "host")
    detail.update(
        attributed=False,
        attribution="no counter pins the errors on one DIMM"
        if top is None or enough
        else f"no DIMM shows the storm's errors (the most, {errors[top]:.0f} on {top}, is fewer than a storm takes)",
        candidates=candidates[:MAX_CANDIDATES],
        note="confirm the slot before pulling: the storm's errors are not pinned on one DIMM",
    )
    return [SignalValue("cmci_storm", where, float(storms), detail)]
