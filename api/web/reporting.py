"""The host page's "Error reporting" line: the mode corrected memory errors arrive in, against the
mode the class expects, and the SMI rate against the host's own baseline (docs/error-reporting.md)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Protocol


class _Signal(Protocol):
    kind: str
    value: float
    detail: dict[str, Any]


MODE_NAMES = {"firmware_first": "firmware-first (SMI)", "cmci": "CMCI", "unknown": "unknown"}


def reporting_fact(signals: Iterable[_Signal]) -> str | None:
    """One line from the newest `error_reporting_mode` and `smi_rate` signals (newest first), or None."""
    mode = smi = None
    for signal in signals:
        if mode is None and signal.kind == "error_reporting_mode":
            mode = signal
        elif smi is None and signal.kind == "smi_rate":
            smi = signal
        if mode is not None and smi is not None:
            break
    parts: list[str] = []
    if mode is not None:
        detail = mode.detail
        text = f"{MODE_NAMES.get(str(detail.get('mode')), detail.get('mode'))} (by {detail.get('by')})"
        expected = detail.get("expected_mode")
        if expected:
            text += f"; class expects {MODE_NAMES.get(str(expected), expected)}"
            if mode.value:
                text += " — MISMATCH"
        if detail.get("ppr_active"):
            text += "; hard PPR running (firmware-first on purpose)"
        parts.append(text)
    if smi is not None:
        baseline = smi.detail.get("baseline")
        text = f"{smi.value:.2f} SMI/s"
        if baseline is not None:
            text += f" (baseline {float(baseline):.2f}/s)"
        if smi.detail.get("errors_arriving"):
            text += f", errors arriving: {', '.join(smi.detail.get('error_sources') or [])}"
        elif smi.detail.get("errors_arriving") is None and smi.detail.get("blind_spots"):
            text += f", errors may go unseen: {'; '.join(smi.detail.get('blind_spots') or [])}"
        if smi.detail.get("tracks_ce_rate"):
            text += f", tracks the CE rate ({float(smi.detail.get('ce_rate') or 0):.2f}/s)"
        parts.append(text)
    return " · ".join(parts) or None
