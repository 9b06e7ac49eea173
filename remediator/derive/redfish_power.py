"""The Redfish section's PSUs and redundancy groups as signals (remediator/derive/redfish.py's module
docstring says what each means and why): a failed PSU, an unwell one, a lost PSU redundancy no PSU event
explains, and a lost fan redundancy with the fans that may have failed. Pure."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from checker.parsers.redfish_sensors import psu_name as psu_name  # the parser names its status reading by it
from checker.schemas import RedfishState, SensorReading
from remediator.signals import SignalValue

POWER_EXPLAINS = ("psu_failure", "psu_input_lost")
MAX_LISTED = 8
LOWER_LIMITS = ("lcr", "lnr")
UNREAD_STATUSES = ("ns", "na", "")  # IPMI's no reading / not available, as the parsers keep them
UPPER_STATUSES = ("unc", "ucr", "unr")  # past an upper threshold: a fan the BMC ramped up, turning, not failed
UPPER_LIMITS = ("unc", "ucr", "unr")
SLOWING_STATUSES = ("lnc", "nc")  # the BMC's non-critical state: sdr elist's lnc, sensor list's nc, Health Warning
MAX_FANS_SEEN = 32


def _fan_candidate(sensor: SensorReading) -> str | None:
    """Why a fan may be the one a lost redundancy means: `failing` (the BMC's status critical or worse, or a
    reading below a lower critical or non-recoverable threshold), `slowing` (the BMC's non-critical state, lnc
    or nc, with the reading above any lower critical threshold: turning, slower than it should), `unreadable`
    (no reading: ipmitool's na, Redfish's null), or None (read and healthy). A fan the BMC cannot read may be
    the failed one: it is never taken for healthy (issue 16 leftovers: na fans were left out of the candidates
    whenever another fan was failing). A slowing fan is not failing (review r7, finding 1: it counted as
    failing, so a lost redundancy went to the slowing fan's ticket while another fan read 240 cr)."""
    status = sensor.status.strip().lower()
    if sensor.reading is None and status in UNREAD_STATUSES:
        return "unreadable"
    below = sensor.reading is not None and any(
        sensor.reading < sensor.thresholds[t] for t in LOWER_LIMITS if t in sensor.thresholds
    )
    # a fan past an UPPER threshold (sdr elist's unc/ucr/unr, or sensor list's nc/cr/nr with the reading above
    # one) turns fast, as the BMC ramps it up when another fan fails: not the failed one (review r4, finding 4)
    above = sensor.reading is not None and any(
        sensor.reading >= sensor.thresholds[t] for t in UPPER_LIMITS if t in sensor.thresholds
    )
    if not below and (status in UPPER_STATUSES or above):
        return None
    if below:
        return "failing"
    if status in SLOWING_STATUSES:
        return "slowing"
    if status not in ("ok", *UNREAD_STATUSES):
        return "failing"
    return "unreadable" if sensor.reading is None else None


def _fans(sensors: Sequence[SensorReading] | None, group: str) -> dict[str, Any]:
    """A lost fan redundancy names no fan: the fans the BMC reads as failing, then those it cannot read, then
    those it flags slowing, are the candidates (the sensors section, which the same service's Thermal readings
    fill), else every fan read (the review's finding 9: 'Replace fan System Board Fan Redundancy' named the
    group, not a fan). `fan_part`,
    the part its ticket is keyed by: the one failing fan, so a Critical fan's own ticket (sensor-critical-fan)
    is the same ticket; else the group. `fans_seen`: every fan the sensors list (remediator.fan_tickets routes a
    redundancy whose key moved to the fan ticket it belongs to)."""
    fans = [s for s in sensors or [] if s.kind == "fan"]
    why = {s.name: _fan_candidate(s) for s in fans}
    failing = [s for s in fans if why[s.name] == "failing"]
    unreadable = [s for s in fans if why[s.name] == "unreadable"]
    slowing = [s for s in fans if why[s.name] == "slowing"]
    listed = [*failing, *unreadable, *slowing] or fans
    shown = ", ".join(s.name for s in listed[:MAX_LISTED])
    if len(failing) == 1:
        named = failing[0].name
        if unreadable:
            named += ", or one the BMC cannot read (" + ", ".join(s.name for s in unreadable[:MAX_LISTED]) + ")"
    else:
        named = f"one of {shown}" if listed else "a fan the BMC does not name"
    candidates = [
        {"sensor": s.name, "status": s.status, "reading": s.reading, "candidate": why[s.name] or "read ok"}
        for s in listed[:MAX_LISTED]
    ]
    return {
        "fan": named,
        "fan_candidates": candidates,
        "ambiguous": len(failing) != 1 or bool(unreadable),
        "fan_part": failing[0].name if len(failing) == 1 else group,
        "fans_seen": [s.name for s in fans][:MAX_FANS_SEEN],  # a fan ticket's fan missing here is being swapped
    }


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
            signals.append(
                SignalValue("fan_redundancy_lost", group.name, 1.0, {**group_detail, **_fans(sensors, group.name)})
            )
            continue
        if explained:
            continue  # a failed PSU or a lost input is the reason, and has its own ticket
        names = [psu_name(p.member_id, p.bay, p.name) for p in present]
        unwell = [psu_name(p.member_id, p.bay, p.name) for p in present if p.health not in (None, "OK")]
        named = unwell[0] if len(unwell) == 1 else "one of " + ", ".join(names[:MAX_LISTED]) if names else "every PSU"
        group_detail.update(psu=named, psu_candidates=names[:MAX_LISTED], ambiguous=len(unwell) != 1)
        signals.append(SignalValue("power_unit_fault", group.name, 1.0, group_detail))
    return signals
