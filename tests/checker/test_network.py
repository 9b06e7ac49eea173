"""The network collector and its parsers, on the project's own fixtures in the real tools' formats
(tests/checker/fixtures/network/README.md: the corpus has no `ethtool -S`, `lldpctl` or /sys/class/net),
and on the corpus's real `ethtool -i` for the NIC's firmware."""

from __future__ import annotations

from pathlib import Path

from bench.samples import OURS, SnapshotBuilder, listing_to_files, ours, sample
from checker.collectors import network
from checker.collectors.context import CollectorState
from checker.cycle import run_cycle
from checker.parsers.network import (
    CRC_COUNTERS,
    LINK_DOWN_COUNTERS,
    SYMBOL_COUNTERS,
    first_of,
    parse_ethtool_stats,
    parse_lldpctl_json,
    port_counters,
)

NET = "network/"


def lldp(name: str) -> str:
    return (OURS / "network" / name).read_text(encoding="utf-8")


def test_mlx5_counters_pick_the_phy_crc_symbol_and_link_down_counts() -> None:
    parsed = parse_ethtool_stats(ours(NET + "ethtool-S-mlx5-connectx6dx.txt"))
    assert parsed.problems == []
    counters = parsed.value
    assert first_of(CRC_COUNTERS, counters) == ("rx_crc_errors_phy", 1843)
    assert first_of(SYMBOL_COUNTERS, counters) == ("rx_symbol_err_phy", 2907)
    assert first_of(LINK_DOWN_COUNTERS, counters) == ("link_down_events_phy", 2)
    kept = port_counters(counters)
    assert list(kept)[:3] == ["rx_crc_errors_phy", "rx_symbol_err_phy", "rx_pcs_symbol_err_phy"]
    assert "rx_discards_phy" in kept
    assert "rx_out_of_buffer" not in kept
    assert not any(name.startswith(("rx0_", "tx0_", "ch0_")) or "prio" in name for name in kept)  # per queue


def test_ice_and_bnxt_names() -> None:
    ice = parse_ethtool_stats(ours(NET + "ethtool-S-ice-e810.txt"))
    assert ice.problems == []
    assert first_of(CRC_COUNTERS, ice.value) == ("rx_crc_errors.nic", 0)
    assert "tx_queue_0_packets" not in port_counters(ice.value)
    bnxt = parse_ethtool_stats(ours(NET + "ethtool-S-bnxt-p2100g.txt"))
    assert bnxt.problems == []  # the "[0]: " per-ring lines are read too
    assert bnxt.value["[0]: rx_discards"] == 0
    assert first_of(CRC_COUNTERS, bnxt.value) == ("rx_fcs_err_frames", 311)
    assert first_of(SYMBOL_COUNTERS, bnxt.value) is None  # rx_pcs_symbol_err: pre- or post-FEC unknown (S9)
    assert port_counters(bnxt.value)["rx_pcs_symbol_err"] == 95  # kept as evidence
    assert first_of(LINK_DOWN_COUNTERS, bnxt.value) == ("link_down_events", 5)
    assert not any(name.startswith("[") for name in port_counters(bnxt.value))


def test_ethtool_without_statistics_is_a_problem_not_a_crash() -> None:
    parsed = parse_ethtool_stats("no stats available\n")
    assert parsed.value == {}
    assert parsed.problems


def test_lldpctl_list_form_with_sysnames() -> None:
    parsed = parse_lldpctl_json(lldp("lldpctl-json-two-ports.json"))
    assert parsed.problems == []
    first, second = parsed.value["ens1f0np0"], parsed.value["ens1f1np1"]
    assert (first.chassis, first.port, first.mgmt_ip) == ("ams1-r07-tor1", "Ethernet12", "10.40.7.1")
    assert (second.chassis, second.port, second.chassis_id) == ("ams1-r07-tor2", "Ethernet12", "b8:59:9f:3a:20:00")


