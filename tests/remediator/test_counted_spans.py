"""Signals counted over a span, recounted from a repair's resolve on (remediator.recount,
repairs.counted_before_repair): issue 16's leftovers S1-S4. A detection while a repair is verified
reopens its ticket only when what was counted after the repair fires the rule by itself. Each test
says what the code before the fix did."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest

from checker.schemas import Observations, RasdaemonState, RasMemoryEvent, ThermalThrottle, ThrottlePackage
from remediator.derive.heat import HeatMemory, throttle_signals
from remediator.derive.kernel import kernel_signals
from remediator.derive.memory import PageMemory
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


def fires(rule_id: str, signal: SignalValue) -> bool:
    rule = RULES[rule_id]
    return rule.when.matches(signal) and rule.when.holds(signal.value)


def held(rule_id: str, signal: SignalValue, resolved: dt.datetime) -> bool:
    """Whether a firing of the rule on the signal, while a repair resolved at `resolved` is verified, is held."""
    assert fires(rule_id, signal)
    return counted_before_repair(Firing(RULES[rule_id], signal), resolved) is not None


# -- S1: pages ---------------------------------------------------------------------------


def page_errors(first_id: int, times: list[dt.datetime]) -> RasdaemonState:
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
            address=0x849923380,
            grain=5,
        )
        for i, when in enumerate(times)
    ]
    last = first_id + len(times) - 1
    return RasdaemonState(memory_events=rows, last_id=last, last_ids={"mc_event": last})


def pages_after(reports: list[tuple[dt.datetime, RasdaemonState]]) -> list[SignalValue]:
    memory: PageMemory | None = None
    signals: list[SignalValue] = []
    for now, state in reports:
        signals, memory = page_signals(Observations(rasdaemon=state), memory, now=now)
    return [s for s in signals if s.kind == "page_ce_count"]


def test_s1_a_replaced_dimms_page_counts_from_before_the_swap_do_not_reopen_its_ticket() -> None:
    """Ten errors on one page at 12:10-12:19, the DIMM swapped and its ticket resolved at 13:30, one error at
    14:10: the day's count is 11, the rule fires. Before: no `since`/`counted`, so the ticket reopened."""
    before = [T0 + dt.timedelta(minutes=10 + i) for i in range(10)]
    resolved = T0 + dt.timedelta(hours=1, minutes=30)
    (page,) = pages_after(
        [
            (T0 + 20 * MINUTE, page_errors(1, before)),
            (T0 + 2 * HOUR + 20 * MINUTE, page_errors(11, [T0 + 2 * HOUR + 10 * MINUTE])),
        ]
    )
    assert page.value == 11
    assert page.detail["since"] == (T0 + 10 * MINUTE).isoformat()  # the first error's own time
    stamp = int(T0.timestamp())  # each hour with its first and last error's times
    assert page.detail["counted"] == [
        [stamp, 10, stamp + 600, stamp + 1140],
        [stamp + 7200, 1, stamp + 7800, stamp + 7800],
    ]
    assert page.detail["counted_s"] == 3600
    assert held("page-ce-soft-offline", page, resolved)
    # the page keeps correcting after the swap: ten errors after the repair fire the rule alone
    again = [T0 + 2 * HOUR + dt.timedelta(minutes=30 + i) for i in range(10)]
    (returned,) = pages_after(
        [
            (T0 + 20 * MINUTE, page_errors(1, before)),
            (T0 + 2 * HOUR + 20 * MINUTE, page_errors(11, [T0 + 2 * HOUR + 10 * MINUTE])),
            (T0 + 2 * HOUR + 50 * MINUTE, page_errors(12, again)),
        ]
    )
    assert returned.value == 21
    assert not held("page-ce-soft-offline", returned, resolved)
    # and a ticket resolved before any of the page's errors is reopened as before
    assert counted_before_repair(Firing(RULES["page-ce-soft-offline"], page), T0 - HOUR) is None


# -- S2: heat ----------------------------------------------------------------------------


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


