"""What the host's EDAC counted on one DIMM over one interval: the like-for-like comparison the BMC's
DIMM signals make before a rule asks a person (`edac_silent`, remediator/derive/redfish.py and sel.py).

Why not EDAC's total since boot (the second review of the Redfish rules, finding 1): one uncorrectable
error EDAC counted hours ago on another DIMM silenced bmc-dimm-uncorrectable and sel-memory-correctable
for the rest of the boot. So the count is:
- of the same DIMM where exactly one EDAC DIMM's label is the BMC's name for it on letters and digits
  (a board whose labels were registered: EDAC's `DIMM_A1` for the BMC's `DIMM A1`, remediator/dimm_redfish.py's
  rule), else of the whole host (`edac_scope` says which: EDAC's default labels, `CPU_SrcID#0_Ha#0_Chan#2_DIMM#0`,
  name no slot the BMC uses, and a wrong match would silence a DIMM on another's count);
- over the BMC's interval: from a kept EDAC sample taken at or before the interval's start in the same
  boot, else since boot (EDAC's counters start at boot: a boot after the interval's start leaves EDAC's
  count of the part before it unknown, and the count covers less; a sample newer than the start covers
  more, as the old rule did). `edac_since` says which.
EDAC polls (seed 000): an error the BMC logged just before the interval's end may be counted by EDAC just
after it, in the next interval (the third review, finding 1). And EDAC may count only a share of what the BMC
logs (firmware-first passes few errors to the OS), or count another DIMM's where the scope is the host (the
fourth review, finding 1: one CE on another DIMM every 20 minutes silenced a DIMM the BMC logged at 0.1/s).
So `edac_silent` is false only where EDAC counted enough for its own rules to judge the DIMM: its count of the same
key (EdacSample.marks: the counts at the first report of each MARK_EVERY_S, kept MARKS_KEPT_S) since the
interval's start less EDAC's poll interval and the caller's clock allowance is at least half the BMC's entries
over the interval, and at least 1. For the log's rate at DIMM scope the interval is the rate's 30-minute
window; at host scope never (any error anywhere on the host in 30 minutes would silence the DIMM): the new
entries' own interval.
Pure: stdlib, pydantic and the report's types.
"""

from __future__ import annotations

import datetime as dt
from typing import Literal

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field

from checker.schemas import EdacState

MAX_SAMPLED_DIMMS = 64  # labelled EDAC DIMMs with errors kept per sample (2 sockets x 24 DIMMs is 48)
MAX_RISES = 2 * (MAX_SAMPLED_DIMMS + 1)  # ce and ue, per kept DIMM and the host: the newest kept
# ours: the counts kept to judge EDAC over the BMC's interval, one per 5 minutes (a mark is up to that much
# older than the interval's start: EDAC's count then covers more, never less); 90 minutes cover the log's
# 30-minute window and the Redfish inventory's hourly read (redfish_client.py inventory_every_s), each less
# the poll interval (37 s by the pack's edac-poll rule) and the 300 s clock allowance, with a mark's 5 minutes
MARK_EVERY_S = 300
MARKS_KEPT_S = 5400
MAX_MARKS = MARKS_KEPT_S // MARK_EVERY_S + 1
EDAC_JUDGES_SHARE = 0.5  # ours: EDAC counting half the BMC's entries is enough for its rules to judge the DIMM
EDAC_POLL_DEFAULT_S = 1.0  # edac_core's edac_mc_poll_msec default (1000 ms) where the report does not say
Kind = Literal["ce", "ue"]
HOST_KEY = ""  # a rise key's part for the whole host (a DIMM's key has letters or digits)


def letters_digits(text: str) -> str:
    return "".join(ch for ch in text.casefold() if ch.isalnum())


class EdacCounts(BaseModel):
    """The host's EDAC counts at one report: its totals, and the labelled DIMMs that counted any error."""

    model_config = ConfigDict(extra="ignore")

    at: AwareDatetime
    boot: str | None = None
    ce: int = 0
    ue: int = 0
    dimms: dict[str, tuple[int, int]] = Field(
        default_factory=dict,
        max_length=MAX_SAMPLED_DIMMS,
        description="EDAC dimm_label on letters and digits -> (CE, UE) counts, the DIMMs with any; one absent "
        "counted 0 unless `full` is false.",
    )
    full: bool = Field(True, description="False: more DIMMs had errors than were kept (an absent one is unknown).")


class EdacSample(EdacCounts):
    """The counts at one report, when each last rose, and the counts at earlier reports of the same boot."""

    rose: dict[str, AwareDatetime] = Field(
        default_factory=dict,
        max_length=MAX_RISES,
        description="'ce:' or 'ue:' + EDAC dimm_label on letters and digits (nothing after the colon: the host's "
        "total) -> the report at which that count was last seen above the previous sample of the same boot.",
    )
    marks: list[EdacCounts] = Field(
        default_factory=list,
        max_length=MAX_MARKS,
        description="The counts at the first report of each MARK_EVERY_S of this boot, the last MARKS_KEPT_S: "
        "`edac_silent` judges EDAC's count over the BMC's interval from them (the fourth review, finding 1).",
    )


