"""The review of the counted spans (remediator.recount, repairs.counted_before_repair), its operator's probes
made tests. A detection while a repair is verified reopens its ticket when what certainly came after the
repair fires the rule, is held when even the most that can have come after it does not, and otherwise is
added to the ticket with both numbers (never a confident wrong answer either way). Each test says what the
code before the fix did."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest

from checker.schemas import Observations, RasdaemonState, RasMemoryEvent, ThermalThrottle, ThrottlePackage
from remediator.derive.heat import HeatMemory, throttle_signals
from remediator.derive.kernel import kernel_signals
from remediator.derive.memory import PageMemory, PageTrack
from remediator.derive.pages import page_signals
from remediator.evaluate import Firing
from remediator.repairs import counted_before_repair
from remediator.rules import RulePackError, load_pack, load_ruleset
from remediator.signals import SignalValue
from tests.builders.observations import event, kernel_log
from tests.builders.reports import LABEL, T0

RULES = {rule.id: rule for rule in load_ruleset([]).rules}
HOUR = dt.timedelta(hours=1)
MINUTE = dt.timedelta(minutes=1)
SECOND = dt.timedelta(seconds=1)


def outcome(rule_id: str, signal: SignalValue, resolved: dt.datetime) -> str:
    """What a firing of the rule on the signal does while a repair resolved at `resolved` is verified."""
    rule = RULES[rule_id]
    assert rule.when.matches(signal)
    assert rule.when.holds(signal.value)
    held = counted_before_repair(Firing(rule, signal), resolved)
    if held is None:
        return "reopen"
    assert held.detail["held"] in ("before the repair", "uncertain")
    return "held" if held.detail["held"] == "before the repair" else "uncertain"


def numbers(rule_id: str, signal: SignalValue, resolved: dt.datetime) -> tuple[float, float]:
    held = counted_before_repair(Firing(RULES[rule_id], signal), resolved)
    assert held is not None
    return held.detail["after_low"], held.detail["after_high"]


# -- finding 1: a page's count begins at its first error, not its first hour ---------------------------------


def page_rows(first_id: int, times: list[dt.datetime], address: int) -> Observations:
    rows = [
        RasMemoryEvent(
            id=first_id + i,
            timestamp=when.strftime("%Y-%m-%d %H:%M:%S +0000"),
            err_type="Corrected",
            label=LABEL,
            mc=0,
            top_layer=2,
            middle_layer=0,
            lower_layer=-1,
            address=address,
            grain=5,
        )
        for i, when in enumerate(times)
    ]
    last = first_id + len(times) - 1
    return Observations(rasdaemon=RasdaemonState(memory_events=rows, last_id=last, last_ids={"mc_event": last}))


def page_after(reports: list[tuple[dt.datetime, Observations]], page: str) -> SignalValue:
    memory: PageMemory | None = None
    signals: list[SignalValue] = []
    for now, observations in reports:
        signals, memory = page_signals(observations, memory, now=now)
    (found,) = [s for s in signals if s.kind == "page_ce_count" and s.subject == page]
    return found


def test_f1_a_new_pages_errors_after_the_resolve_within_its_hour_reopen() -> None:
    """probe.py "A": the DIMM's ticket resolved at 12:50; from 12:51 the replacement logs 50 errors on a page
    never seen before. Before: `since` was the hour's start (12:00), the recount spread the 50 over the hour
    (8.33 after the resolve), and the detection was held with a false reason: no reopen, nothing on the ticket."""
    burst = [T0 + 51 * MINUTE + 10 * i * SECOND for i in range(50)]
    page = page_after(
        [
            (T0 - 3 * HOUR + 15 * MINUTE, page_rows(1, [T0 - 3 * HOUR + i * MINUTE for i in range(12)], 0x849923380)),
            (T0 + 59 * MINUTE, page_rows(100, burst, 0x7700001000)),
        ],
        "0x7700001000",
    )
    assert page.value == 50
    assert page.detail["since"] == (T0 + 51 * MINUTE).isoformat()  # its first error, not its hour's start
    assert outcome("page-ce-soft-offline", page, T0 + 50 * MINUTE) == "reopen"


def test_f2_the_old_dimms_errors_minutes_before_the_resolve_do_not_reopen_its_ticket() -> None:
    """Twenty errors of the old DIMM at 12:00-12:04, the resolve at 12:05, one error at 12:25 on the same page:
    the hour's first error came before the resolve and its last after, so one to twenty came after. Before:
    the hour spread evenly gave 19.25 after the resolve, and the ticket reopened."""
    page = page_after(
        [
            (T0 + 5 * MINUTE, page_rows(1, [T0 + 12 * i * SECOND for i in range(20)], 0x849923380)),
            (T0 + 26 * MINUTE, page_rows(50, [T0 + 25 * MINUTE], 0x849923380)),
        ],
        "0x849923000",
    )
    assert page.value == 21
    resolved = T0 + 5 * MINUTE
    assert outcome("page-ce-soft-offline", page, resolved) == "uncertain"  # added to the ticket, not reopened
    assert numbers("page-ce-soft-offline", page, resolved) == (1, 20)


def test_f2_page_hours_kept_before_the_times_were_stay_readable_and_untimed() -> None:
    """A host's memory kept before this change holds (hour, CEs): a new error in that hour cannot say when the
    hour's first came, so the hour stays [start, count] (0 to all of it after a resolve within it)."""
    hour = int(T0.timestamp()) // 3600
    track = PageTrack(hours=[(hour, 10)], where=LABEL, sources=["rasdaemon mc_event"])
    memory = PageMemory(pages={"0x849923000": track}, mc_event=10)
    signals, _ = page_signals(page_rows(11, [T0 + 30 * MINUTE], 0x849923380), memory, now=T0 + 31 * MINUTE)
    (page,) = [s for s in signals if s.kind == "page_ce_count"]
    assert page.detail["counted"] == [[hour * 3600, 11]]
    assert page.detail["since"] == T0.isoformat()
    assert numbers("page-ce-soft-offline", page, T0 + 20 * MINUTE) == (0, 11)