def test_s2_a_packages_throttling_before_an_airflow_repair_does_not_reopen_its_ticket() -> None:
    """Reports a minute apart: 90 s throttled in the minutes up to 12:04, the airflow fixed at 12:05, a quiet
    package after. The window's share is 15% (the rule asks 5%). Before: no counted span, the ticket reopened."""
    samples = [(T0 + i * MINUTE, 0, 0) for i in range(2)]
    samples += [(T0 + 2 * MINUTE, 1, 30_000), (T0 + 3 * MINUTE, 1, 60_000), (T0 + 4 * MINUTE, 2, 90_000)]
    samples += [(T0 + i * MINUTE, 2, 90_000) for i in range(5, 10)]
    percent = throttled(samples)
    assert percent.value == pytest.approx(15.0)
    assert percent.detail["counted_percent_of_s"] == 600
    assert percent.detail["since"] == T0.isoformat()
    assert [f for _, f in percent.detail["counted"]] == [0, 0.5, 0.5, 0.5, 0, 0, 0, 0, 0]
    assert held("cpu-package-throttling", percent, T0 + 5 * MINUTE)
    # throttled half of each minute after the repair: 60 s of the ten minutes, 10%: the fault is back
    hot_after = samples[:5] + [(T0 + i * MINUTE, 2 + i, 90_000 + (i - 4) * 30_000) for i in range(5, 8)]
    assert not held("cpu-package-throttling", throttled(hot_after), T0 + 5 * MINUTE)
    # 20 s after the repair is 3.3% of the ten minutes: not the rule's 5%, however short the part after it
    short_after = [*samples[:5], (T0 + 5 * MINUTE, 2, 90000), (T0 + 6 * MINUTE, 3, 110000)]
    assert held("cpu-package-throttling", throttled(short_after), T0 + 5 * MINUTE)


def test_s2_kernel_throttle_lines_before_an_airflow_repair_do_not_reopen_its_ticket() -> None:
    """Four throttle lines at 12:00-12:03, the repair at 12:30, one line at 12:40: four within the hour fire
    thermal-throttling. Before: kernel_event_count carried no span, so the airflow ticket reopened."""
    lines = [event("thermal_throttle", i, T0 + i * MINUTE, "CPU0") for i in range(1, 5)]
    _, memory = kernel_signals(kernel_log(*lines), None, now=T0 + 5 * MINUTE, boot_id="boot-1")
    after = event("thermal_throttle", 5, T0 + 40 * MINUTE, "CPU0")
    signals, _ = kernel_signals(kernel_log(after), memory, now=T0 + 41 * MINUTE, boot_id="boot-1")
    (count,) = [s for s in signals if s.kind == "kernel_event_count" and s.subject == "thermal_throttle"]
    assert count.value == 5
    assert count.detail["counted_s"] == 150  # the hour's window in 24 buckets
    assert held("thermal-throttling", count, T0 + 30 * MINUTE)
    assert not held("thermal-throttling", count, T0 - MINUTE)  # nothing before the repair: as before
    # other kinds carry no span: their counts are not recounted
    soft, _ = kernel_signals(kernel_log(event("soft_lockup", 9, T0, "CPU1")), None, now=T0, boot_id="boot-1")
    assert "counted" not in soft[0].detail


# -- S3: the straddling bucket, and the rule's detail conditions -------------------------


def link_downs(counted: list[list[int]]) -> SignalValue:
    detail = {"kind": "nic_link_down", "redundant": "False", "window_s": 86400, "counted_s": 3600}
    detail.update(since=dt.datetime.fromtimestamp(counted[0][0], dt.UTC).isoformat(), counted=counted)
    return SignalValue("device_event_count", "eth0", float(sum(n for _, n in counted)), detail)


def test_s3_the_bucket_the_resolve_falls_in_is_neither_lost_nor_counted_whole() -> None:
    """A bucket is stamped with its start and counts [t, t + counted_s). Eight downs in the hour 12:00-13:00,
    the repair resolved at 12:15: without the downs' own times, 0 to 8 of them came after it. Before: only
    buckets stamped at or after the resolve counted, so the hour was lost and it was held. (Spreading it
    evenly, the fix after that, was wrong both ways: the review of the counted spans, finding 2; its cases
    are in test_counted_review.py.)"""
    hour = int(T0.timestamp())
    signal = link_downs([[hour - 3600, 2], [hour, 8]])
    held = counted_before_repair(Firing(RULES["nic-link-flapping"], signal), T0 + 15 * MINUTE)
    assert held is not None
    assert held.detail["held"] == "uncertain"
    assert (held.detail["after_low"], held.detail["after_high"]) == (0, 8)
    # the hour wholly after the resolve: the fault is back
    assert counted_before_repair(Firing(RULES["nic-link-flapping"], signal), T0) is None
    # two downs in the straddling hour: even both after the resolve do not make the rule's three, held
    own = link_downs([[hour - 3600, 4], [hour, 2]])
    held = counted_before_repair(Firing(RULES["nic-link-flapping"], own), T0 + 50 * MINUTE)
    assert held is not None
    assert held.detail["held"] == "before the repair"


def crc_port(counted: list[list[int]], *, speed: int = 100_000) -> SignalValue:
    """nic_crc_error_rate as remediator/derive/network.py makes it: a 100 Gb/s port allows 360 an hour,
    so it is over its allowance from 1080."""
    total = sum(n for _, n in counted)
    detail = {
        "scope": "one-port",
        "rising": True,
        "over_allowance": True,
        "needed": 3,
        "ieee_allowance_per_hour": 360.0 if speed == 100_000 else 36.0,
        "last_hour": total,
        "since": dt.datetime.fromtimestamp(counted[0][0], dt.UTC).isoformat(),
        "counted": counted,
        "counted_s": 300,
    }
    return SignalValue("nic_crc_error_rate", "ens1f0", float(total), detail)


