"""remediator/derive/network.py after the review of the network class: each test names the finding it
covers, and fails on the code before the fix (which counted differently, said in each)."""

from __future__ import annotations

import datetime as dt
from typing import Any

from checker.schemas import LldpNeighbor, NetworkState, NicPort
from remediator.derive.network import NetMemory, network_signals
from remediator.evaluate import Firing
from remediator.repairs import counted_before_repair
from remediator.rules import load_ruleset
from remediator.signals import SignalValue

T0 = dt.datetime(2026, 9, 1, 8, 0, tzinfo=dt.UTC)
RULES = {rule.id: rule for rule in load_ruleset([]).rules}


def port(
    name: str,
    bus: str,
    *,
    crc: int = 0,
    downs: int = 0,
    speed: int = 10000,
    up: bool = True,
    master: str | None = None,
    driver_counters: dict[str, int] | None = None,
) -> NicPort:
    return NicPort(
        interface=name,
        physical=True,
        operstate="up" if up else "down",
        carrier=up,
        speed_mbps=speed,
        driver="mlx5_core",
        bus_info=bus,
        carrier_changes=2 * downs,
        carrier_down_count=downs,
        master=master,
        statistics={"rx_crc_errors": crc},
        driver_counters=driver_counters or {},
        lldp=LldpNeighbor(chassis="tor1", port=f"Ethernet{bus[-1]}"),
    )


def run(states: list[tuple[float, list[NicPort]]], **kw: Any) -> list[list[SignalValue]]:
    """Reports at the given seconds after T0; each report's signals."""
    memory: NetMemory | None = None
    out = []
    for seconds, ports in states:
        now = T0 + dt.timedelta(seconds=seconds)
        signals, memory = network_signals(NetworkState(ports=ports), None, memory, now=now, boot_id="b1", **kw)
        out.append(signals)
    return out


def fires(rule_id: str, signal: SignalValue) -> bool:
    rule = RULES[rule_id]
    return rule.when.matches(signal) and rule.when.holds(signal.value)


def test_m1_a_repairs_own_link_down_and_training_errors_do_not_count() -> None:
    """40 errors every 10 min and a down every 20 min; the swap at minute 70 leaves 3 training errors and
    one down. Before: nic_crc_error_rate 163, rising, and nic_link_flaps 4 on the report after the swap."""
    states = []
    crc = downs = 0
    for minute in range(0, 70, 10):
        crc += 40
        downs += 1 if minute % 20 == 0 and minute else 0
        states.append((minute * 60.0, [port("p0", "0000:3b:00.0", crc=crc, downs=downs)]))
    states.append((75 * 60.0, [port("p0", "0000:3b:00.0", crc=crc + 3, downs=downs + 1)]))
    states.append((80 * 60.0, [port("p0", "0000:3b:00.0", crc=crc + 3, downs=downs + 1)]))
    after_swap, later = run(states)[-2:]
    assert [s.kind for s in after_swap if s.kind == "nic_crc_error_rate"] == []
    assert later == []
    (flaps,) = [s for s in after_swap if s.kind == "nic_link_flaps"]
    assert flaps.value == 4  # the day's downs, the repair's one with them ...
    assert flaps.detail["since"] == (T0 + dt.timedelta(minutes=20)).isoformat()  # ... since the first
    assert [n for _, n in flaps.detail["counted"]] == [1, 1, 1, 1]


def test_m1_evidence_counted_before_the_repair_does_not_reopen_its_ticket() -> None:
    """route_detection's test: before, any firing while verifying reopened the ticket ('fault returned')."""
    resolved = T0 + dt.timedelta(minutes=72)
    stamp = int(T0.timestamp())
    old = [[stamp + 20 * 60, 1], [stamp + 40 * 60, 1], [stamp + 60 * 60, 1], [stamp + 75 * 60, 1]]
    detail = {"redundant": False, "since": (T0 + dt.timedelta(minutes=20)).isoformat(), "counted": old}
    firing = Firing(RULES["nic-carrier-flapping"], SignalValue("nic_link_flaps", "p0", 4.0, detail))
    assert counted_before_repair(firing, resolved) is not None  # one down after the repair: held, no reopen
    again = [*old, [stamp + 90 * 60, 1], [stamp + 100 * 60, 1]]
    returned = Firing(
        RULES["nic-carrier-flapping"], SignalValue("nic_link_flaps", "p0", 6.0, {**detail, "counted": again})
    )
    assert counted_before_repair(returned, resolved) is None  # three after it: the fault is back
    fresh = {**detail, "since": (resolved + dt.timedelta(minutes=1)).isoformat()}
    assert counted_before_repair(Firing(firing.rule, SignalValue("nic_link_flaps", "p0", 3.0, fresh)), resolved) is None