# -- finding 2: a bucket the resolve falls in, judged by its events' own times -------------------------------


def link_down_signal(times: list[dt.datetime], now: dt.datetime) -> SignalValue:
    downs = [event("nic_link_down", i + 1, when, "eth0") for i, when in enumerate(times)]
    signals, _ = kernel_signals(kernel_log(*downs), None, now=now, boot_id="boot-1")
    (signal,) = [s for s in signals if s.kind == "device_event_count"]
    signal.detail["redundant"] = "False"  # as derive/network_ports.note_link_redundancy gives it
    return signal


def test_f2_a_cable_swaps_own_link_downs_do_not_reopen_its_ticket() -> None:
    """probe2.py: the swap takes the link down four times at 12:02-12:05, the resolve at 12:08. Before: the
    hour's four downs spread evenly put 3.47 after the resolve, over the rule's 3: the ticket reopened."""
    signal = link_down_signal([T0 + (2 + i) * MINUTE for i in range(4)], T0 + 9 * MINUTE)
    stamp = int(T0.timestamp())
    assert signal.detail["counted"] == [[stamp, 4, stamp + 120, stamp + 300]]
    assert signal.detail["since"] == (T0 + 2 * MINUTE).isoformat()
    assert outcome("nic-link-flapping", signal, T0 + 8 * MINUTE) == "held"


def test_f2_a_new_cable_flapping_right_after_the_resolve_reopens_its_ticket() -> None:
    """probe2.py: one down of the old cable at 11:10, the resolve at 12:50, the new cable flaps five times at
    12:51-12:55. Before: 5 x 10/60 = 0.83 after the resolve: held, and the ticket would have closed."""
    times = [T0 - 50 * MINUTE] + [T0 + (51 + i) * MINUTE for i in range(5)]
    signal = link_down_signal(times, T0 + 56 * MINUTE)
    assert outcome("nic-link-flapping", signal, T0 + 50 * MINUTE) == "reopen"


def test_f2_downs_on_both_sides_of_the_resolve_are_added_with_both_numbers() -> None:
    """Three downs at 12:05-12:07, the resolve at 12:30, two at 12:40 and 12:45: the hour's first down came
    before the resolve and its last after, so 1 to 4 after it: the rule's 3 may or may not be reached. Before:
    spread evenly, 2.5: held without a trace."""
    times = [T0 + (5 + i) * MINUTE for i in range(3)] + [T0 + 40 * MINUTE, T0 + 45 * MINUTE]
    signal = link_down_signal(times, T0 + 46 * MINUTE)
    resolved = T0 + 30 * MINUTE
    assert outcome("nic-link-flapping", signal, resolved) == "uncertain"
    assert numbers("nic-link-flapping", signal, resolved) == (1, 4)


def test_f2_old_pairs_without_times_stay_readable_and_are_uncertain_across_the_resolve() -> None:
    """A signal stored before the times were carried: [start, count] hours. One wholly before the resolve
    counts nothing, one after it counts whole, the one it falls in counts 0 to its count."""
    hour = int(T0.timestamp())
    detail = {"kind": "nic_link_down", "redundant": "False", "counted_s": 3600, "since": (T0 - HOUR).isoformat()}
    signal = SignalValue("device_event_count", "eth0", 10.0, {**detail, "counted": [[hour - 3600, 2], [hour, 8]]})
    assert outcome("nic-link-flapping", signal, T0 + 15 * MINUTE) == "uncertain"
    assert numbers("nic-link-flapping", signal, T0 + 15 * MINUTE) == (0, 8)
    assert outcome("nic-link-flapping", signal, T0) == "reopen"  # the hour of eight wholly after it


