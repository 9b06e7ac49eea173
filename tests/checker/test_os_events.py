"""OS and filesystem kernel-log events (checker/parsers/os_events.py) on the real os-faults samples."""

from __future__ import annotations

import re
from pathlib import Path

from bench.samples import sample, samples_dir
from checker.parsers.kernel_events import parse_kernel_log
from checker.parsers.os_events import oom_facts
from checker.schemas import KernelEventKind

K = KernelEventKind


def events_of(name: str) -> list[tuple[KernelEventKind, str | None, int, int]]:
    state = parse_kernel_log(sample(f"os-faults/{name}"), "dmesg").value
    assert state.truncated == 0
    return [(e.kind, e.subject, e.count, len(e.lines)) for e in state.events]


def test_ext4_aborted_journal_each_error_and_remount_counted_and_the_suppressed_lines_too() -> None:
    events = events_of("dmesg-ext4-aborted-journal-remount-ro-callbacks-suppressed.log")
    pair = [(K.fs_error, "sdd1", 1, 1), (K.fs_readonly, "sdd1", 1, 1)]
    # The rate limit's line says 1,267 more error lines of the filesystem were not printed: they go to the
    # device's next error line, the one ext4's limit let through (S8: before, an event without a device).
    assert events == pair * 3 + [(K.fs_error, "sdd1", 1268, 2), (K.fs_readonly, "sdd1", 1, 1)] + pair * 3


def test_a_suppressed_count_with_nothing_after_it_stays_a_host_level_event() -> None:
    events = parse_kernel_log("[  1.0] EXT4-fs error: 12 callbacks suppressed\n", "dmesg").value.events
    assert [(e.kind, e.subject, e.count) for e in events] == [(K.fs_error, None, 12)]


def test_xfs_corruption_is_one_error_then_one_shutdown() -> None:
    events = events_of("kernel-xfs-internal-error-corruption-force-shutdown-no-timestamps.log")
    # "Internal error", "Corruption detected", the ifree error and the force_shutdown call are one
    # corruption; "Shutting down filesystem" and its "Please umount" are the shutdown.
    assert events == [(K.fs_error, "dm-4", 1, 4), (K.fs_readonly, "dm-4", 1, 2)]
    state = parse_kernel_log(
        sample("os-faults/kernel-xfs-internal-error-corruption-force-shutdown-no-timestamps.log"), "dmesg"
    ).value
    assert "Corruption detected" in state.events[0].lines[1]
    assert state.events[1].lines[0].endswith("Shutting down filesystem")


def test_memcg_oom_kill_is_one_oom_named_by_its_memory_cgroup_on_3_10() -> None:
    # RHEL 7 (3.10): "Memory cgroup stats for <cgroup>" opens the report, "Memory cgroup out of memory: Kill
    # process 24572 (java) … or sacrifice child" chooses, "Killed process 28438 (java)" kills (a child); the
    # next report's "java invoked oom-killer" killed nothing yet (the sample ends before its victim): one OOM.
    events = events_of("dmesg-T-memcg-oom-kill-sacrifice-child-rhel7-3.10-tail.log")
    cgroup = (
        "/kubepods/pod95387fa4-da9c-11e7-9d36-5254b24cbf5e/"
        + "6895a3e13439535852d3184ac2aadd26d7363cc035f171545ec7d4ce74073b0b"
    )
    assert events == [(K.oom_kill, cgroup, 1, 3)]
    state = parse_kernel_log(sample("os-faults/dmesg-T-memcg-oom-kill-sacrifice-child-rhel7-3.10-tail.log"), "dmesg")
    facts = oom_facts(state.value.events[0].lines)
    assert facts == {
        "memcg": cgroup,
        "constraint": "CONSTRAINT_MEMCG",
        "scope": "cgroup",
        "victims": ["java"],
        "kills": 1,
    }


SUMMARY = (
    "[ 100.000003] oom-kill:constraint=CONSTRAINT_MEMCG,nodemask=(null),cpuset=/,mems_allowed=0-1,"
    "oom_memcg=/kubepods/burstable/podabc,task_memcg=/kubepods/burstable/podabc/ctr1,task=java,pid=4321,uid=1000\n"
)


def kill(at: str, pid: int, comm: str, why: str = "Memory cgroup out of memory") -> str:
    return f"[ {at}] {why}: Killed process {pid} ({comm}) total-vm:8123456kB, anon-rss:4170112kB, file-rss:0kB\n"