def uneven(rate_per_hour: float, seconds: int, step_s: int, seed: int) -> list[int]:
    """A cumulative count at each report: errors arrive unevenly (some reports get none)."""
    total, counts, carry = 0, [], 0.0
    for i in range(seconds // step_s + 1):
        carry += rate_per_hour * step_s / 3600
        if (i * 7 + seed) % 5 == 0:  # one report in five sees nothing; its share comes with the next
            counts.append(total)
            continue
        total += int(carry)
        carry -= int(carry)
        counts.append(total)
    return counts


def test_m2_two_ports_at_150_an_hour_with_uneven_arrival_never_look_like_one_port() -> None:
    """60 s reports, 3 h. Before: on reports where one port saw no new error the other was 'one-port', so
    nic-crc-errors fired beside nic-errors-every-port."""
    p0, p1 = uneven(150, 3 * 3600, 60, 0), uneven(150, 3 * 3600, 60, 3)
    states = [
        (i * 60.0, [port("p0", "0000:3b:00.0", crc=a), port("p1", "0000:3b:00.1", crc=b)])
        for i, (a, b) in enumerate(zip(p0, p1, strict=True))
    ]
    reports = run(states)
    assert not any(fires("nic-crc-errors", s) for signals in reports for s in signals)
    assert any(fires("nic-errors-every-port", s) for signals in reports[70:] for s in signals)


def test_m3_reports_half_an_hour_apart_still_see_a_steady_stream() -> None:
    """400 an hour, 1800 s reports: before, 'rising' needed 3 five-minute buckets an hour, and half-hourly
    reports fill at most 2, so no rule ever fired."""
    one = run([(i * 1800.0, [port("p0", "0000:3b:00.0", crc=200 * i), port("p1", "0000:3b:00.1")]) for i in range(5)])
    (crc,) = [s for s in one[-1] if s.kind == "nic_crc_error_rate"]
    assert (crc.value, crc.detail["rising"], crc.detail["needed"]) == (400.0, True, 2)
    assert fires("nic-crc-errors", crc)
    both = run([(i * 1800.0, [port("p0", "0000:3b:00.0", crc=200 * i), port("p1", "0000:3b:00.1", crc=200 * i)])
                for i in range(5)])  # fmt: skip
    assert any(fires("nic-errors-every-port", s) for s in both[-1])
    hourly = run([(i * 3600.0, [port("p0", "0000:3b:00.0", crc=400 * i)]) for i in range(3)])
    (crc,) = [s for s in hourly[-1] if s.kind == "nic_crc_error_rate"]
    assert (crc.value, crc.detail["needed"], crc.detail["rising"]) == (400.0, 1, True)


def test_m3_a_single_burst_at_ten_minute_reports_is_still_no_stream() -> None:
    states = [(0.0, [port("p0", "0000:3b:00.0")]), (600.0, [port("p0", "0000:3b:00.0", crc=500)])]
    states += [(600.0 * i, [port("p0", "0000:3b:00.0", crc=500)]) for i in range(2, 6)]
    (crc,) = [s for s in run(states)[1] if s.kind == "nic_crc_error_rate"]
    assert (crc.detail["rising"], crc.detail["needed"]) == (False, 3)


def test_s1_a_symbol_error_is_not_counted_again_beside_its_fcs_error() -> None:
    """mlx5 counts a frame with a symbol error in rx_symbol_err_phy and rx_crc_errors_phy: before, both
    were added (100 here)."""

    def p(n: int) -> NicPort:
        return port("p0", "0000:3b:00.0", driver_counters={"rx_crc_errors_phy": 50 * n, "rx_symbol_err_phy": 50 * n})

    (crc,) = [s for s in run([(0.0, [p(0)]), (600.0, [p(1)])])[1] if s.kind == "nic_crc_error_rate"]
    assert (crc.detail["new"], crc.detail["crc"], crc.detail["symbol"]) == (50, 50, 50)


def test_s2_a_compliant_100g_port_under_its_allowance_does_not_fire() -> None:
    """300 an hour at 100 Gb/s is within 1e-12 at line rate (360): before, the rule fired at 100."""
    states = [(i * 600.0, [port("p0", "0000:3b:00.0", crc=50 * i, speed=100_000)]) for i in range(7)]
    (crc,) = [s for s in run(states)[-1] if s.kind == "nic_crc_error_rate"]
    assert (crc.value, crc.detail["rising"], crc.detail["ieee_allowance_per_hour"]) == (300.0, True, 360.0)
    assert crc.detail["over_allowance"] is False
    assert not fires("nic-crc-errors", crc)
    fast = [(i * 600.0, [port("p0", "0000:3b:00.0", crc=50 * i, speed=400_000)]) for i in range(7)]
    (crc,) = [s for s in run(fast)[-1] if s.kind == "nic_crc_error_rate"]
    assert crc.detail["ieee_allowance_per_hour"] == 144.0  # 1e-13 at 400 Gb/s (802.3bs)
    assert crc.detail["over_allowance"] is False  # 300 < 3 x 144


def test_s3_a_linked_port_without_an_fcs_counter_does_not_hide_every_port() -> None:
    """A VF or BMC NIC that slipped into the report (no FCS counter): before, it counted as a linked port
    that was not rising, so two erring ports were never 'every port'."""
    bmc = NicPort(interface="usb0", physical=True, operstate="up", carrier=True, driver="cdc_ether")
    states = [
        (i * 600.0, [port("p0", "0000:3b:00.0", crc=60 * i), port("p1", "0000:3b:00.1", crc=60 * i), bmc])
        for i in range(7)
    ]
    assert any(fires("nic-errors-every-port", s) for s in run(states)[-1])


def test_s5_mtu_or_ring_changes_count_in_carrier_down_count_but_not_at_the_phy() -> None:
    """Three carrier downs the PHY did not see (MTU, ring or channel changes): before, carrier_down_count
    came first and made three flaps."""

    def p(downs: int) -> NicPort:
        return port("p0", "0000:3b:00.0", downs=downs, driver_counters={"link_down_events_phy": 2})

    assert [s for signals in run([(i * 600.0, [p(i)]) for i in range(4)]) for s in signals] == []


def test_s5_downs_in_a_report_with_a_transmit_timeout_are_the_drivers_reset() -> None:
    states = [(i * 600.0, [port("p0", "0000:3b:00.0", downs=i)]) for i in range(4)]
    assert [s for signals in run(states, tx_timeouts={"p0"}) for s in signals if s.kind == "nic_link_flaps"] == []
    assert [s.value for s in run(states)[-1] if s.kind == "nic_link_flaps"] == [3.0]


def test_m4_a_flapping_port_says_whether_the_host_keeps_another_link() -> None:
    def two(i: int) -> list[NicPort]:  # an active-backup bond: the agent reads its mode (second review, 3)
        return [
            port("p0", "0000:3b:00.0", downs=i, master="bond0").model_copy(update={"bond_mode": "active-backup"}),
            port("p1", "0000:3b:00.1", master="bond0").model_copy(update={"bond_mode": "active-backup"}),
        ]

    (flaps,) = [s for s in run([(i * 600.0, two(i)) for i in range(4)])[-1] if s.kind == "nic_link_flaps"]
    assert (flaps.detail["redundant"], flaps.detail["bond"], flaps.detail["bond_partners_linked"]) == (
        True,
        "bond0",
        ["p1"],
    )
    assert fires("nic-carrier-flapping-redundant", flaps)
    assert not fires("nic-carrier-flapping", flaps)

    # a bond member whose partner is down is not backed up by a linked port of another network
    def partner_down(i: int) -> list[NicPort]:
        return [
            port("p0", "0000:3b:00.0", downs=i, master="bond0"),
            port("p1", "0000:3b:00.1", master="bond0", up=False),
            port("eno1", "0000:01:00.0"),
        ]

    (flaps,) = [s for s in run([(i * 600.0, partner_down(i)) for i in range(4)])[-1] if s.kind == "nic_link_flaps"]
    assert (flaps.detail["redundant"], flaps.detail["bond_partners_linked"], flaps.detail["other_linked"]) == (
        False,
        [],
        ["eno1"],
    )
    assert fires("nic-carrier-flapping", flaps)
    assert not fires("nic-carrier-flapping-redundant", flaps)
    alone = run([(i * 600.0, [port("p0", "0000:3b:00.0", downs=i)]) for i in range(4)])[-1]
    (flaps,) = [s for s in alone if s.kind == "nic_link_flaps"]
    assert flaps.detail["redundant"] is False
    assert fires("nic-carrier-flapping", flaps)
    assert not fires("nic-carrier-flapping-redundant", flaps)
