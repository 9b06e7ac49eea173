"""The network collector reads uplinks only (review S3), and which bond each is in (M4); our own sysfs
fixtures (tests/checker/fixtures/network/README.md: the corpus has no /sys/class/net tree)."""

from __future__ import annotations

from pathlib import Path

from bench.samples import SnapshotBuilder, listing_to_files, ours
from checker.collectors import network
from checker.collectors.context import CollectorState
from checker.cycle import run_cycle
from checker.parsers.kernel_events import match_line
from checker.schemas import KernelEventKind as K

NET = "/sys/class/net/"


def snapshot(tmp: Path, *extra: str) -> SnapshotBuilder:
    b = SnapshotBuilder(tmp / "snap").boot()
    b.files(NET, listing_to_files(ours("network/sysfs-net-mlx5-two-ports.txt"), NET))
    for listing in extra:
        b.files(NET, listing_to_files(listing, NET))
    b.command(["ethtool", "-S", "ens1f0np0"], ours("network/ethtool-S-mlx5-connectx6dx.txt"))
    b.command(["ethtool", "-S", "ens1f1np1"], "NIC statistics:\n     rx_crc_errors_phy: 0\n")
    return b


def collect(b: SnapshotBuilder):  # type: ignore[no-untyped-def]
    report = run_cycle(b.host(), collectors={"network": network.collect}, state=CollectorState())
    return report.collectors["network"], report.observations.network


def test_vf_representor_bmc_usb_nic_and_infiniband_are_not_uplinks(tmp_path: Path) -> None:
    run, state = collect(snapshot(tmp_path, ours("network/sysfs-net-not-uplinks.txt")))
    assert run.status == "ok"
    assert state is not None
    assert [p.interface for p in state.ports] == ["ens1f0np0", "ens1f1np1"]
    assert [p.master for p in state.ports] == ["bond0", "bond0"]
    assert state.skipped == []


def test_sixty_four_vfs_never_push_the_second_uplink_out(tmp_path: Path) -> None:
    """ens1f0v0 … v63 sort before ens1f1np1: before, the cap of 32 took VFs and dropped the uplink."""
    vf = ours("network/sysfs-net-not-uplinks.txt").split(f"{NET}eth0/")[0]
    many = "".join(vf.replace("ens1f0v0", f"ens1f0v{n}") for n in range(64))
    run, state = collect(snapshot(tmp_path, many))
    assert state is not None
    assert [p.interface for p in state.ports] == ["ens1f0np0", "ens1f1np1"]
    assert state.skipped == []
    assert not any("more than" in p for p in run.problems)


def test_a_host_with_only_a_bmc_usb_nic_is_unavailable(tmp_path: Path) -> None:
    b = SnapshotBuilder(tmp_path / "snap").boot()
    bmc = ours("network/sysfs-net-not-uplinks.txt").split(f"{NET}enp0s20f0u1u6/")
    b.files(NET, listing_to_files(f"{NET}enp0s20f0u1u6/" + bmc[1].split(f"{NET}ib0/")[0], NET))
    run, _ = collect(b)
    assert run.status == "unavailable"


def test_link_down_wordings_of_mlx5_tg3_and_mlx4_and_not_pciehp() -> None:
    """Review S6: 'Link is Down' alone missed mlx5's 'Link down', tg3's 'Link is down.', mlx4's 'Link Down'."""
    lines = {
        "mlx5_core 0000:3b:00.0 ens1f0np0: Link down": "ens1f0np0",
        "tg3 0000:02:00.0 eth0: Link is down.": "eth0",
        "mlx4_en: eth1: Link Down": "eth1",
        "ixgbe 0000:01:00.0 eth2: NIC Link is Down": "eth2",
    }
    for line, iface in lines.items():
        hit = match_line(line)
        assert hit is not None, line
        rule, match = hit
        assert (rule.kind, match.group("iface")) == (K.nic_link_down, iface), line
    for line in ("pcieport 0000:00:1c.0: pciehp: Slot(1): Link Down", "pcieport 0000:00:03.0: PCIe Link down"):
        hit = match_line(line)
        assert hit is None or hit[0].kind != K.nic_link_down, line