def crc_port(counted: list[list[int]]) -> SignalValue:
    """nic_crc_error_rate as remediator/derive/network.py gives it: a 100 Gb/s port, over its allowance
    from 1080 an hour, rising with errors in three five-minute buckets."""
    total = sum(n for _, n in counted)
    detail = {
        "scope": "one-port",
        "rising": True,
        "over_allowance": True,
        "needed": 3,
        "ieee_allowance_per_hour": 360.0,
        "last_hour": total,
        "since": dt.datetime.fromtimestamp(counted[0][0], dt.UTC).isoformat(),
        "counted": counted,
        "counted_s": 300,
    }
    return SignalValue("nic_crc_error_rate", "ens1f0", float(total), detail)


def test_f2_a_bucket_before_the_repair_does_not_make_the_port_rising() -> None:
    """Errors in the five minutes the resolve (12:32:30) falls in, then in two buckets after it: the port is
    rising after the repair only if that bucket's errors came after the resolve, which a report's delta
    cannot say. Before: any bucket with a share after the resolve counted toward `rising`, so three buckets
    and 1500 errors reopened the ticket."""
    start = int(T0.timestamp())
    counted = [[start + i * 300, 1000] for i in range(3)] + [[start + 1800 + i * 300, 600] for i in range(3)]
    signal = crc_port(counted)
    resolved = T0 + 32 * MINUTE + 30 * SECOND
    assert outcome("nic-crc-errors", signal, resolved) == "uncertain"
    assert numbers("nic-crc-errors", signal, resolved) == (1200, 1800)
    heavy = counted[:4] + [[start + 2100 + i * 300, 600] for i in range(3)]  # three buckets wholly after it
    assert outcome("nic-crc-errors", crc_port(heavy), resolved) == "reopen"


# -- finding 4: an airflow fix made while the package runs hot ----------------------------------------------


def package(count: int, total_ms: int) -> ThermalThrottle:
    return ThermalThrottle(
        packages=[
            ThrottlePackage(package=0, cpu=0, package_throttle_count=count, package_throttle_total_time_ms=total_ms)
        ]
    )


def throttled(samples: list[tuple[dt.datetime, int, int]]) -> SignalValue:
    memory: HeatMemory | None = None
    signals: list[SignalValue] = []
    for now, count, total in samples:
        signals, memory = throttle_signals(package(count, total), memory, now=now, boot="b1")
    (percent,) = [s for s in signals if s.kind == "cpu_throttle_percent"]
    return percent


def test_f4_an_episode_that_began_before_the_fix_and_ended_after_it_does_not_reopen() -> None:
    """probe.py "B": throttled continuously from 11:49:30; the airflow fixed and the ticket resolved at
    12:00:05; the episode ends at 12:00:30, and the report at 12:01 shows its 630 s at once (the kernel times
    an episode when it ends). Before: the interval's share was capped at 1 and taken as spread over it, 8.3%
    of the window after the resolve: over the rule's 5%, the ticket reopened."""
    samples = [(T0 - 11 * MINUTE, 4, 0)] + [(T0 - (10 - i) * MINUTE, 5, 0) for i in range(10)]
    percent = throttled([*samples, (T0 + MINUTE, 5, 630_000)])
    assert percent.detail["counted"][-1][1] == pytest.approx(5.25)  # 630 s in a 120 s interval: not capped
    assert outcome("cpu-package-throttling", percent, T0 + 5 * SECOND) == "held"
    # the package throttles again after the fix, half of every minute: the fault is back
    hot = [(T0 + (2 + i) * MINUTE, 6 + i, 630_000 + 30_000 * (i + 1)) for i in range(4)]
    assert outcome("cpu-package-throttling", throttled([*samples, (T0 + MINUTE, 5, 630_000), *hot]), T0) == "reopen"


# -- finding 5: every port's recount is the smallest port's own -------------------------------------------


