"""A signal counted over a span, recounted from a repair's resolve on: what the signal would have been had
nothing before the repair been counted, so a detection while the repair is verified reopens its ticket
only on what came after it (remediator.repairs.counted_before_repair). Pure.

What a counted signal's detail carries (the derive modules that emit it fill these):
- `since`: ISO time the count began (the earliest time any counted event can have happened: a page's or
  a link's first event itself, where the source dates its events).
- `counted`: entries [t, n] or [t, n, first_s, last_s] (epoch seconds). `t` is the START of what an entry
  counts: with `counted_s` (the bucket width, seconds) an entry counts the events of [t, t + counted_s);
  without it an entry is a point (a report's own delta, a page's offline). `first_s` and `last_s`, where
  the derive knows each event's time (kernel lines, rasdaemon rows), are its first and last event's.
- Each entry is judged on its own against the resolve: an entry whose events all came before it counts
  nothing, one whose events all came at or after it counts whole. Only an entry with events on both sides
  is uncertain, and the recount is then a range: at least one of its events came after the resolve (its
  last) and at least one before (its first); an entry [t, n] without its events' times straddling the
  resolve counts 0 to n. The repair's own events (the link downs of a swap, the old DIMM's errors minutes
  before the resolve) then never reopen a ticket by themselves, and a fault that returned within the entry
  is never dropped silently (and with what the host had reported by the resolve, Reported, the entry
  counts exactly what it gained since): remediator.repairs reopens when the LOW end fires the rule, holds only when
  the HIGH end does not, and otherwise adds the detection to the ticket with both numbers (review of the
  counted spans, finding 2; spreading a bucket's events evenly over it, as before, held a new page's
  fifty errors in the resolve's hour and reopened a ticket on a cable swap's own link downs).
- A percent of a window (`counted_percent_of_s`, the window in seconds: cpu_throttle_percent): `counted`
  holds [end epoch seconds, throttled fraction] per interval between two reports, each interval from the
  entry before it (the first from `since`); a fraction above 1 is time the kernel timed when an episode
  that began before the interval ended. The recount is the throttled time after the resolve as a percent
  of the same window: an interval before the resolve counts nothing, one after it counts its time, one
  straddling it counts 0 to the part after the resolve; an interval whose time is longer than the time
  from the resolve to its end holds an episode that began before the repair (the kernel times an episode
  when it ends: a fix made while the host runs ends the episode after the resolve) and counts only what
  of it certainly lasted past the resolve plus EPISODE_GRACE_S (finding 4; second review, note 7). The
  signal comes again on every report whose window holds throttled time, so a fault that did return is
  judged on its own once the window lies wholly after the repair (its `since` is after the
  resolve): the recount can delay a real return by up to the window plus one report interval.

The recounted signal keeps every detail that does not depend on the count (a port's scope, redundancy, a
page's certainty) and recomputes those that do, where the detail holds what they need (RECOUNT_FLAGS: a
port's last hour against its allowance, the buckets that make it rising, every port's own hour), so the
rule's whole condition judges it. A flag the detail cannot recompute (a page's `concentrated`, which needs
the other pages of its DIMM) is kept as it was: the count itself still has to reach the rule's threshold.
"""

from __future__ import annotations

import contextlib
import datetime as dt
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from typing import Any

from remediator.derive.network import ERROR_FLOOR_PER_HOUR, RISING_BUCKETS, error_floor
from remediator.signals import SignalValue

Range = tuple[float, float]  # (low, high): what certainly came after the resolve, what at most did


@dataclass(frozen=True)
class _Entry:
    count: float
    start: float  # the entry's own `t` (what a Reported entry is matched by)
    first: float  # the earliest time one of its events can have happened
    last: float  # the latest
    exact: bool  # first and last are events' own times (else the bucket's bounds)


@dataclass(frozen=True)
class Held:
    """Why a detection while a repair is verified does not reopen its ticket: `reason` in words (the decision
    and the ticket's note), `detail` the numbers the ticket keeps (`recount`)."""

    reason: str
    detail: dict[str, Any]