def test_s3_the_recount_is_judged_with_the_rules_detail_conditions() -> None:
    """3000 errors before an optic swap at 12:30, 150 after it in three buckets: 150 is over the rule's 100
    but not over the port's allowance (1080 at 100 Gb/s), so nic-crc-errors would not fire on it. Before:
    only the value was compared, so the ticket reopened."""
    start = int(T0.timestamp())
    before = [[start + i * 300, 1000] for i in range(3)]
    after = [[start + 2400 + i * 300, 50] for i in range(3)]
    resolved = T0 + 30 * MINUTE
    assert held("nic-crc-errors", crc_port(before + after), resolved)
    heavy = [[start + 2400 + i * 300, 400] for i in range(3)]  # 1200 after the swap: over its allowance
    assert not held("nic-crc-errors", crc_port(before + heavy), resolved)
    one_bucket = [[start + 2400, 1200]]  # over the allowance but in one bucket: not rising, held
    assert held("nic-crc-errors", crc_port(before + one_bucket), resolved)
    slow = [[start + 2400 + i * 300, 50] for i in range(3)]  # a 10 Gb/s port's floor is 108: 150 is over it
    assert not held("nic-crc-errors", crc_port(before + slow, speed=10_000), resolved)


def test_s3_every_ports_recount_is_the_smallest_ports_not_the_ports_added() -> None:
    """nic_errors_every_port's counted adds every port's buckets, its value is the smallest port's hour:
    two ports with 60 each after the repair are not 120 for the rule's 100. Before: the sum was compared."""
    start = int(T0.timestamp())
    counted = [[start + i * 300, 800] for i in range(3)] + [[start + 2400 + i * 300, 40] for i in range(3)]
    detail = {
        "ports": ["p0", "p1"],
        "over_allowance": True,
        "since": T0.isoformat(),
        "counted": counted,
        "counted_s": 300,
    }
    signal = SignalValue("nic_errors_every_port", "0000:3b:00", 1260.0, detail)
    assert held("nic-errors-every-port", signal, T0 + 30 * MINUTE)
    counted_more = counted[:3] + [[start + 2400 + i * 300, 150] for i in range(3)]  # 225 a port after it
    back = SignalValue("nic_errors_every_port", "0000:3b:00", 1425.0, {**detail, "counted": counted_more})
    # the sum alone bounds the smallest port from above only: added to the ticket, never reopened
    uncertain = counted_before_repair(Firing(RULES["nic-errors-every-port"], back), T0 + 30 * MINUTE)
    assert uncertain is not None
    assert uncertain.detail["held"] == "uncertain"
    own = [[start + i * 300, 400] for i in range(3)] + [[start + 2400 + i * 300, 75] for i in range(3)]
    ports = {"counted_ports": {"p0": own, "p1": own}, "port_floors": {"p0": 100.0, "p1": 100.0}}
    each = SignalValue("nic_errors_every_port", "0000:3b:00", 1425.0, {**detail, "counted": counted_more, **ports})
    assert not held("nic-errors-every-port", each, T0 + 30 * MINUTE)  # each port's own 225 after it


# -- S4: one part per rule ---------------------------------------------------------------

PACK = """\
version: 1
rules:
  - id: page-test
    description: test rule
    when: {signal: page_ce_count, op: ">=", value: 10}
    plan:
      - action: ticket
        params: {part_type: dimm, part: "{detail.dimm}"}
    escalation:
      - plan:
          - action: ticket
            params: {part_type: dimm, in_service: false}
"""


def test_s4_a_rule_whose_ticket_steps_name_different_parts_is_refused(tmp_path: Path) -> None:
    """named_part keys detections by the first ticket step's part: a later rung keyed by another part would
    open its ticket under a key its detections never reach. Before: the pack loaded."""
    path = tmp_path / "pack.yaml"
    path.write_text(PACK)
    with pytest.raises(RulePackError, match=rf"^{path}:3: rules\.0: .*ticket steps name different parts"):
        load_pack(path)
    path.write_text(PACK.replace("part_type: dimm, in_service: false", 'part_type: dimm, part: "{detail.host}"'))
    with pytest.raises(RulePackError, match=r"'\{detail\.dimm\}', '\{detail\.host\}'"):
        load_pack(path)
    path.write_text(PACK.replace("part_type: dimm, in_service: false", 'part_type: dimm, part: "{detail.dimm}"'))
    assert load_pack(path).rules[0].id == "page-test"  # the same part at every rung
