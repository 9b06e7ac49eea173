"""SMART signals: growth not mere non-zero, first sight is a baseline, verdicts and warnings always; real samples."""

from __future__ import annotations

from bench.samples import sample
from checker.parsers.smart import parse_smartctl_json
from checker.parsers.smart_text import parse_smartctl_text
from checker.schemas import DiskHealth
from remediator.derive.disks import disk_keys
from remediator.signals import SignalValue
from tests.builders.observations import Deriver, at, by_subject, disk, of, report

GROWTH = ("smart_reallocated_growth", "smart_pending_growth", "smart_grown_defects_growth", "nvme_media_errors_growth")


def growth(signals: list[SignalValue]) -> dict[tuple[str, str], float]:
    return {(s.kind, s.subject): s.value for s in signals if s.kind in GROWTH}


def parsed_json(path: str) -> DiskHealth:
    health = parse_smartctl_json(sample(path)).value
    assert health is not None
    return health


def test_real_304_reallocated_disk_is_a_baseline_then_grows_to_310() -> None:
    health = parsed_json("smartctl-json/sata-hdd-seagate-st3500418as-304-reallocated.json")
    assert health.reallocated_sectors == 304
    run = Deriver()
    assert growth(run(report(at(0), disks=[health]))) == {}  # 304 is old damage, not news
    grown = health.model_copy(update={"reallocated_sectors": 310})
    signals = run(report(at(5), disks=[grown]))
    (signal,) = of(signals, "smart_reallocated_growth")
    assert signal.value == 6
    assert (signal.detail["previous"], signal.detail["current"]) == (304, 310)
    assert signal.detail["model"] == health.model
    assert growth(run(report(at(10), disks=[grown]))) == {}  # unchanged: nothing


def test_real_failed_disk_fires_on_first_sight_and_every_report() -> None:
    health = parse_smartctl_text(
        sample("smartctl-text/sata-hdd-seagate-st3250318as-FAILED-reallocated.txt"), "/dev/sda"
    ).value
    assert health is not None
    run = Deriver()
    for minute in (0, 1):
        (signal,) = of(run(report(at(minute), disks=[health])), "smart_failing")
        assert signal.subject == health.serial
        assert signal.detail["smart_passed"] is False
    assert growth(run.last.signals if run.last else []) == {}


def test_real_sas_grown_defects_and_nvme_media_errors_grow() -> None:
    sas = parsed_json("smartctl-json/scsi-seagate-st373453lc-260-grown-defects.json")
    nvme = parsed_json("smartctl-json/nvme-samsung970evo-media-errors.json")
    assert (sas.grown_defects, nvme.media_errors) == (260, 7)
    run = Deriver()
    assert growth(run(report(at(0), disks=[sas, nvme]))) == {}
    later = [
        sas.model_copy(update={"grown_defects": 263}),
        nvme.model_copy(update={"media_errors": 9}),
    ]
    keys = disk_keys(later)
    assert growth(run(report(at(5), disks=later))) == {
        ("smart_grown_defects_growth", keys[0]): 3,
        ("nvme_media_errors_growth", keys[1]): 2,
    }


def test_healthy_real_disks_say_nothing() -> None:
    disks = [
        parsed_json("smartctl-json/nvme-micron7450-healthy.json"),
        parsed_json("smartctl-json/sata-hdd-seagate-exos-x16-healthy.json"),
        parsed_json("smartctl-json/sas-seagate-st1200mm0088-healthy-smartctl67.json"),
        parsed_json("smartctl-json/sata-ssd-kingston-kc400-retired-block.json"),  # one retired block, for years
    ]
    run = Deriver()
    for minute in (0, 1, 2):
        assert run(report(at(minute), disks=disks)) == []


def test_pending_sectors_grow_and_a_decrease_moves_the_baseline() -> None:
    run = Deriver()
    run(report(at(0), disks=[disk(pending_sectors=2)]))
    assert growth(run(report(at(1), disks=[disk(pending_sectors=5)]))) == {("smart_pending_growth", "ZL2A0001"): 3}
    assert growth(run(report(at(2), disks=[disk(pending_sectors=0)]))) == {}  # rewritten or remapped
    assert growth(run(report(at(3), disks=[disk(pending_sectors=1)]))) == {("smart_pending_growth", "ZL2A0001"): 1}


def test_a_counter_missing_for_a_cycle_keeps_its_previous_value() -> None:
    run = Deriver()
    run(report(at(0), disks=[disk(reallocated_sectors=8)]))
    run(report(at(1), disks=[disk(reallocated_sectors=None)]))
    assert growth(run(report(at(2), disks=[disk(reallocated_sectors=10)]))) == {
        ("smart_reallocated_growth", "ZL2A0001"): 2
    }


def test_disks_with_repeated_serials_are_told_apart_by_device() -> None:
    twins = [disk("/dev/sda", "REDACTED", reallocated_sectors=1), disk("/dev/sdb", "REDACTED", reallocated_sectors=50)]
    run = Deriver()
    run(report(at(0), disks=twins))
    grown = [twins[0], twins[1].model_copy(update={"reallocated_sectors": 51})]
    assert growth(run(report(at(1), disks=grown))) == {("smart_reallocated_growth", "/dev/sdb"): 1}


def test_a_replaced_disk_is_a_new_baseline() -> None:
    run = Deriver()
    run(report(at(0), disks=[disk(serial="OLD", reallocated_sectors=900)]))
    assert growth(run(report(at(1), disks=[disk(serial="NEW", reallocated_sectors=3)]))) == {}


def test_nvme_critical_warning_and_spare_are_states() -> None:
    nvme = disk(
        "/dev/nvme0", "S4X", "NVMe", nvme_critical_warning=0x05, available_spare=4, available_spare_threshold=10
    )
    run = Deriver()
    for minute in (0, 1):
        signals = run(report(at(minute), disks=[nvme]))
        warning = by_subject(signals, "nvme_critical_warning")["S4X"]
        assert warning.value == 0x05
        assert warning.detail["bits"] == ["spare_below_threshold", "reliability_degraded"]
        assert by_subject(signals, "nvme_spare_low")["S4X"].detail["threshold"] == 10
    healthy = nvme.model_copy(update={"nvme_critical_warning": 0, "available_spare": 100})
    assert run(report(at(2), disks=[healthy])) == []


def test_smartctl_disk_failing_flag_counts_as_failing() -> None:
    flagged = disk(smart_passed=None, exit_flags=["disk_failing"])
    assert of(Deriver()(report(at(0), disks=[flagged])), "smart_failing")


def test_an_nvme_over_its_temperature_threshold_is_its_airflow_not_its_media() -> None:
    """Critical-warning bit 1 alone (temperature) says nothing about the drive's media: no drive signal."""
    hot = disk("/dev/nvme1", "S4HOT", "NVMe", nvme_critical_warning=0x02, temperature_c=78.0)
    signals = Deriver()(report(at(0), disks=[hot]))
    assert of(signals, "nvme_critical_warning") == []
    warning = by_subject(signals, "nvme_temperature_warning")["S4HOT"]
    assert warning.value == 78.0
    assert warning.detail["bits"] == ["temperature"]
    # hot and degraded: both, the media warning without the temperature bit
    both = hot.model_copy(update={"nvme_critical_warning": 0x06})
    signals = Deriver()(report(at(0), disks=[both]))
    assert by_subject(signals, "nvme_critical_warning")["S4HOT"].value == 0x04
    assert by_subject(signals, "nvme_temperature_warning")["S4HOT"].value == 78.0