def _entries(counted: list[Any], width: float) -> list[_Entry]:
    entries = []
    for item in counted:
        if not isinstance(item, list | tuple) or len(item) not in (2, 4):
            continue
        try:
            values = [float(x) for x in item]
        except (TypeError, ValueError):
            continue
        if len(values) == 4:
            entries.append(_Entry(values[1], values[0], values[2], values[3], True))
        else:  # a bucket's events lie in [t, t + width): its last strictly before its end
            entries.append(
                _Entry(values[1], values[0], values[0], values[0] + width - 1e-3 if width > 0 else values[0], False)
            )
    return entries


def _after(entry: _Entry, resolved_s: float) -> Range:
    """How many of the entry's events came at or after the resolve: at least, at most."""
    if entry.last < resolved_s:
        return 0.0, 0.0
    if entry.first >= resolved_s:
        return entry.count, entry.count
    if not entry.exact:
        return 0.0, entry.count
    low = min(1.0, entry.count)  # its last event came after the resolve, its first before
    return low, max(low, entry.count - 1)


@dataclass(frozen=True)
class Reported:
    """What the host had reported by the resolve: the `counted` of the last stored signal of the same kind
    and subject observed at or before it (remediator.repairs.route_detection reads it), and when it was
    observed. An entry straddling the resolve then counts what it gained since: its count now less its
    count then (second review of repair-reopen, finding 1: without it the low end of an hour with events on
    both sides was 1 whatever the count, so a page's return within the resolve's hour never reopened).
    Events between that report and the resolve count as after it: the host reports every minute or so and
    a repaired host is off or just back, and the error is the safe one (a reopen, never a silent close)."""

    at_s: float
    counts: dict[float, float]  # an entry's start -> its count then

    @classmethod
    def of(cls, at: dt.datetime, counted: Any) -> Reported:
        counts: dict[float, float] = {}
        for item in counted if isinstance(counted, list) else []:
            try:
                counts[float(item[0])] = float(item[1])
            except (TypeError, ValueError, IndexError):
                continue
        return cls((at if at.tzinfo else at.replace(tzinfo=dt.UTC)).timestamp(), counts)


def _counts_after(
    entries: list[_Entry], resolved_s: float, reported: Reported | None = None
) -> tuple[Range, tuple[int, int]]:
    """What was counted after the resolve (low, high), and how many entries with a count lie after it (each)."""
    low = high = 0.0
    active_low = active_high = 0
    for entry in entries:
        least, most = _after(entry, resolved_s)
        if least < most and reported is not None and entry.start in reported.counts and reported.at_s >= entry.first:
            least = most = min(entry.count, max(0.0, entry.count - reported.counts[entry.start]))
        low, high = low + least, high + most
        active_low += 1 if least > 0 else 0
        active_high += 1 if most > 0 else 0
    return (low, high), (active_low, active_high)


EPISODE_GRACE_S = 120.0
"""How long after the resolve a throttle episode that began before it may go on because of the repair: the
package cooling down once the airflow is back (a CPU's heatsink sheds its heat within a minute or two; our
judgement, on the side of holding). Only what lasted past it counts as after the repair."""


def _percent_after(pairs: list[Any], since_s: float, of_s: float, resolved_s: float) -> Range:
    low = high = 0.0
    start = since_s
    for end, fraction in sorted((float(p[0]), float(p[1])) for p in pairs if isinstance(p, list | tuple)):
        span = end - start
        throttled = max(0.0, fraction) * max(0.0, span)
        began_before = throttled > span and throttled > end - resolved_s  # an episode timed past its interval
        if end > resolved_s and not began_before:
            after = min(throttled, end - resolved_s)
            high += after
            low += after if start >= resolved_s else 0.0
        elif end > resolved_s:
            # an episode that began before the repair ended within this interval, so at or after its start:
            # the part of it from the resolve plus a cool-down grace to the interval's start was certainly
            # after the fix (second review of repair-reopen, note 7: it counted nothing, so a fix that did not
            # help, the package throttled for 25 minutes after it, was held)
            lasted = min(throttled, max(0.0, start - resolved_s - EPISODE_GRACE_S))
            low, high = low + lasted, high + lasted
        start = end
    if of_s <= 0:
        return 0.0, 0.0
    return min(100.0, 100.0 * low / of_s), min(100.0, 100.0 * high / of_s)


