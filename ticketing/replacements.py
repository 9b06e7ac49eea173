"""What a resolution replaced: a repair-history row per part, and how each old serial compares with
the evidence (a mismatch is flagged; for a DIMM whose slot was not certain, which candidate came out)."""

from __future__ import annotations

import datetime as dt
from typing import Any

from sqlalchemy.orm import Session

from ticketing.models import Repair, Ticket
from ticketing.schemas import Resolution


def record_repairs(
    session: Session, ticket: Ticket, resolution: Resolution, *, actor: str, now: dt.datetime
) -> tuple[list[Repair], dict[str, Any]]:
    """The repair rows of a resolution, and the resolve event's detail: the replacements, and how each
    old serial compares with the evidence."""
    known = (ticket.evidence or {}).get("part") or {}
    # A DIMM the remediator could not pin on one slot has no serial but candidates (docs/tickets.md):
    # the old serial says which of them came out, or that none did.
    unconfirmed = known.get("certain") is False
    candidates = [c for c in known.get("candidates") or [] if isinstance(c, dict) and c.get("serial")]
    repairs: list[Repair] = []
    mismatches: list[dict[str, str]] = []
    matched: list[dict[str, Any]] = []
    unmatched: list[dict[str, Any]] = []
    for replacement in resolution.replacements:
        part = replacement.part or ticket.part
        same_part = part == ticket.part
        facts = {"vendor": known.get("vendor"), "model": known.get("model")} if same_part else {}
        if same_part and unconfirmed:
            old = replacement.old_serial.strip().casefold()
            pulled = next((c for c in candidates if str(c["serial"]).strip().casefold() == old), None)
            if pulled is not None:
                facts = {
                    "vendor": pulled.get("manufacturer") or facts["vendor"],
                    "model": pulled.get("part_number") or facts["model"],
                }
                matched.append(
                    {
                        "part": part,
                        "old_serial": replacement.old_serial,
                        "locator": pulled.get("locator"),
                        "bank_locator": pulled.get("bank_locator"),
                    }
                )
            else:
                unmatched.append(
                    {
                        "part": part,
                        "old_serial": replacement.old_serial,
                        "candidate_serials": [str(c["serial"]) for c in candidates],
                    }
                )
        repair = Repair(
            ticket=ticket,
            hostname=ticket.hostname,
            datacenter=ticket.datacenter,
            part_type=ticket.part_type,
            part=part,
            vendor=(replacement.vendor or str(facts.get("vendor") or ""))[:128],
            model=(replacement.model or str(facts.get("model") or ""))[:128],
            old_serial=replacement.old_serial,
            new_serial=replacement.new_serial,
            note=resolution.note,
            replaced_by=actor,
            replaced_at=now,
        )
        session.add(repair)
        repairs.append(repair)
        expected = known.get("serial")
        if same_part and expected and expected != replacement.old_serial:
            mismatches.append({"part": part, "evidence_serial": str(expected), "old_serial": replacement.old_serial})
    detail: dict[str, Any] = {
        "replacements": [r.model_dump() for r in resolution.replacements],
    }
    if mismatches:
        detail["serial_mismatch"] = mismatches
    if matched:
        detail["serial_matches_candidate"] = matched
    if unmatched:
        detail["serial_matches_no_candidate"] = unmatched
    return repairs, detail