def host_total(edac: EdacState, kind: Kind) -> int:
    """Per controller its own total, or its DIMMs' and the unattributed ones where those add up to more."""
    if kind == "ce":
        return sum(max(c.ce_count, sum(d.ce_count for d in c.dimms) + c.ce_noinfo_count) for c in edac.controllers)
    return sum(max(c.ue_count, sum(d.ue_count for d in c.dimms) + c.ue_noinfo_count) for c in edac.controllers)


def _labelled(edac: EdacState) -> dict[str, list[tuple[int, int]]]:
    found: dict[str, list[tuple[int, int]]] = {}
    for controller in edac.controllers:
        for dimm in controller.dimms:
            if key := letters_digits(dimm.label):
                found.setdefault(key, []).append((dimm.ce_count, dimm.ue_count))
    return found


def rise_key(kind: Kind, dimm_key: str) -> str:
    return f"{kind}:{dimm_key}"


def _rises(
    counts: dict[str, tuple[int, int]], previous: EdacSample | None, *, now: dt.datetime, boot: str | None
) -> dict[str, dt.datetime]:
    """The kept rise times with this report's: a count above (or, after a counter reset, below) the previous
    sample's of the same boot rose now. A first sample or the first of a boot dates nothing (its counts are
    since boot: `counted` compares since boot then, and the previous boot's rises are dropped); a DIMM a sample
    that was not `full` dropped rose now if it has errors."""
    if previous is None or previous.boot != boot:  # another boot's rises are no count of this one's (note 7)
        return {}
    rose: dict[str, dt.datetime] = dict(previous.rose)
    for key, pair in counts.items():
        kinds: tuple[Kind, Kind] = ("ce", "ue")
        for index, kind in enumerate(kinds):
            if not pair[index]:
                continue
            then: int | None = None
            if key == HOST_KEY:
                then = previous.ce if kind == "ce" else previous.ue
            elif (held := previous.dimms.get(key)) is not None:
                then = held[index]
            elif previous.full:
                then = 0
            if then is None or pair[index] != then:
                rose[rise_key(kind, key)] = now
    newest = sorted(rose.items(), key=lambda kv: kv[1], reverse=True)[:MAX_RISES]
    return dict(newest)


def sample(
    edac: EdacState | None, *, now: dt.datetime, boot: str | None, previous: EdacSample | None = None
) -> EdacSample | None:
    """This report's EDAC counts, with the rise times carried from `previous` (the last sample kept)."""
    if edac is None:
        return None
    with_errors = {k: v[0] for k, v in _labelled(edac).items() if len(v) == 1 and (v[0][0] or v[0][1])}
    kept = dict(list(with_errors.items())[:MAX_SAMPLED_DIMMS])
    totals = (host_total(edac, "ce"), host_total(edac, "ue"))
    counts = EdacCounts(at=now, boot=boot, ce=totals[0], ue=totals[1], dimms=kept, full=len(kept) == len(with_errors))
    rose = _rises({HOST_KEY: totals, **kept}, previous, now=now, boot=boot)
    return EdacSample(**counts.model_dump(), rose=rose, marks=_marks(counts, previous, now=now))


def _marks(counts: EdacCounts, previous: EdacSample | None, *, now: dt.datetime) -> list[EdacCounts]:
    """The kept marks of this boot within MARKS_KEPT_S, with this report's counts where it is the first of its
    MARK_EVERY_S."""
    since = now - dt.timedelta(seconds=MARKS_KEPT_S)
    kept = [m for m in (previous.marks if previous is not None else []) if m.boot == counts.boot and m.at >= since]
    if not kept or int(kept[-1].at.timestamp()) // MARK_EVERY_S != int(now.timestamp()) // MARK_EVERY_S:
        kept.append(counts)
    return kept[-MAX_MARKS:]


def poll_s(edac: EdacState | None) -> float:
    """How late EDAC may count an error: its polling interval (the pack's edac-poll rule sets 37 s)."""
    if edac is None or edac.poll_msec is None:
        return EDAC_POLL_DEFAULT_S
    return edac.poll_msec / 1000


class EdacCounted(BaseModel):
    model_config = ConfigDict(frozen=True)

    count: int | None  # None: the host reports no EDAC
    scope: Literal["dimm", "host"]
    since: str  # the kept sample's time, or "boot"