def _port_flags(detail: dict[str, Any], recount: float, active: int) -> dict[str, Any]:
    """nic_crc_error_rate (remediator/derive/network.py _judge): the hour's count against the port's
    allowance floor, and the buckets with errors against those a steady stream needs."""
    allowance = detail.get("ieee_allowance_per_hour")
    floor = error_floor(float(allowance) if isinstance(allowance, int | float) else None)
    needed = detail.get("needed")
    rising = recount > 0 and active >= (needed if isinstance(needed, int) else RISING_BUCKETS)
    return {
        "last_hour": round(recount, 3),
        "buckets_with_errors": active,
        "rising": rising,
        "over_allowance": recount >= floor,
        "erring": rising and recount >= floor / 2,
    }


def _bmc_rate(detail: dict[str, Any], recount: float, _active: int) -> dict[str, Any]:
    """bmc_dimm_ce_rate (remediator/derive/redfish.py): its value is a rate over the two inventory reads'
    interval (`elapsed_s`), so the recount is the errors after the resolve over that interval (second review
    of the Redfish rules, finding 7). Its one entry spans the interval with no event's time: straddling the
    resolve it counts 0 to all (held as uncertain, never reopened on the old DIMM's count alone)."""
    elapsed = detail.get("elapsed_s")
    seconds = float(elapsed) if isinstance(elapsed, int | float) and elapsed > 0 else 0.0
    return {"value": recount / seconds if seconds else 0.0, "delta": round(recount)}


RECOUNT_FLAGS: dict[str, Callable[[dict[str, Any], float, int], dict[str, Any]]] = {
    "nic_crc_error_rate": _port_flags,
    "bmc_dimm_ce_rate": _bmc_rate,
}
"""Signal kind -> the detail its recount changes besides the value (a `value` it gives replaces the count:
a rate's recount)."""


def _every_port(detail: dict[str, Any], resolved_s: float, width: float) -> tuple[dict[str, Any], dict[str, Any]]:
    """nic_errors_every_port (remediator/derive/network_ports.py): its value is the smallest port's hour, and
    it is over its allowance when every port is. With each port's own buckets (`counted_ports`, up to
    MAX_PORTS_COUNTED ports) the recount is each port's, and the smallest of them. Without (more ports, or a
    signal stored before they were carried) only the ports' sum is known: their mean is an upper bound of the
    smallest port's count and nothing is a lower one (one port may have nothing after the repair: review of
    the counted spans, finding 5), so it can hold, or add the detection with the numbers, never reopen."""
    ports = detail.get("counted_ports")
    floors = detail.get("port_floors")
    floors = floors if isinstance(floors, dict) else {}
    if isinstance(ports, dict) and ports:
        ranges = {
            name: _counts_after(_entries(counted if isinstance(counted, list) else [], width), resolved_s)[0]
            for name, counted in ports.items()
        }
        floor_of = {name: float(floors.get(name) or ERROR_FLOOR_PER_HOUR) for name in ranges}
        lows, highs = ({n: r[i] for n, r in ranges.items()} for i in (0, 1))
    else:
        names = detail.get("ports") or []
        (_, high_sum), _ = _counts_after(_entries(detail.get("counted") or [], width), resolved_s)
        lows = {"every port": 0.0}
        highs = {"every port": high_sum / max(1, len(names))}
        floor_of = {"every port": float(ERROR_FLOOR_PER_HOUR)}
    over = detail.get("over_allowance") is True

    def judged(by_port: dict[str, float]) -> dict[str, Any]:
        return {
            "value": min(by_port.values()),
            "last_hour": {name: round(n, 3) for name, n in by_port.items()},
            "over_allowance": over and all(n >= floor_of[name] for name, n in by_port.items()),
        }

    return judged(lows), judged(highs)


