"""Kernel log line formats: /dev/kmsg, dmesg (plain, -T, -H) and syslog files."""

from __future__ import annotations

import datetime as dt

from bench.samples import sample
from checker.parsers.kernel_log import parse_kmsg, parse_log_lines

UTC = dt.UTC
REFERENCE = dt.datetime(2025, 1, 1, tzinfo=UTC)


def test_kmsg_records_with_dictionary_lines() -> None:
    text = (
        "6,1204,5000000,-;pcieport 0000:00:1d.0: AER: Corrected error received: 0000:03:00.0\n"
        " SUBSYSTEM=pci\n"
        " DEVICE=+pci:0000:00:1d.0\n"
        "4,1205,5000100,c;EDAC MC0: 1 CE memory read error on DIMM_A1 (channel:0)\n"
        "12,1206,5000200,-;user message\n"
    )
    boot = dt.datetime(2024, 5, 1, tzinfo=UTC)
    parsed = parse_kmsg(text, boot_time=boot)
    assert parsed.problems == []
    first, second, third = parsed.value
    assert (first.seq, first.level, first.monotonic_s, first.tag) == (1204, 6, 5.0, "kernel")
    assert first.fields == {"SUBSYSTEM": "pci", "DEVICE": "+pci:0000:00:1d.0"}
    assert first.timestamp == boot + dt.timedelta(seconds=5)
    assert second.message.startswith("EDAC MC0: 1 CE")
    assert (second.seq, second.level) == (1205, 4)
    assert third.tag is None  # facility 1 (user), written by a program


def test_kmsg_garbage_line_is_a_problem() -> None:
    parsed = parse_kmsg("not a record\n6,1,2,-;ok\n")
    assert [line.message for line in parsed.value] == ["ok"]
    assert len(parsed.problems) == 1
    assert "not a record" in parsed.problems[0]


def test_plain_dmesg_monotonic_and_leading_space_kept() -> None:
    lines = parse_log_lines(sample("kernel-log/dmesg-hard-lockup-panic-hp-microserver-gen8-3.10.log")).value
    assert lines[0].monotonic_s == 593.024485
    assert lines[0].message == "Kernel panic - not syncing: Watchdog detected hard LOCKUP on cpu 3"
    assert lines[3].message.startswith(" ffffffff814a2759")
    assert all(line.timestamp is None for line in lines)


def test_dmesg_T_local_time_in_given_zone() -> None:
    text = sample("kernel-log/dmesg-T-sb-edac-sandybridge-ce-read.log")
    utc_lines = parse_log_lines(text).value
    assert utc_lines[0].timestamp == dt.datetime(2020, 1, 27, 19, 27, 15, tzinfo=UTC)
    assert utc_lines[0].message == "mce: [Hardware Error]: Machine check events logged"
    cet = dt.timezone(dt.timedelta(hours=1))
    assert parse_log_lines(text, tz=cet).value[0].timestamp == dt.datetime(2020, 1, 27, 18, 27, 15, tzinfo=UTC)


def test_dmesg_H_relative_lines_follow_the_absolute_one() -> None:
    text = sample("kernel-log/dmesg-H-thermal-throttle-no-prefix-relative-ts.log")
    lines = parse_log_lines(text, reference=dt.datetime(2019, 3, 1, tzinfo=UTC)).value
    assert lines[0].timestamp == dt.datetime(2019, 2, 22, 4, 1, tzinfo=UTC)
    assert lines[1].timestamp == dt.datetime(2019, 2, 22, 4, 1, 0, 1, tzinfo=UTC)
    assert lines[10].message == "CPU1: Core temperature/speed normal"
    # Without a reference there is no year, so no timestamps rather than guessed ones.
    assert all(line.timestamp is None for line in parse_log_lines(text).value)


def test_bsd_syslog_host_tag_and_printk_time() -> None:
    lines = parse_log_lines(sample("kernel-log/kern-log-i7core-edac-ce-burst-cpu0-channel2.log"), REFERENCE).value
    assert lines[0].tag == "kernel"
    assert lines[0].monotonic_s == 21584690.529862
    assert lines[0].timestamp == dt.datetime(2024, 5, 7, 6, 45, 12, tzinfo=UTC)
    assert lines[1].message.startswith("EDAC MC0: 4 CE error on CPU#0Channel#2_DIMM#0")


def test_bsd_syslog_without_hostname_and_double_space() -> None:
    lines = parse_log_lines(sample("kernel-log/syslog-sb-edac-ivybridge-ce-scrubbing.log")).value
    assert {line.tag for line in lines} == {"kernel"}
    assert lines[-1].message.startswith("EDAC MC1: 1 CE memory scrubbing error")


def test_bsd_syslog_other_programs_keep_their_tag() -> None:
    lines = parse_log_lines(sample("kernel-log/syslog-mce-hardware-error-raw-bank4-goldmont-plus.log")).value
    assert [line.tag for line in lines] == ["kernel"] * 5 + ["mcelog"] * 2
    assert lines[5].message == "mcelog: Family 6 Model 122 CPU: only decoding architectural errors"
    journal = parse_log_lines(sample("kernel-log/syslog-ghes-edac-ce-unknown-label-hisilicon.log")).value
    assert journal[6].tag == "journal"


def test_rfc3339_syslog_is_aware_utc() -> None:
    lines = parse_log_lines(sample("kernel-log/syslog-ghes-recoverable-memory-fru-text-already-poisoned.log")).value
    assert lines[0].timestamp == dt.datetime(2019, 8, 19, 8, 18, 38, 274652, tzinfo=UTC)
    assert lines[0].monotonic_s == 261.273226
    assert lines[0].message.startswith("{1}[Hardware Error]: Hardware error from APEI")


def test_lines_without_prefix_are_bare_messages() -> None:
    lines = parse_log_lines(sample("kernel-log/dmesg-soft-lockup-supermicro-x10qbi-4.15.log")).value
    assert lines[0].message == "watchdog: BUG: soft lockup - CPU#51 stuck for 22s! [pacd:140354]"
    assert all(line.timestamp is None and line.monotonic_s is None for line in lines)


def test_journalctl_short_iso_and_short_precise() -> None:
    text = (
        "-- Boot 3f1c2a --\n"
        "2024-01-29T16:41:37+0000 argon kernel: nvme nvme0: controller is down; will reset: CSTS=0xffffffff\n"
        "Jan 29 16:41:37.123456 argon kernel: nvme nvme0: Does your device have a faulty power saving mode enabled?\n"
    )
    lines = parse_log_lines(text, reference=REFERENCE).value
    assert lines[0].message == "-- Boot 3f1c2a --"
    assert lines[1].timestamp == dt.datetime(2024, 1, 29, 16, 41, 37, tzinfo=UTC)
    assert lines[1].tag == "kernel"
    assert lines[2].timestamp == dt.datetime(2024, 1, 29, 16, 41, 37, 123456, tzinfo=UTC)
    assert lines[2].message.startswith("nvme nvme0: Does your device")


def test_boot_time_gives_printk_lines_a_timestamp() -> None:
    boot = dt.datetime(2024, 6, 1, 12, 0, tzinfo=UTC)
    lines = parse_log_lines(
        sample("kernel-log/dmesg-memory-failure-reserved-kernel-page-failed.log"), boot_time=boot
    ).value
    assert lines[0].timestamp == boot + dt.timedelta(seconds=16.165513)
