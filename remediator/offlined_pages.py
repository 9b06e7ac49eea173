"""Pages soft-offlined per DIMM: `dimm_offlined_pages`, from the host's own succeeded soft_offline_page steps.

The truthful record of what is offline is what the host answered: a soft_offline_page step that succeeded
with `offlined` in its result (the kernel accepted the page; a dry run never says so), in the boot the host
runs now. Soft-offlining lasts until the next boot, and a DIMM is replaced with the host powered off, so
pages of an earlier boot are neither offline any more nor the present DIMM's. The DIMM is the one the
remediation's page_ce_count signal named (its detail's `dimm`, with EDAC's coordinates for attributing it
to a slot: remediator.dimms, serial only when certain). A page offlined twice in one boot counts once.

The same steps restart an offlined page's count (`with_offlined_pages`): its page_ce_count signal then
counts only the errors of the hours after the offline's hour (`count_since_offline`; `count_24h` keeps the
whole day), so a patrol scrubber's late hit on a poisoned page does not bring the 24 h count, errors from
before the offline included, back over the rule's threshold: ten new errors are needed.

Asked on every report while the host's derivation memory tracks pages with corrected errors of the last 24
hours (remediator/derive/pages.py), so ingest pays the query for those hosts alone, and a DIMM's count held
once (its ticket not yet opened) is asked again at the next report, not only at the next page error.
`dimm_offlined_pages` carries when each page was first offlined (`since`, `counted`): a DIMM ticket resolved
while the old boot still reports is reopened only by pages offlined after the repair (remediator.recount).
Not counted: pages offlined on the host by mcelog, rasdaemon or the kernel's CE collector (their offlines
are only in /proc/meminfo's host-wide HardwareCorrupted, with no DIMM).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import object_session

from remediator.derive.pages import counted_hours
from remediator.models import Host, Remediation, RemediationStep, StepState
from remediator.signals import SignalValue

MAX_STEPS = 512
MAX_LISTED = 16
_LOCATION_KEYS = ("mc", "label", "top_layer", "middle_layer", "lower_layer", "socket", "location")


def tracks_pages(memory: Mapping[str, Any]) -> bool:
    derived = memory.get("derive") or {}
    return bool(((derived.get("pages") or {}).get("pages")) if isinstance(derived, Mapping) else False)


def with_offlined_pages(
    host: Host, signals: list[SignalValue], memory: Mapping[str, Any], boot_id: str | None
) -> list[SignalValue]:
    """The signals with each offlined page's page_ce_count counted from its offline, and one
    `dimm_offlined_pages` per DIMM location with pages soft-offlined in the boot `boot_id`."""
    session = object_session(host)
    if session is None or host.id is None or boot_id is None or not tracks_pages(memory):
        return signals
    rows = session.execute(
        select(RemediationStep.result, RemediationStep.finished_at, Remediation.evidence, Remediation.id)
        .join(Remediation, Remediation.id == RemediationStep.remediation_id)
        .where(
            Remediation.host_id == host.id,
            RemediationStep.action == "soft_offline_page",
            RemediationStep.state == StepState.succeeded,
        )
        .order_by(RemediationStep.id.desc())
        .limit(MAX_STEPS)
    ).all()
    places: dict[str, dict[str, Any]] = {}
    offlined_at: dict[str, dt.datetime] = {}
    first_at: dict[str, dt.datetime] = {}  # a page's first offline in the boot: when it began to count
    for result, finished_at, evidence, remediation_id in rows:
        result = result or {}
        changed = result.get("changed") or {}
        if result.get("boot_id_before") != boot_id or changed.get("offlined") is not True:
            continue
        signal = (evidence or {}).get("signal") or {}
        detail = signal.get("detail") or {}
        where = detail.get("dimm")
        address = changed.get("address") or signal.get("subject")
        if not isinstance(where, str) or not where or not isinstance(address, str):
            continue
        page = detail.get("page") or address
        if finished_at is not None and (page not in offlined_at or finished_at > offlined_at[page]):
            offlined_at[page] = finished_at
        if finished_at is not None and (page not in first_at or finished_at < first_at[page]):
            first_at[page] = finished_at
        place = places.setdefault(
            where, {"pages": set(), "remediations": [], **{k: detail.get(k) for k in _LOCATION_KEYS}}
        )
        place["pages"].add(page)
        place["remediations"].append(remediation_id)
    out = [_since_offline(s, memory, offlined_at) for s in signals]
    for where, place in sorted(places.items()):
        pages = sorted(place.pop("pages"))
        detail = {
            **place,
            "pages": pages[:MAX_LISTED],
            "remediations": sorted(place["remediations"])[:MAX_LISTED],
            "boot_id": boot_id,
            "source": "succeeded soft_offline_page steps of this boot",
            **_offlined_span(pages, first_at),
        }
        out.append(SignalValue("dimm_offlined_pages", where, float(len(pages)), detail))
    return out


def _offlined_span(pages: list[str], first_at: dict[str, dt.datetime]) -> dict[str, Any]:
    """`since` and `counted` ([epoch seconds, pages] at each page's first offline, points) so a DIMM ticket
    resolved while the old boot still reports is not reopened by the pages offlined before the repair
    (remediator.recount). At most MAX_LISTED entries: the oldest are merged into one at the newest of
    their times, so with more pages a repair resolved between the oldest and that time counts the merged
    pages offlined before it as after it. The error is the safe one (a reopen the technician can see is
    wrong, never a fault hidden); a DIMM with over MAX_LISTED pages offlined in one boot is far past
    the rule's own threshold (dimm-offlined-pages: 3, remediator/default_rules.yaml) (second review of
    repair-reopen, note 9). A step without a finish time
    counts as the boot's start (before any repair of this boot)."""
    stamps = sorted(int(_aware(first_at[p]).timestamp()) if p in first_at else 0 for p in pages)
    if not stamps:
        return {}
    merged = max(1, len(stamps) - MAX_LISTED + 1)  # the oldest `merged` pages: one entry
    counted = [[stamps[merged - 1], merged]] + [[t, 1] for t in stamps[merged:]]
    return {"since": dt.datetime.fromtimestamp(stamps[0], dt.UTC).isoformat(), "counted": counted}


def _aware(at: dt.datetime) -> dt.datetime:
    return at if at.tzinfo is not None else at.replace(tzinfo=dt.UTC)


def _since_offline(signal: SignalValue, memory: Mapping[str, Any], offlined_at: dict[str, dt.datetime]) -> SignalValue:
    """A page offlined this boot: its count restarts after the offline's hour (the buckets are hourly, so the
    errors of that hour are taken as before it)."""
    at = offlined_at.get(signal.subject) if signal.kind == "page_ce_count" else None
    if at is None:
        return signal
    derived = memory.get("derive") or {}
    track = ((derived.get("pages") or {}).get("pages") or {}).get(signal.subject) or {}
    at = at if at.tzinfo is not None else at.replace(tzinfo=dt.UTC)
    hour = int(at.timestamp()) // 3600
    kept = [entry for entry in track.get("hours") or [] if isinstance(entry, list | tuple) and len(entry) in (2, 4)]
    after = [[int(x) for x in entry] for entry in kept if int(entry[0]) > hour]  # (hour, CEs[, first, last])
    since = sum(entry[1] for entry in after)
    detail = {**signal.detail, "offlined_at": at.isoformat(), "count_since_offline": since}
    detail.update(counted_hours(after, since_hour=hour + 1))  # the counted span is the value's (remediator.recount)
    return SignalValue(signal.kind, signal.subject, float(since), detail)