def recount_range(
    signal: SignalValue, resolved: dt.datetime, reported: Reported | None = None
) -> tuple[SignalValue, SignalValue] | None:
    """The signal with only what was counted from `resolved` on: the least and the most that can have come
    after it (equal unless an entry straddles the resolve and `reported` does not say what it held then).
    None when it carries no counted span, or its span began at or after the resolve (nothing before the
    repair is in it)."""
    detail = signal.detail
    since_text, counted = detail.get("since"), detail.get("counted")
    if not isinstance(since_text, str) or not isinstance(counted, list):
        return None
    try:
        since = dt.datetime.fromisoformat(since_text)
    except ValueError:
        return None
    resolved = resolved if resolved.tzinfo else resolved.replace(tzinfo=dt.UTC)
    if since.tzinfo is None or since >= resolved:
        return None
    resolved_s = resolved.timestamp()
    percent_of = detail.get("counted_percent_of_s")
    if isinstance(percent_of, int | float):
        low, high = _percent_after(counted, since.timestamp(), float(percent_of), resolved_s)
        return replace(signal, value=low), replace(signal, value=high)
    width = detail.get("counted_s")
    width = float(width) if isinstance(width, int | float) else 0.0
    pair: tuple[dict[str, Any], dict[str, Any]]
    if signal.kind == "nic_errors_every_port":
        pair = _every_port(detail, resolved_s, width)
    else:
        (least, most), (active_least, active_most) = _counts_after(_entries(counted, width), resolved_s, reported)
        flags = RECOUNT_FLAGS.get(signal.kind)
        pair = (
            {"value": least, **(flags(detail, least, active_least) if flags else {})},
            {"value": most, **(flags(detail, most, active_most) if flags else {})},
        )
    changed_low, changed_high = ({k: v for k, v in changed.items() if k != "value"} for changed in pair)
    return (
        replace(signal, value=round(float(pair[0]["value"]), 3), detail={**detail, **changed_low}),
        replace(signal, value=round(float(pair[1]["value"]), 3), detail={**detail, **changed_high}),
    )


def recounted(signal: SignalValue, resolved: dt.datetime) -> SignalValue | None:
    """What certainly came after `resolved` (recount_range's low end); None as there."""
    found = recount_range(signal, resolved)
    return found[0] if found is not None else None


UNDECIDED_WINDOW_S = 24 * 3600.0
"""How long after its straddling entry a detection stays uncertain when its detail names no window: the
longest counted window of the derives (a page's 24 h, remediator/derive/pages.py WINDOW_H)."""


def undecided_until(detail: dict[str, Any], resolved_s: float) -> float:
    """When an uncertain detection's entries straddling the resolve have left the signal's window (epoch
    seconds): from then on its detections are recounted wholly after the repair, so the ticket does not close
    before (remediator.repairs._settle; second review of repair-reopen, finding 1b)."""
    width = detail.get("counted_s")
    width = float(width) if isinstance(width, int | float) else 0.0
    counted = detail.get("counted")
    ends = [resolved_s]
    if "counted_percent_of_s" not in detail and isinstance(counted, list):
        ends += [max(e.last, e.start + width) for e in _entries(counted, width) if e.first < resolved_s <= e.last]
    window: Any = next(
        (
            v * f
            for k, f in (("window_h", 3600), ("window_s", 1), ("counted_percent_of_s", 1))
            if isinstance(v := detail.get(k), int | float)
        ),
        UNDECIDED_WINDOW_S,
    )
    return max(ends) + float(window)