def test_oom_summary_and_its_kill_are_one_event_naming_the_memory_cgroup() -> None:
    # 4.19 on: the summary line (the owner's cgroup) before the kill; our lines, in 6.x wording.
    text = (
        "[ 100.000001] java invoked oom-killer: gfp_mask=0xcc0(GFP_KERNEL), order=0, oom_score_adj=936\n"
        + SUMMARY
        + kill("100.000004", 4321, "java")
        + "[ 100.000005] oom_reaper: reaped process 4321 (java), now anon-rss:0kB, file-rss:0kB, shmem-rss:0kB\n"
        + kill("100.500001", 4400, "python3", "Out of memory")
        + kill("100.500002", 4401, "python3", "Out of memory")
    )
    events = parse_kernel_log(text, "dmesg").value.events
    assert [(e.kind, e.subject, len(e.lines)) for e in events] == [
        (K.oom_kill, "/kubepods/burstable/podabc", 2),
        (K.oom_kill, "host", 1),  # host-wide, its report's head rate-limited away
        (K.oom_kill, "host", 1),  # two kills in a row without memory.oom.group stay two OOMs
    ]
    assert "oom_memcg=/kubepods/burstable/podabc" in events[0].lines[0]


def test_a_memory_oom_group_kill_of_five_tasks_is_one_oom() -> None:
    # M5: cgroup v2 memory.oom.group=1 (Kubernetes 1.28+): one OOM kills every task of the container, a line each.
    text = SUMMARY + kill("100.000004", 4321, "java")
    text += (
        "[ 100.000005] Tasks in /kubepods/burstable/podabc/ctr1 are going to be killed due to memory.oom.group set\n"
    )
    text += "".join(kill(f"100.00001{n}", 4322 + n, "java") for n in range(4))
    (event,) = parse_kernel_log(text, "dmesg").value.events
    assert (event.kind, event.subject, event.count) == (K.oom_kill, "/kubepods/burstable/podabc", 1)
    assert oom_facts(event.lines)["kills"] == 5


def test_a_3_10_oom_with_its_limit_line_and_task_table_is_one_oom_of_that_cgroup() -> None:
    text = (
        "[ 50.000001] Task in /kubepods/podx/ctr killed as a result of limit of /kubepods/podx\n"
        "[ 50.000002] memory: usage 524288kB, limit 524288kB, failcnt 7\n"
        "[ 50.000003] Memory cgroup stats for /kubepods/podx: cache:0KB rss:524188KB\n"
        "[ 50.000004] Memory cgroup stats for /kubepods/podx/ctr: cache:0KB rss:524188KB\n"
        "[ 50.000005] [ pid ]   uid  tgid total_vm      rss nr_ptes swapents oom_score_adj name\n"
        "[ 50.000006] [28438]     0 28438  5063909   119961    1661   136409          -998 java\n"
        "[ 50.000007] Memory cgroup out of memory: Kill process 28438 (java) score 0 or sacrifice child\n"
        "[ 50.000008] Killed process 28438 (java) total-vm:20255636kB, anon-rss:466160kB, file-rss:13684kB\n"
    )
    (event,) = parse_kernel_log(text, "dmesg").value.events
    assert (event.subject, event.lines_dropped) == ("/kubepods/podx", 3)  # the memory line and the task table
    assert oom_facts(event.lines)["scope"] == "cgroup"


def test_a_host_wide_oom_of_4_19_has_no_cgroup() -> None:
    text = (
        "[ 9.1] oom-kill:constraint=CONSTRAINT_NONE,nodemask=(null),cpuset=/,mems_allowed=0,global_oom,"
        "task_memcg=/system.slice/sshd.service,task=sshd,pid=812,uid=0\n"
    ) + kill("9.2", 812, "sshd", "Out of memory")
    (event,) = parse_kernel_log(text, "dmesg").value.events
    assert event.subject == "host"
    facts = oom_facts(event.lines)
    assert (facts["constraint"], facts["scope"], facts["victims"]) == ("CONSTRAINT_NONE", "host", ["sshd"])


def test_tsc_unstable_switch_to_hpet_is_one_event_with_the_skew() -> None:
    state = parse_kernel_log(sample("os-faults/dmesg-clocksource-tsc-unstable-hpet-watchdog-switch.log"), "dmesg").value
    (event,) = state.events
    assert (event.kind, event.subject, event.count) == (K.clocksource_unstable, "tsc", 1)
    assert len(event.lines) == 7  # the wd/cs skew lines, TSC marked unstable, sched_clock, the switch to hpet
    assert "'hpet' wd_now" in event.lines[1]
    assert event.lines[-1].endswith("Switched to clocksource hpet")


def test_boot_time_tsc_decisions_are_no_events() -> None:
    # M4: only the watchdog's verdict counts; these reasons are the kernel choosing at boot, no drift seen.
    text = (
        "[ 0.000001] tsc: Marking TSC unstable due to running on Hyper-V\n"
        "[ 0.500000] tsc: Marking TSC unstable due to check_tsc_sync_source failed\n"
        "[ 1.000000] tsc: Marking TSC unstable due to TSCs unsynchronized\n"
        "[ 1.000100] clocksource: Switched to clocksource hpet\n"
    )
    assert parse_kernel_log(text, "dmesg").value.events == []


def test_every_os_faults_sample_has_a_test() -> None:
    source = Path(__file__).read_text(encoding="utf-8")
    tested = {name.rsplit("/", 1)[-1] for name in re.findall(r'"([\w.\-/]+\.(?:log|txt))"', source)}
    present = {p.name for p in (samples_dir() / "os-faults").iterdir()}
    assert present - tested == set()
