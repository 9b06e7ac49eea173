"""`cxl_health`: a CXL memory device's health as its Memory Module event records tell it (rasdaemon's
cxl_memory_module_event table; CXL 3.1 8.2.9.2.1.3 Memory Module Event Record, whose payload is Get
Health Info's, 8.2.9.9.3.1). One signal per device and report; its value the records' count, its
detail the newest record's state (the device reports a change, so the newest is its state now).

Every threshold is the device's own: the Health Status flags and the Additional Status levels
(Life Used and Device Temperature Normal/Warning/Critical, the corrected volatile and persistent error
counts Normal/Warning) are the device's judgement against its vendor's or its Set Alert
Configuration's limits (CXL 3.1 8.2.9.9.3.3). fleetfix sets none.

- `service_requested`: the device asks for service: Health Status Maintenance Needed or Hardware
  Replacement Needed, the record's flags Maintenance Needed / Hardware Replacement Needed / Permanent
  Condition (Common Event Record, as cxl_media_error reads them), Life Used Critical, a corrected-error
  count at Warning (the health counterpart of a General Media record's threshold event), or a media
  status that lost or is about to lose data (Not Ready, All Data Lost, Write Persistency Lost, and the
  "imminent" states). Performance Degraded alone is said (`flags`), not a request.
  Health Status Memory Capacity Degraded (bit 3, CXL 3.1 Get Health Info Table 8-133) is a request
  too, and so is a record of Device Event Type 04h-08h (Data Path Error, LSA Error, Unrecoverable
  Internal Sideband Bus Error, Memory Media FRU Error, Power Management Fault; CXL 3.1 8.2.9.2.1.3):
  an error event, whatever the status fields say. Its sub-type and Component Identifier (with Hardware
  Replacement Needed, the FRU to replace) go on the ticket (`event_sub_type`, `component_id`), the
  identifier with `component_id_note`: rasdaemon's table keeps no validity flags, so whether the
  device marked it valid is unknown.
- `data_lost`: Media Status Not Ready or All Data Lost after the device's memory came up in this boot
  (an earlier record of it in this boot said Normal): the memory in use is gone now
  (cxl-health-data-lost drains, as cxl-device-down does for the kernel's frozen line). Without that
  Normal record the device may still be starting (Not Ready) or report a dirty shutdown of persistent
  memory (All Data Lost) before any of its memory was in use: `data_lost_before_use`, a service
  request (cxl-health-service, a ticket), no drain. The other at-risk statuses stay requests.
- `overheating`: Device Temperature at Warning or Critical (remediator/derive/cxl.py note_siblings adds
  the other devices' temperatures, remembered from earlier records or said unknown, and the candidates:
  the device, its slot, the airflow; the airflow first only when a sibling is known hot).
Dirty shutdowns and the raw counts are in the detail for the ticket; nothing acts on them alone.
"""

from __future__ import annotations

from typing import Any

from checker.schemas import CxlEvent, CxlHealth
from remediator.signals import SignalValue

SERVICE_HEALTH = frozenset({"Maintenance Needed", "Hardware Replacement Needed", "Memory Capacity Degraded"})
# Device Event Types that are errors, not a status change (CXL 3.1 8.2.9.2.1.3, 04h-08h)
ERROR_EVENTS = frozenset(
    {
        "Data Path Error",
        "LSA Error",
        "Unrecoverable Internal Sideband Bus Error",
        "Memory Media FRU Error",
        "Power Management Fault",
    }
)
DATA_LOST = frozenset({"Not Ready", "All Data Lost"})
SERVICE_FLAGS = frozenset({"Maintenance Needed", "Hardware Replacement Needed", "Permanent Condition"})
# Media Status values that lost data or will (CXL 3.1 Get Health Info, Media Status 01h-03h, 06h, 09h)
DATA_AT_RISK = frozenset(
    {
        "Not Ready",
        "Write Persistency Lost",
        "All Data Lost",
        "Write Persistency Loss Imminent",
        "All Data Loss Imminent",
    }
)
HOT = frozenset({"Warning", "Critical"})


def _reasons(health: CxlHealth, flags: list[str]) -> list[str]:
    reasons = []
    if health.event_type in ERROR_EVENTS:
        said = ", ".join(
            x for x in (health.event_sub_type, health.component_id and f"component {health.component_id}") if x
        )
        reasons.append(f"{health.event_type}" + (f" ({said})" if said else ""))
    reasons += [f for f in health.health_status if f in SERVICE_HEALTH]
    reasons += [f"record flag {f}" for f in flags if f in SERVICE_FLAGS and f not in reasons]
    if health.life_used_status == "Critical":
        used = f" ({health.life_used_percent}%)" if health.life_used_percent is not None else ""
        reasons.append(f"life used Critical{used}")
    if health.corrected_volatile_status == "Warning":
        reasons.append(f"corrected volatile errors at Warning ({health.corrected_volatile_errors})")
    if health.corrected_persistent_status == "Warning":
        reasons.append(f"corrected persistent errors at Warning ({health.corrected_persistent_errors})")
    if health.media_status in DATA_AT_RISK:
        reasons.append(f"media {health.media_status}")
    return reasons


def health_signal(
    subject: str, events: list[CxlEvent], detail: dict[str, Any], *, in_use: bool = True
) -> SignalValue | None:
    """The device's health from its Memory Module records in this report (oldest first). `in_use`: its
    memory was up in this boot before the newest record (remediator/derive/cxl.py _media_came_up)."""
    records = [e for e in events if e.health is not None]
    if not records:
        return None
    last = records[-1]
    health = last.health
    assert health is not None
    reasons = _reasons(health, last.flags)
    lost = health.media_status in DATA_LOST
    if lost and not in_use:  # starting up, or a dirty shutdown of persistent memory: nothing in use was lost
        reasons = [
            f"media {health.media_status} before its memory was in use this boot (no Normal record of it before)"
            if r == f"media {health.media_status}"
            else r
            for r in reasons
        ]
    temperature = f"{health.temperature_status}" + (
        f" ({health.temperature_c} C)" if health.temperature_c is not None else ""
    )
    detail.update(
        event_types=list(dict.fromkeys(e.health.event_type for e in records if e.health))[:8],
        health_status=health.health_status,
        flags=last.flags,
        media_status=health.media_status,
        life_used_percent=health.life_used_percent,
        life_used_status=health.life_used_status,
        temperature_c=health.temperature_c,
        temperature_status=health.temperature_status,
        temperature=temperature,
        dirty_shutdowns=health.dirty_shutdowns,
        corrected_volatile_errors=health.corrected_volatile_errors,
        corrected_persistent_errors=health.corrected_persistent_errors,
        reasons=reasons,
        reason=reasons[0] if reasons else "no service asked",
        service_requested=bool(reasons),
        data_lost=lost and in_use,
        data_lost_before_use=lost and not in_use,
        event_sub_type=health.event_sub_type,
        component_id=health.component_id,
        # rasdaemon keeps the comp_id bytes but not the record's validity flags (CXL 3.1 Memory Module
        # Event Record, Validity Flags bit 0 Component Identifier; the kernel's CXL_MMER_VALID_COMPONENT):
        # whether the device set it is unknown, so the ticket says so
        component_id_note=(
            "as rasdaemon stored it; the record's Component ID valid flag is not stored, so it may be unset"
            if health.component_id
            else None
        ),
        overheating=health.temperature_status in HOT,
        log=last.log,
    )
    return SignalValue("cxl_health", subject, float(len(records)), detail)
