"""kernel_event_count: counts per kind within the kind's window, counted once, on real kernel-log wording too."""

from __future__ import annotations

import datetime as dt

from bench.samples import sample
from checker.parsers.kernel_events import parse_kernel_log
from checker.schemas import KernelEventKind
from remediator.derive.kernel import BUCKETS, DAY_S, window_of
from remediator.signals import SignalValue
from tests.builders.observations import T0, Deriver, at, by_subject, event, kernel_log, of, report


def counts(signals: list[SignalValue]) -> dict[str, float]:
    return {s.subject: s.value for s in of(signals, "kernel_event_count")}


def test_counts_accumulate_within_the_window_and_only_kinds_with_new_events_fire() -> None:
    run = Deriver()
    first = run(report(at(0), kernel_log=kernel_log(event("soft_lockup", 10, at(0), "CPU 3"))))
    assert counts(first) == {"soft_lockup": 1}
    second = run(
        report(
            at(10),
            kernel_log=kernel_log(event("soft_lockup", 20, at(9), "CPU 5"), event("cmci_storm", 21, at(9), "CPU 1")),
        )
    )
    assert counts(second) == {"soft_lockup": 2, "cmci_storm": 1}
    quiet = run(report(at(20), kernel_log=kernel_log(last_seq=21)))
    assert counts(quiet) == {}  # nothing new: nothing to say, although the window still holds 2 lockups


def test_detail_carries_window_new_and_sample_lines_of_the_newest_event() -> None:
    lines = [f"line {i}" for i in range(8)]
    run = Deriver()
    run(report(at(0), kernel_log=kernel_log(event("soft_lockup", 1, at(0), "CPU 1"))))
    (signal,) = run(
        report(
            at(5),
            kernel_log=kernel_log(
                event("soft_lockup", 2, at(4), "CPU 2"), event("soft_lockup", 3, at(5), "CPU 7", lines)
            ),
        )
    )
    assert signal.value == 3
    assert signal.detail["new"] == 2
    assert signal.detail["window_s"] == window_of(KernelEventKind(signal.subject))
    assert signal.detail["lines"] == lines[:5]
    assert signal.detail["subject"] == "CPU 7"
    assert signal.detail["subjects"] == ["CPU 2", "CPU 7"]


def test_a_re_read_record_is_counted_once_within_a_boot() -> None:
    run = Deriver()
    run(report(at(0), kernel_log=kernel_log(event("panic", 40, at(0)), last_seq=40)))
    # the agent restarted and read the ring buffer again from an older cursor
    again = run(report(at(1), kernel_log=kernel_log(event("panic", 40, at(0)), event("oops", 41, at(1)), last_seq=41)))
    assert counts(again) == {"oops": 1}


def test_a_new_boot_restarts_sequence_numbers_without_losing_events() -> None:
    run = Deriver()
    run(report(at(0), kernel_log=kernel_log(event("soft_lockup", 900, at(0)), last_seq=900)))
    after = run(
        report(at(5), boot="boot-2", kernel_log=kernel_log(event("soft_lockup", 12, at(4)), boot="boot-2", last_seq=12))
    )
    assert counts(after) == {"soft_lockup": 2}