def counted(
    edac: EdacState | None,
    before: EdacCounts | None,
    *,
    dimm: str,
    kind: Kind,
    start: dt.datetime | None,
    boot: str | None,
    slack_s: float = 0.0,
) -> EdacCounted:
    """EDAC's count of `kind` on the DIMM the BMC calls `dimm` (else the host) from the BMC's interval's
    `start` (None: unknown, since boot) to this report. `slack_s`: how much later than `start` the sample
    may be (the BMC's clock allowance, where the entries are known to be newer than the sample)."""
    if edac is None:
        return EdacCounted(count=None, scope="host", since="boot")
    index = 0 if kind == "ce" else 1
    matches = _labelled(edac).get(letters_digits(dimm), []) if letters_digits(dimm) else []
    scope: Literal["dimm", "host"] = "dimm" if len(matches) == 1 else "host"
    now_count = matches[0][index] if scope == "dimm" else host_total(edac, kind)
    usable = (
        before is not None
        and start is not None
        and before.at <= start + dt.timedelta(seconds=slack_s)
        and before.boot == boot
    )
    if before is None or not usable:
        return EdacCounted(count=now_count, scope=scope, since="boot")
    if scope == "dimm":
        held = before.dimms.get(letters_digits(dimm))
        if held is None and not before.full:
            return EdacCounted(count=now_count, scope=scope, since="boot")
        then = held[index] if held is not None else 0
    else:
        then = before.ce if kind == "ce" else before.ue
    if now_count < then:  # the counters were reset (edac_mc reset_counters): since then only
        return EdacCounted(count=now_count, scope=scope, since="reset")
    return EdacCounted(count=now_count - then, scope=scope, since=before.at.isoformat())


def judged(
    edac: EdacState | None,
    marks: list[EdacCounts],
    *,
    dimm: str,
    kind: Kind,
    since: dt.datetime | None,
    start: dt.datetime | None,
    boot: str | None,
) -> EdacCounted:
    """EDAC's count of `kind` on the DIMM (else the host) from the newest of `marks` (oldest first, all older than
    this report) of this boot at or before `since` (it covers the interval and up to MARK_EVERY_S more), else
    from the oldest at or before `start` (the interval's own start, `since` being that less the allowances: it
    covers the interval and as much of the allowances as is kept), else since boot (EDAC's counters start at
    boot: the entries are older than any count kept)."""
    same = [m for m in marks if m.boot == boot]
    mark = next((m for m in reversed(same) if since is not None and m.at <= since), None)
    if mark is None:
        mark = next((m for m in same if start is not None and m.at <= start), None)
    return counted(edac, mark, dimm=dimm, kind=kind, start=mark.at if mark else None, boot=boot)


def counted_detail(
    edac: EdacState | None,
    before: EdacSample | None,
    *,
    dimm: str,
    kind: Kind,
    start: dt.datetime | None,
    boot: str | None,
    slack_s: float = 0.0,
    rises: EdacSample | None = None,
    rise_from: dt.datetime | None = None,
    entries: int | None = None,
    window_entries: int | None = None,
) -> dict[str, object]:
    """A signal's `edac_counted` (EDAC's count from `before`, the previous sample; null: no EDAC section),
    `edac_rose_at` (when the same key's count last rose, from `rises`: this report's sample), `edac_judged`
    (EDAC's count from its mark at or before the interval's start less EDAC's poll interval and `slack_s`:
    `rise_from`, the log's rate window, at DIMM scope, else `start`), `edac_silent` (`edac_judged` is null
    or under max(1, half the BMC's entries over that interval: `window_entries` from `rise_from`, else
    `entries`; none given: 1)), `edac_scope` and `edac_since`."""
    found = counted(edac, before, dimm=dimm, kind=kind, start=start, boot=boot, slack_s=slack_s)
    key = rise_key(kind, letters_digits(dimm) if found.scope == "dimm" else HOST_KEY)
    rose_at = rises.rose.get(key) if rises is not None else None
    windowed = found.scope == "dimm" and rise_from is not None  # host scope: never the 30-minute window
    since = rise_from if windowed else start
    bmc = (window_entries if windowed else entries) or 0
    early = since - dt.timedelta(seconds=poll_s(edac) + slack_s) if since is not None else None
    marks = sorted([*(rises.marks if rises is not None else []), *([before] if before else [])], key=lambda m: m.at)
    marks = [m for m in marks if rises is None or m.at < rises.at]  # this report's own counts cover nothing
    edac_count = judged(edac, marks, dimm=dimm, kind=kind, since=early, start=since, boot=boot).count
    return {
        "edac_counted": found.count,
        "edac_rose_at": rose_at.isoformat() if rose_at is not None else None,
        "edac_judged": edac_count,
        "edac_silent": edac_count is None or edac_count < max(1.0, EDAC_JUDGES_SHARE * bmc),
        "edac_scope": found.scope,
        "edac_since": found.since,
    }