def test_lldpctl_object_form_without_sysname_takes_the_port_from_its_description() -> None:
    parsed = parse_lldpctl_json(lldp("lldpctl-json-one-port-no-sysname.json"))
    (neighbor,) = parsed.value.values()
    assert parsed.value.keys() == {"eno1"}
    assert (neighbor.chassis, neighbor.chassis_id, neighbor.port) == (None, "00:1c:73:ee:c0:46", "Ethernet13/1")
    assert parse_lldpctl_json("{}").problems
    assert parse_lldpctl_json('{"lldp": {}}').value == {}


def net_snapshot(tmp: Path, *, lldpctl: bool = True, ethtool: bool = True) -> SnapshotBuilder:
    b = SnapshotBuilder(tmp / "snap").boot()
    b.files("/sys/class/net/", listing_to_files(ours(NET + "sysfs-net-mlx5-two-ports.txt"), "/sys/class/net/"))
    if ethtool:
        b.command(["ethtool", "-S", "ens1f0np0"], ours(NET + "ethtool-S-mlx5-connectx6dx.txt"))
        b.command(["ethtool", "-S", "ens1f1np1"], "NIC statistics:\n     rx_crc_errors_phy: 0\n")
    if lldpctl:
        b.command(["lldpctl", "-f", "json"], lldp("lldpctl-json-two-ports.json"))
    return b


def test_collector_reads_physical_ports_their_counters_and_switch_ports(tmp_path: Path) -> None:
    report = run_cycle(net_snapshot(tmp_path).host(), collectors={"network": network.collect}, state=CollectorState())
    run = report.collectors["network"]
    assert (run.status, run.source) == ("ok", "sysfs+ethtool")
    state = report.observations.network
    assert state is not None
    assert state.lldp_source == "lldpctl"
    assert state.ethtool
    assert [p.interface for p in state.ports] == ["ens1f0np0", "ens1f1np1"]  # lo, bond0, docker0: virtual
    port = state.ports[0]
    assert (port.driver, port.bus_info, port.speed_mbps, port.carrier) == ("mlx5_core", "0000:3b:00.0", 25000, True)
    assert (port.carrier_changes, port.carrier_down_count) == (4, 2)
    assert port.statistics["rx_crc_errors"] == 1843
    assert port.statistics["rx_missed_errors"] == 1207
    assert port.driver_counters["rx_symbol_err_phy"] == 2907
    assert port.lldp is not None
    assert (port.lldp.chassis, port.lldp.port) == ("ams1-r07-tor1", "Ethernet12")


def test_without_lldpd_or_ethtool_the_section_says_why(tmp_path: Path) -> None:
    host = net_snapshot(tmp_path, lldpctl=False, ethtool=False).host()
    report = run_cycle(host, collectors={"network": network.collect}, state=CollectorState())
    state = report.observations.network
    assert state is not None
    assert report.collectors["network"].source == "sysfs"
    assert state.lldp_missing == "lldpctl not installed (lldpd): the switch port is not known"
    assert not state.ethtool
    assert state.ports[0].driver_counters == {}
    assert any("ethtool" in p for p in report.collectors["network"].problems)


def test_a_host_without_physical_ports_is_unavailable(tmp_path: Path) -> None:
    b = SnapshotBuilder(tmp_path / "snap").boot()
    b.file("/sys/class/net/lo/operstate", "unknown\n")
    report = run_cycle(b.host(), collectors={"network": network.collect}, state=CollectorState())
    run = report.collectors["network"]
    assert run.status == "unavailable"
    assert "no physical network interface" in (run.reason or "")


def test_the_identity_collector_gives_the_nic_firmware_the_ticket_names(tmp_path: Path) -> None:
    """The real `ethtool -i` (e1000e) beside the network section: the deriver joins them by interface."""
    from checker.parsers.firmware import parse_ethtool_driver

    nic = parse_ethtool_driver(sample("firmware/ethtool-i-eth0-e1000e.txt"), "eth0").value
    assert nic is not None
    assert (nic.firmware, nic.bus_info) == ("0.5-4", "0000:00:1f.6")