def test_events_leave_the_count_after_their_window() -> None:
    run = Deriver()
    run(report(T0, kernel_log=kernel_log(event("soft_lockup", 1, T0))))
    window = window_of(KernelEventKind.soft_lockup)
    late = T0 + dt.timedelta(seconds=window + window // BUCKETS + 60)
    (signal,) = of(run(report(late, kernel_log=kernel_log(event("soft_lockup", 2, late)))), "kernel_event_count")
    assert signal.value == 1


def test_panics_are_weighed_over_a_week() -> None:
    assert window_of(KernelEventKind.panic) > DAY_S
    run = Deriver()
    run(report(T0, kernel_log=kernel_log(event("panic", 1, T0))))
    three_days = T0 + dt.timedelta(days=3)
    (signal,) = run(
        report(three_days, boot="boot-2", kernel_log=kernel_log(event("panic", 5, three_days), boot="boot-2"))
    )
    assert signal.value == 2


def test_events_older_than_their_window_are_old_news_and_link_up_is_no_fault() -> None:
    run = Deriver()
    ancient = T0 - dt.timedelta(days=30)
    signals = run(report(T0, kernel_log=kernel_log(event("hung_task", 1, ancient), event("nic_link_up", 2, T0))))
    assert counts(signals) == {}


def test_events_without_timestamps_count_at_the_report_time() -> None:
    run = Deriver()
    assert counts(run(report(T0, kernel_log=kernel_log(event("nvme_timeout", None, None, "nvme0"))))) == {
        "nvme_timeout": 1
    }


def test_real_soft_lockup_and_hard_lockup_panic_logs() -> None:
    lockup = parse_kernel_log(sample("kernel-log/dmesg-soft-lockup-supermicro-x10qbi-4.15.log"), "dmesg").value
    panic = parse_kernel_log(sample("kernel-log/dmesg-hard-lockup-panic-hp-microserver-gen8-3.10.log"), "dmesg").value
    run = Deriver()
    first = by_subject(run(report(at(0), kernel_log=lockup)), "kernel_event_count")
    assert first["soft_lockup"].value == sum(e.kind == "soft_lockup" for e in lockup.events) >= 1
    assert first["soft_lockup"].detail["lines"][0].startswith("watchdog: BUG: soft lockup - CPU#51")
    second = by_subject(run(report(at(1), kernel_log=panic)), "kernel_event_count")
    assert set(second) == {e.kind.value for e in panic.events}
    assert "soft_lockup" not in second


def test_real_link_flaps_and_tx_timeouts_are_counted_per_interface() -> None:
    flaps = parse_kernel_log(sample("kernel-log/dmesg-nic-link-flap-and-netdev-watchdog-new-format.log"), "dmesg").value
    signals = Deriver()(report(at(0), kernel_log=flaps))
    by_kind = {(s.detail["kind"], s.subject): s for s in of(signals, "device_event_count")}
    downs = sum(e.kind == "nic_link_down" and e.subject == "eth0" for e in flaps.events)
    timeouts = sum(e.kind == "nic_tx_timeout" and e.subject == "eth0" for e in flaps.events)
    assert downs >= 1
    assert timeouts == 2
    assert by_kind[("nic_link_down", "eth0")].value == downs
    assert by_kind[("nic_tx_timeout", "eth0")].value == timeouts
    assert "NETDEV WATCHDOG" in by_kind[("nic_tx_timeout", "eth0")].detail["lines"][0]
    assert not any(kind == "nic_link_up" for kind, _ in by_kind)  # a link coming up is a recovery


def test_device_counts_accumulate_per_device_within_the_window() -> None:
    run = Deriver()
    run(report(at(0), kernel_log=kernel_log(event("nic_link_down", 1, at(0), "ens1f0"))))
    second = run(
        report(
            at(30),
            kernel_log=kernel_log(
                event("nic_link_down", 2, at(29), "ens1f0"), event("nic_link_down", 3, at(29), "ens1f1")
            ),
        )
    )
    assert {s.subject: s.value for s in of(second, "device_event_count")} == {"ens1f0": 2, "ens1f1": 1}
    later = run(report(at(60 * 26), kernel_log=kernel_log(event("nic_link_down", 4, at(60 * 26), "ens1f0"))))
    assert {s.subject: s.value for s in of(later, "device_event_count")} == {"ens1f0": 1}  # the day before aged out


def test_panics_the_hardware_caused_are_counted_apart_from_the_kernels() -> None:
    """Only a software panic adds up toward a reimage; the hardware's (a fatal machine check, a hard
    lockup, firmware-first's fatal error, an arm64 SError, EDAC's panic on a UE) are hardware_fatal."""
    hardware = [
        "Fatal machine check",
        "Hard LOCKUP",
        "GHES: Fatal hardware error",
        "Asynchronous SError Interrupt",
        "UE row 3, channel 1 (mc0)",
        "NMI IOCK error: Not continuing",
        "CXL cachemem error.",  # a CXL device's uncorrectable error (checker/parsers/cxl_log.py)
    ]
    software = ["Fatal exception in interrupt", "Attempted to kill init! exitcode=0x0000000b", "VFS: Unable to mount"]
    run = Deriver()
    events = [
        event("panic", 10 + i, at(0), why, [f"Kernel panic - not syncing: {why}"])
        for i, why in enumerate(hardware + software)
    ]
    assert counts(run(report(at(1), kernel_log=kernel_log(*events)))) == {
        "hardware_fatal": len(hardware),
        "panic": len(software),
    }