def held_by_repair(
    signal: SignalValue,
    resolved: dt.datetime,
    fires: Callable[[SignalValue], bool],
    reported: Reported | None = None,
) -> Held | None:
    """Whether a detection of `signal` while the repair resolved at `resolved` is verified is held (not a
    reopen): None when it carries no span from before the repair, or when what certainly came after the
    repair fires the rule (`fires`: the rule's whole condition). Held when even the most that can have come
    after it does not fire the rule; between the two, held as uncertain: the caller adds it to the ticket
    with both numbers, never silently (the project's rule: no confident wrong answer either way)."""
    found = recount_range(signal, resolved, reported)
    if found is None or fires(found[0]):
        return None
    low, high = found
    resolved = resolved if resolved.tzinfo else resolved.replace(tzinfo=dt.UTC)
    since = signal.detail.get("since")
    certain = not fires(high)
    after = f"{low.value:.3g}" if low.value == high.value else f"{low.value:.3g} to {high.value:.3g}"
    if certain:
        why = f"held, not a returned fault: {after} after it does not fire the rule"
    else:
        why = (
            f"uncertain, not reopened: {after} after it (events on both sides of the resolve); "
            f"{high.value:.3g} would fire the rule, {low.value:.3g} does not"
        )
    reason = (
        f"counted since {since}, before the repair of {resolved.isoformat()}: {why} ({signal.value:.3g} counted in all)"
    )
    detail = {
        "held": "before the repair" if certain else "uncertain",
        "since": since,
        "resolved_at": resolved.isoformat(),
        "counted": signal.value,
        "after_low": low.value,
        "after_high": high.value,
    }
    if not certain:
        until = undecided_until(signal.detail, resolved.timestamp())
        detail["undecided_until"] = dt.datetime.fromtimestamp(until, dt.UTC).isoformat()
    return Held(reason, detail)


def held_detections(events: Iterable[Any], since: dt.datetime) -> tuple[int, int]:
    """Of a ticket's events, the detections added since `since` (the resolve: those recorded before the
    verification began count too) that were held because their count was counted before the repair, and
    those that were uncertain (remediator.repairs.route_detection gives both a `recount`), for its close
    reason: (held, uncertain)."""
    start = since if since.tzinfo else since.replace(tzinfo=dt.UTC)
    held = uncertain = 0
    for event in events:
        recount = (event.detail or {}).get("recount")
        at = event.at if event.at.tzinfo else event.at.replace(tzinfo=dt.UTC)
        if event.kind != "detected_again" or not isinstance(recount, dict) or at < start:
            continue
        if recount.get("held") == "uncertain":
            uncertain += 1
        else:
            held += 1
    return held, uncertain


def undecided_detections(events: Iterable[Any], since: dt.datetime, now: dt.datetime) -> list[str]:
    """The uncertain detections added since `since` still undecided at `now`, each named for a close note:
    its rule, subject and time, what came after the repair (a range) and when it would have been decided."""
    start = since if since.tzinfo else since.replace(tzinfo=dt.UTC)
    named: list[str] = []
    for event in events:
        detail = event.detail or {}
        recount = detail.get("recount")
        if not isinstance(recount, dict):
            continue
        until = recount.get("undecided_until")
        at = event.at if event.at.tzinfo else event.at.replace(tzinfo=dt.UTC)
        if event.kind != "detected_again" or not isinstance(until, str) or at < start:
            continue
        with contextlib.suppress(ValueError):
            if dt.datetime.fromisoformat(until) > now:
                named.append(
                    f"{detail.get('rule', '?')} on {detail.get('subject') or '?'} at {at.isoformat()}: "
                    f"{recount.get('after_low')} to {recount.get('after_high')} after the repair, "
                    f"undecided until {until}"
                )
    return named


def undecided(events: Iterable[Any], since: dt.datetime) -> dt.datetime | None:
    """The latest `undecided_until` of the uncertain detections added since `since`: the ticket is not
    closed before it (remediator.repairs._settle)."""
    start = since if since.tzinfo else since.replace(tzinfo=dt.UTC)
    found: list[dt.datetime] = []
    for event in events:
        recount = (event.detail or {}).get("recount")
        at = event.at if event.at.tzinfo else event.at.replace(tzinfo=dt.UTC)
        until = recount.get("undecided_until") if isinstance(recount, dict) else None
        if event.kind == "detected_again" and isinstance(until, str) and at >= start:
            with contextlib.suppress(ValueError):
                found.append(dt.datetime.fromisoformat(until))
    return max(found, default=None)
