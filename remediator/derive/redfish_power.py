"""The Redfish section's PSUs and redundancy groups as signals (remediator/derive/redfish.py's module
docstring says what each means and why): a failed PSU, an unwell one, a lost PSU redundancy no PSU event
explains, and a lost fan redundancy with the fans that may have failed. Pure."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from checker.schemas import RedfishState, SensorReading
from remediator.signals import SignalValue

POWER_EXPLAINS = ("psu_failure", "psu_input_lost")
MAX_LISTED = 8
# The PSU's number in a MemberId or Name as the log parser reads it in a message (checker/parsers/redfish_log.py):
# Dell 'PSU.Slot.1', 'PS1 Status', 'Power Supply 1'. Not a bare MemberId ('0': HPE and Intel count from 0).
_PSU_NUMBER = re.compile(r"\bPSU\.Slot\.(\d{1,3})\b|\bPS\s?(\d{1,3})\b|\bpower supply\s*(\d{1,3})\b", re.IGNORECASE)


def psu_name(member_id: str, bay: int | None, name: str | None) -> str:
    """'PS2', as the SEL names a PSU (ipmitool's component, the log parser's PS<n>), where a bay or number says;
    else its Name and MemberId ('Power Supply Bay 0', as the sensor parser names its status sensor)."""
    if bay is not None:
        return f"PS{bay}"
    for text in (member_id, name or ""):
        if (m := _PSU_NUMBER.search(text)) is not None:
            return f"PS{next(g for g in m.groups() if g)}"
    return f"{(name or 'PSU').strip()} {member_id}".strip()


def _fans(sensors: Sequence[SensorReading] | None) -> dict[str, Any]:
    """A lost fan redundancy names no fan: the fans the BMC reads as not OK or below a lower threshold are the
    candidates (the sensors section, which the same service's Thermal readings fill), else every fan read
    (the review's finding 9: 'Replace fan System Board Fan Redundancy' named the group, not a fan)."""
    fans = [s for s in sensors or [] if s.kind == "fan"]
    low = [
        s
        for s in fans
        if s.status.lower() not in ("ok", "ns")
        or (s.reading is not None and any(s.reading < s.thresholds[t] for t in ("lcr", "lnr") if t in s.thresholds))
    ]
    listed = low or fans
    named = (
        low[0].name
        if len(low) == 1
        else "one of " + ", ".join(s.name for s in listed[:MAX_LISTED])
        if listed
        else "a fan the BMC does not name"
    )
    candidates = [{"sensor": s.name, "status": s.status, "reading": s.reading} for s in listed[:MAX_LISTED]]
    return {"fan": named, "fan_candidates": candidates, "ambiguous": len(low) != 1}


def power_signals(
    state: RedfishState, explained: bool, sensors: Sequence[SensorReading] | None = None
) -> list[SignalValue]:
    """PSUs that failed or warn, and lost PSU or fan redundancy (module docstring)."""
    signals: list[SignalValue] = []
    present = [p for p in state.psus if p.present is not False]
    for psu in present:
        if psu.health not in ("Critical", "Warning"):
            continue
        detail = {
            "source": "redfish",
            "events": [f"Health {psu.health}"],
            "health": psu.health,
            "member_id": psu.member_id,
            "bay": psu.bay,
            "state": psu.state,
            "model": psu.model,
            "serial": psu.serial,
            "part_number": psu.part_number,
            "firmware": psu.firmware,
            "line_input_voltage": psu.line_input_voltage,
            "implausible_input_voltage": psu.implausible_input_voltage,
        }
        # Critical with a real input reading: the PSU itself failed. Without one it may be a lost input
        # (Status.Health rolls up every fault of the PSU, its input too): the log's entry says which. 0 V
        # is a reading, but of no input (the parser keeps it: a PSU that lost its input; domain.md: such a
        # PSU usually sits on a failed feed), so only a voltage above 0 makes the PSU the failed part.
        volts = psu.line_input_voltage
        failed = psu.health == "Critical" and volts is not None and volts > 0
        detail["input_lost"] = volts is not None and volts <= 0
        kind = "psu_failure" if failed else "bmc_psu_unhealthy"
        signals.append(SignalValue(kind, psu_name(psu.member_id, psu.bay, psu.name), 1.0, detail))
    explained = explained or any(s.kind in POWER_EXPLAINS for s in signals)
    for group in state.redundancy:
        if group.health not in ("Warning", "Critical") or (group.state or "").lower() == "disabled":
            continue
        group_detail: dict[str, Any] = {
            "source": "redfish",
            "events": [f"Redundancy {group.mode or ''} Health {group.health}".replace("  ", " ")],
            "mode": group.mode,
            "state": group.state,
            "min_needed": group.min_needed,
            "members": group.members,
        }
        if group.of == "fan":
            signals.append(SignalValue("fan_redundancy_lost", group.name, 1.0, {**group_detail, **_fans(sensors)}))
            continue
        if explained:
            continue  # a failed PSU or a lost input is the reason, and has its own ticket
        names = [psu_name(p.member_id, p.bay, p.name) for p in present]
        unwell = [psu_name(p.member_id, p.bay, p.name) for p in present if p.health not in (None, "OK")]
        named = unwell[0] if len(unwell) == 1 else "one of " + ", ".join(names[:MAX_LISTED]) if names else "every PSU"
        group_detail.update(psu=named, psu_candidates=names[:MAX_LISTED], ambiguous=len(unwell) != 1)
        signals.append(SignalValue("power_unit_fault", group.name, 1.0, group_detail))
    return signals
