"""The thermal-throttle collector on the corpus's real sysfs session, and the rate the centre derives."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

from bench.samples import SnapshotBuilder, sample
from checker.collectors.context import CollectorState
from checker.schemas import CollectorStatus, ThermalThrottle, ThrottlePackage
from remediator.derive.heat import throttle_signals
from tests.checker.throttle_tree import SESSION, install, session_files

T0 = dt.datetime(2026, 11, 20, 10, 0, tzinfo=dt.UTC)


def test_the_real_session_gives_its_counters() -> None:
    files = session_files(sample(SESSION))
    assert files["/sys/devices/system/cpu/cpu0/thermal_throttle/package_power_limit_count"] == "8\n"
    assert len(files) == 4


def test_one_cpu_per_package_is_read(tmp_path: Path) -> None:
    snap = SnapshotBuilder(tmp_path)
    install(snap, packages=2)
    report = snap.cycle(CollectorState())
    assert report.collectors["thermal_throttle"].status == CollectorStatus.ok
    section = report.observations.thermal_throttle
    assert section is not None
    assert [(p.package, p.cpu) for p in section.packages] == [(0, 0), (1, 1)]
    first = section.packages[0]
    # Linux 3.2: no total-time files; power-limit notifications counted apart (they are no heat)
    assert (first.package_throttle_count, first.core_throttle_count) == (0, 0)
    assert first.package_throttle_total_time_ms is None
    assert first.package_power_limit_count == 8


def test_no_thermal_throttle_files_is_unavailable(tmp_path: Path) -> None:
    snap = SnapshotBuilder(tmp_path)
    snap.file("/sys/devices/system/cpu/online", "0\n")
    report = snap.cycle(CollectorState())
    run = report.collectors["thermal_throttle"]
    assert run.status == CollectorStatus.unavailable
    assert "thermal_throttle" in (run.reason or "")


def _state(count: int, total_ms: int | None, power: int = 8) -> ThermalThrottle:
    return ThermalThrottle(
        packages=[
            ThrottlePackage(
                package=0,
                cpu=0,
                package_throttle_count=count,
                package_throttle_total_time_ms=total_ms,
                package_power_limit_count=power,
            )
        ]
    )


def test_time_throttled_is_a_share_of_the_window() -> None:
    found, kept = throttle_signals(_state(10, 1000), None, now=T0, boot="b1")
    assert found == []
    assert kept is not None
    later = T0 + dt.timedelta(seconds=60)
    found, kept = throttle_signals(_state(16, 19000), kept, now=later, boot="b1")
    by_kind = {s.kind: s for s in found}
    assert by_kind["cpu_throttle_percent"].subject == "package 0"
    assert by_kind["cpu_throttle_percent"].value == 3.0  # 18 s of the ten-minute window (a minute of history)
    assert by_kind["cpu_throttle_events"].value == 36.0  # six episodes within the window, per hour
    assert by_kind["cpu_throttle_percent"].detail["source"] == "/sys/devices/system/cpu/cpu0/thermal_throttle"


def test_one_long_episode_shows_when_it_ends_and_stays_in_the_window() -> None:
    """Before: `for: 10m` on a per-report share. A package held at its limit for an hour moves neither
    counter (therm_throt.c times an episode when it ends, counts it when it starts): nothing for an hour,
    then one report at 100%, which a rule holding for ten minutes never saw. Now the window keeps it."""
    memory = throttle_signals(_state(10, 1000), None, now=T0, boot="b1")[1]
    for minute in range(1, 61):  # the episode began at minute 1: the count moved, the time did not
        found, memory = throttle_signals(_state(11, 1000), memory, now=T0 + dt.timedelta(minutes=minute), boot="b1")
        assert [s.kind for s in found] == ([] if minute > 11 else ["cpu_throttle_events"])
        if found:
            assert found[0].detail["open_episode"] is True
    ended = T0 + dt.timedelta(minutes=61)
    found, memory = throttle_signals(_state(11, 1000 + 3_600_000), memory, now=ended, boot="b1")
    (share,) = [s for s in found if s.kind == "cpu_throttle_percent"]
    assert share.value == 100.0
    assert share.detail["exceeds_window"] is True
    for minute in range(62, 71):  # still within the window for the next reports
        found, memory = throttle_signals(
            _state(11, 1000 + 3_600_000), memory, now=T0 + dt.timedelta(minutes=minute), boot="b1"
        )
        assert [s.value for s in found if s.kind == "cpu_throttle_percent"] == [100.0]


def test_short_episodes_are_a_share_of_ten_minutes() -> None:
    memory = throttle_signals(_state(0, 0), None, now=T0, boot="b1")[1]
    shares = []
    for minute in range(1, 21):  # 3 s throttled a minute: 5% of the time
        found, memory = throttle_signals(
            _state(minute, 3000 * minute), memory, now=T0 + dt.timedelta(minutes=minute), boot="b1"
        )
        shares += [round(s.value, 2) for s in found if s.kind == "cpu_throttle_percent"]
    assert shares[0] == 0.5  # one minute of history: a lower bound over the whole window
    assert shares[-1] == 5.0  # a full window: 30 s of 600


def test_power_limits_a_reboot_and_a_reset_say_nothing() -> None:
    _, kept = throttle_signals(_state(10, 1000), None, now=T0, boot="b1")
    later = T0 + dt.timedelta(seconds=60)
    assert throttle_signals(_state(10, 1000, power=50), kept, now=later, boot="b1")[0] == []
    assert throttle_signals(_state(12, 9000), kept, now=later, boot="b2")[0] == []  # a new boot: a baseline
    assert throttle_signals(_state(3, 10), kept, now=later, boot="b1")[0] == []  # went down: no delta


def test_a_lost_power_redundancy_names_the_psus_to_check() -> None:
    from bench.samples import sample as real
    from checker.parsers.ipmi import parse_sdr
    from remediator.derive.heat import name_psus
    from remediator.signals import SignalValue

    # the real Supermicro sensor list: PS1 Status and PS2 Status, both reading (discrete 0x0100: presence)
    listing = parse_sdr(real("thermal/ipmitool-sensor-list-supermicro-dual-socket-cpu2-temp-nr-lowered-thresholds.txt"))
    lost = SignalValue("power_unit_fault", "Power Unit #0x02", 1.0, {})
    (named,) = name_psus([lost], listing.value)
    assert named.detail["psu"] == "one of PS1 Status, PS2 Status"
    assert [c["sensor"] for c in named.detail["psu_candidates"]] == ["PS1 Status", "PS2 Status"]
    assert named.detail["ambiguous"] is True
    (unknown,) = name_psus([SignalValue("power_unit_fault", "Power Unit #0x02", 1.0, {})], None)
    assert unknown.detail["psu"] == "every PSU: its sensors were not read"


def test_the_psu_candidates_are_its_status_sensors_on_the_intel_sdr_list() -> None:
    from checker.parsers.ipmi import parse_sdr
    from remediator.derive.heat import name_psus
    from remediator.signals import SignalValue

    listing = parse_sdr(sample("ipmi-sdr/ipmitool-sdr-list-intel-s2600-healthy.txt")).value
    (named,) = name_psus([SignalValue("power_unit_fault", "Power Unit #0x02", 1.0, {})], listing)
    # PS1 Power In, Curr Out %, Temperature and its fans' sensors are the PSU's readings, not PSUs
    assert [c["sensor"] for c in named.detail["psu_candidates"]] == ["PS1 Status"]
    assert named.detail["psu"] == "PS1 Status, the only PSU the BMC lists"


def test_a_psu_reading_ns_is_named_as_possibly_an_empty_slot() -> None:
    """Before: a PSU reading ns (no reading: an empty slot by design, or the failed PSU) was named as the cause."""
    from checker.schemas import SensorReading
    from remediator.derive.heat import name_psus
    from remediator.signals import SignalValue

    psus = [
        SensorReading(name="PS1 Status", kind="psu", status="0x0100"),
        SensorReading(name="PS2 Status", kind="psu", status="ns"),
    ]
    (named,) = name_psus([SignalValue("power_unit_fault", "Power Unit #0x02", 1.0, {})], psus)
    assert named.detail["psu"] == "PS2 Status reads ns (no reading: the failed PSU, or an empty slot by design)"


def test_a_new_sensor_of_a_listed_host_is_news_to_its_rack_ticket() -> None:
    """Before: a host listed when the rack's ticket opened gave no new detection whatever it reported next."""
    from remediator.rack_heat import has_heard_from

    evidence = {"rack_heat": {"hosts": [{"hostname": "dt-hot-01", "sensors": {"CPU2 Temp": {}}}]}}
    assert has_heard_from(evidence, "dt-hot-01", "CPU2 Temp")
    assert has_heard_from(evidence, "dt-hot-01")
    assert not has_heard_from(evidence, "dt-hot-01", "package 1")
    assert not has_heard_from(evidence, "dt-hot-02")
