"""remediator/derive/network.py: rates over buckets, resets (reboot, driver reload, gaps), the every-port case."""

from __future__ import annotations

import datetime as dt

from checker.schemas import LldpNeighbor, NetworkState, NicPort
from remediator.derive.network import NetMemory, network_signals

T0 = dt.datetime(2026, 9, 1, 8, 0, tzinfo=dt.UTC)
BOOT = "b1"


def port(name: str, bus: str, *, crc: int = 0, downs: int = 0, drops: int = 0, up: bool = True) -> NicPort:
    return NicPort(
        interface=name,
        physical=True,
        operstate="up" if up else "down",
        carrier=up,
        speed_mbps=25000,
        driver="mlx5_core",
        bus_info=bus,
        carrier_changes=2 * downs,
        carrier_down_count=downs,
        statistics={"rx_crc_errors": crc, "rx_dropped": drops},
        lldp=LldpNeighbor(chassis="tor1", port=f"Ethernet{bus[-1]}"),
    )


def run(
    states: list[list[NicPort]], *, step_min: int = 10, boots: list[str] | None = None
) -> list[tuple[list, NetMemory | None]]:
    memory: NetMemory | None = None
    out = []
    for i, ports in enumerate(states):
        boot = boots[i] if boots else BOOT
        now = T0 + dt.timedelta(minutes=step_min * i)
        signals, memory = network_signals(NetworkState(ports=ports), None, memory, now=now, boot_id=boot)
        out.append((signals, memory))
    return out


def kinds(signals: list) -> list[tuple[str, str]]:
    return [(s.kind, s.subject) for s in signals]


def test_first_report_is_a_baseline_and_errors_become_an_hourly_count() -> None:
    steps = run([[port("p0", "0000:3b:00.0", crc=1000 + 40 * n)] for n in range(7)])
    assert steps[0][0] == []  # nothing to compare with
    last = {s.kind: s for s in steps[-1][0]}
    crc = last["nic_crc_error_rate"]
    assert crc.subject == "p0"
    assert crc.value == 240  # six intervals of 40 in the last hour
    assert crc.detail["rising"] is True
    assert crc.detail["scope"] == "one-port"
    assert crc.detail["per_hour"] == 240.0
    assert crc.detail["where"] == "mlx5_core 0000:3b:00.0, switch tor1 port Ethernet0"
    assert crc.detail["ieee_allowance_per_hour"] == 90.0
    assert crc.detail["over_allowance"] is False  # 240 an hour at 25 Gb/s: under three times the allowance


def test_a_reboot_or_a_driver_reload_is_a_new_baseline_never_a_rate() -> None:
    high, low = port("p0", "0000:3b:00.0", crc=5000), port("p0", "0000:3b:00.0", crc=10)
    rebooted = run([[high], [low]], boots=["b1", "b2"])
    assert rebooted[1][0] == []
    reloaded = run([[high], [low]])
    assert kinds(reloaded[1][0]) == [("counter_reset", "p0")]
    assert reloaded[1][1] is not None
    assert reloaded[1][1].ports["p0"][0] == 10  # the new baseline
    gap = run([[high], [port("p0", "0000:3b:00.0", crc=9000)]], step_min=7 * 60)
    assert gap[1][0] == []  # seven hours: no rate across the gap


def test_every_port_rising_at_once_points_at_the_nic() -> None:
    states = [[port("p0", "0000:3b:00.0", crc=60 * n), port("p1", "0000:3b:00.1", crc=50 * n)] for n in range(7)]
    signals = run(states)[-1][0]
    assert {s.detail["scope"] for s in signals if s.kind == "nic_crc_error_rate"} == {"every-port"}
    (every,) = [s for s in signals if s.kind == "nic_errors_every_port"]
    assert (every.subject, every.value) == ("0000:3b:00", 300.0)
    assert every.detail["over_allowance"] is True
    assert every.detail["one_nic"] is True
    assert every.detail["candidates"][0].startswith("the NIC at 0000:3b:00")
    assert "the switch tor1: every port goes to it" in every.detail["candidates"]
    assert every.detail["where"] == "mlx5_core 0000:3b:00: p0, p1; switch tor1"


def test_a_port_without_link_does_not_make_the_other_one_every_port() -> None:
    states = [[port("p0", "0000:3b:00.0", crc=40 * n), port("p1", "0000:3b:00.1", up=False)] for n in range(7)]
    signals = run(states)[-1][0]
    assert [s.detail["scope"] for s in signals if s.kind == "nic_crc_error_rate"] == ["one-port"]
    assert "nic_errors_every_port" not in [s.kind for s in signals]


def test_flaps_count_over_a_day_and_drops_are_a_rate() -> None:
    states = [[port("p0", "0000:3b:00.0", downs=n, drops=5000 * n)] for n in range(4)]
    steps = run(states, step_min=60)
    flaps = [s for s in steps[-1][0] if s.kind == "nic_link_flaps"]
    assert [(s.value, s.detail["new"]) for s in flaps] == [(3.0, 1)]
    drops = [s for s in steps[-1][0] if s.kind == "nic_drop_rate"]
    assert [s.value for s in drops] == [5000.0]
    quiet = run([[port("p0", "0000:3b:00.0", drops=100 * n)] for n in range(3)], step_min=60)
    assert [s.kind for s in quiet[-1][0]] == []  # 100 an hour: below the floor of one a second
    later = run([*states, [port("p0", "0000:3b:00.0", downs=4, drops=30000)]], step_min=60 * 8)
    assert [s.value for s in later[-1][0] if s.kind == "nic_link_flaps"] == []  # 8 h: a gap, no delta


def test_carrier_changes_alone_count_half() -> None:
    def old_kernel(changes: int) -> NicPort:
        return port("p0", "0000:3b:00.0").model_copy(update={"carrier_down_count": None, "carrier_changes": changes})

    steps = run([[old_kernel(4)], [old_kernel(6)], [old_kernel(8)]])
    assert [s.value for s in steps[-1][0] if s.kind == "nic_link_flaps"] == [2.0]


def test_a_counter_source_that_changes_is_a_new_baseline() -> None:
    """ethtool answered once and not the next time: the PHY's count, then the kernel's, never subtracted."""
    with_phy = port("p0", "0000:3b:00.0", crc=10).model_copy(update={"driver_counters": {"rx_crc_errors_phy": 900}})
    steps = run([[with_phy], [port("p0", "0000:3b:00.0", crc=10)], [port("p0", "0000:3b:00.0", crc=50)]])
    assert steps[1][0] == []  # no counter_reset for 900 -> 10: another counter
    assert [(s.kind, s.detail["new"]) for s in steps[2][0]] == [("nic_crc_error_rate", 40)]