def every_port(after: dict[str, int], *, carried: bool = True, ports: int = 2) -> SignalValue:
    """nic_errors_every_port: 1600 errors a port in three buckets before the repair at 12:30, then `after`
    per port in three buckets after it; with each port's buckets (`counted_ports`) or their sum only."""
    start = int(T0.timestamp())
    names = [f"p{i}" for i in range(ports)]
    own = {
        name: [[start + i * 300, 1600] for i in range(3)]
        + ([[start + 2400 + i * 300, after.get(name, 0) // 3] for i in range(3)] if after.get(name) else [])
        for name in names
    }
    summed: dict[int, int] = {}
    for buckets in own.values():
        for at, n in buckets:
            summed[at] = summed.get(at, 0) + n
    detail: dict[str, object] = {
        "ports": names,
        "over_allowance": True,
        "since": T0.isoformat(),
        "counted": [[at, summed[at]] for at in sorted(summed)],
        "counted_s": 300,
    }
    if carried:
        detail.update(counted_ports=own, port_floors=dict.fromkeys(names, 100.0))
    value = min(sum(n for _, n in own[name]) for name in names)
    return SignalValue("nic_errors_every_port", "0000:3b:00", float(value), detail)


def test_f5_one_bad_cable_after_a_nic_swap_does_not_reopen_the_nics_ticket() -> None:
    """probe.py "E": the NIC swapped at 12:30, then 300 errors on p0 (its cable is bad) and none on p1. Before:
    the ports' mean, 150, reopened the "errors on every port" ticket and held the host for one cable."""
    resolved = T0 + 30 * MINUTE
    assert outcome("nic-errors-every-port", every_port({"p0": 300}), resolved) == "held"
    assert numbers("nic-errors-every-port", every_port({"p0": 300}), resolved) == (0, 0)
    assert outcome("nic-errors-every-port", every_port({"p0": 300, "p1": 240}), resolved) == "reopen"


def test_f5_without_each_ports_buckets_every_port_is_never_reopened_only_added() -> None:
    """More ports than are carried (or a signal stored before): only their sum is known, whose mean bounds the
    smallest port from above and nothing from below. Before: the mean alone reopened the ticket."""
    resolved = T0 + 30 * MINUTE
    heavy = every_port(dict.fromkeys(("p0", "p1", "p2", "p3", "p4", "p5"), 600), carried=False, ports=6)
    assert outcome("nic-errors-every-port", heavy, resolved) == "uncertain"  # on the ticket with its numbers
    assert numbers("nic-errors-every-port", heavy, resolved) == (0, 600)
    light = every_port({"p0": 300}, carried=False, ports=6)
    assert outcome("nic-errors-every-port", light, resolved) == "held"  # a mean of 50: no port can be at 100


# -- note 6: no part and "{subject}" are the same part ---------------------------------------------------

PACK = """\
version: 1
rules:
  - id: t
    description: d
    when: {signal: %s, op: ">=", value: 10}
    plan:
      - action: ticket
        params: {part_type: %s%s}
    escalation:
      - plan:
          - action: ticket
            params: {part_type: %s%s}
"""


@pytest.mark.parametrize(
    ("first", "then"),
    [("", ', part: "{subject}"'), (', part: "{subject}"', ""), ("", ", in_service: false")],
)
def test_note6_no_part_and_the_subject_are_one_part(tmp_path: Path, first: str, then: str) -> None:
    """Before: a rung without a part and one with "{subject}" were refused as different parts."""
    path = tmp_path / "pack.yaml"
    path.write_text(PACK % ("dimm_ce_rate", "dimm", first, "dimm", then))
    assert load_pack(path).rules[0].id == "t"


@pytest.mark.parametrize(
    ("signal", "part_type", "then"),
    [
        ("dimm_ce_rate", "host", ", part: host"),  # the cable's ticket first, the host's next: routing can't
        ("gpu_xid", "gpu", ', part: "{subject}"'),  # a GPU's ticket without a part is keyed by its one form
    ],
)
def test_note6_parts_that_route_differently_are_still_refused(
    tmp_path: Path, signal: str, part_type: str, then: str
) -> None:
    path = tmp_path / "pack.yaml"
    path.write_text(PACK % (signal, part_type, "", part_type, then))
    with pytest.raises(RulePackError, match="ticket steps name different parts"):
        load_pack(path)


def test_f5_the_every_port_signal_carries_each_ports_own_buckets() -> None:
    """As remediator/derive/network.py gives it: p0 errs 60 and p1 50 a report; each port's buckets and
    allowance floor ride along, so a repair's recount is the smallest port's. Before: only their sum."""
    from tests.remediator.test_derive_network import port, run

    states = [[port("p0", "0000:3b:00.0", crc=60 * n), port("p1", "0000:3b:00.1", crc=50 * n)] for n in range(7)]
    signals = run(states)[-1][0]
    (every,) = [s for s in signals if s.kind == "nic_errors_every_port"]
    own = {s.subject: s.detail["counted"] for s in signals if s.kind == "nic_crc_error_rate"}
    assert every.detail["counted_ports"] == own
    assert every.detail["port_floors"] == {"p0": 270.0, "p1": 270.0}  # 3 x 90 an hour at 25 Gb/s
    first = dt.datetime.fromtimestamp(every.detail["counted"][0][0], dt.UTC)
    resolved = first + 10 * MINUTE  # reports ten minutes apart: the first report's bucket before the repair
    held = counted_before_repair(Firing(RULES["nic-errors-every-port"], every), resolved)
    assert held is not None
    assert held.detail["after_low"] == held.detail["after_high"] == 50 * 5  # p1's five buckets after it
