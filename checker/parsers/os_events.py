"""The OS and filesystem lines of the kernel-log classifier (checker/parsers/kernel_events.py builds
its rules from OS_RULES): a filesystem's errors, its forced read-only state or shutdown, OOM kills,
and the clocksource watchdog giving up on the TSC.

Wording per kernel: ext2/3/4 `__ext4_error` "EXT4-fs error (device %s): …" and `ext4_handle_error`
"EXT4-fs (%s): Remounting filesystem read-only" (fs/ext4/super.c, unchanged since 2.6); XFS
`xfs_corruption_error`/`xfs_error_report` "XFS (%s): Internal error …", "Corruption detected. Unmount
and run xfs_repair", and `xfs_do_force_shutdown` "… Shutting down filesystem" (before 5.15, without
the trailing period) or, from 6.x, "Filesystem has been shut down due to log error"; btrfs "BTRFS
error (device %s[ state …]): …" and "forced readonly"; the OOM killer's report, one event per OOM
(mm/oom_kill.c: "Killed process %d (%s)" once per task killed, a whole memory.oom.group cgroup's tasks
by one OOM; from 4.19 after the "oom-kill:constraint=…,oom_memcg=…,task=…" summary; before it "Task in
X killed as a result of limit of Y" and "Memory cgroup out of memory: Kill process … or sacrifice
child"; "Killed process %d, UID %d, (%s)" on RHEL 6), named by its memory cgroup (`oom_subject`);
kernel/time/clocksource.c's watchdog "Marking clocksource '%s' as unstable because the skew is too
large" (older: "Clocksource %s unstable (delta = …)"), which "tsc: Marking TSC unstable due to
clocksource watchdog", "sched_clock: Marking unstable" and "Switched to clocksource hpet" follow (the
same switch). A "tsc: Marking TSC unstable due to …" line of its own is a boot-time decision (Hyper-V,
unsynchronised TSCs), no event. The kernel logs no wall-clock step; chronyd does, in its own log (the
time_sync collector reads chrony's state instead).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Literal

from checker.parsers.event_draft import EventDraft
from checker.schemas import MAX_LINES_PER_EVENT, KernelEventKind

K = KernelEventKind
Subject = Callable[[re.Match[str]], str | None]
Mode = Literal["none", "prefix", "clocksource", "oom"]

# Lines the kernel prints within one clocksource switch (kernel/time/clocksource.c, arch/x86/kernel/tsc.c).
CLOCKSOURCE_LINES = (
    "clocksource:",
    "tsc:",
    "TSC ",
    "sched_clock:",
    "Switched to clocksource",
    "Switching to clocksource",
)
# Kinds whose next matching line of the same device (or switch) belongs to the same event: XFS reports
# one corruption as "Internal error …" and "Corruption detected …", and the clocksource watchdog's
# switch prints several lines that are rules' lines on their own.
JOINED_KINDS = frozenset({K.fs_error, K.clocksource_unstable, K.oom_kill})

_DEVICE = r"(?P<dev>[^)\s]{1,64})"
# A pasted log may keep its "kernel: " tag and lose its date (the corpus's XFS sample).
_XFS = r"^\s*(?P<prefix>(?:[\w-]{1,32}: )?XFS \(" + _DEVICE + r"\): )"


def _device(m: re.Match[str]) -> str | None:
    return m.group("dev")


def _process(m: re.Match[str]) -> str | None:
    return m.group("comm") or None


def _clocksource(m: re.Match[str]) -> str | None:
    return (m.group("cs") or "tsc").lower()


# kind, needle (a literal the line must contain), regex, subject, block — the first match wins.
OS_RULES: tuple[tuple[KernelEventKind, str, str, Subject | None, Mode], ...] = (
    (K.fs_readonly, "emounting filesystem read-only",
     r"EXT[234]-fs \(" + _DEVICE + r"\): (?:error: )?[Rr]emounting filesystem read-only", _device, "none"),
    (K.fs_readonly, "hutting down filesystem", _XFS + r".*?[Ss]hutting down filesystem", _device, "prefix"),
    (K.fs_readonly, "has been shut down", _XFS + r"Filesystem has been shut down", _device, "prefix"),
    (K.fs_readonly, "forced readonly",
     r"BTRFS(?: \w+)? \(device " + _DEVICE + r"(?: state [^)]*)?\): forced readonly", _device, "none"),
    (K.fs_readonly, "has been set read-only",
     r"\w+-fs \(" + _DEVICE + r"\): Filesystem has been set read-only", _device, "none"),
    (K.fs_error, "-fs error (device ", r"EXT[234]-fs error \(device " + _DEVICE + r"\)", _device, "none"),
    # The kernel's rate limit: this many more error lines were not printed (no device is named).
    (K.fs_error, "-fs error: ", r"EXT[234]-fs error: (?P<count>\d{1,18}) callbacks suppressed", None, "none"),
    (K.fs_error, "XFS (",
     _XFS + r"(?:Internal error|(?:Metadata )?[Cc]orruption detected|[Mm]etadata I/O error|Metadata CRC error"
     r"|[Ll]og I/O [Ee]rror|log I/O error)", _device, "prefix"),
    (K.fs_error, "BTRFS",
     r"BTRFS(?: error|: error| critical) \(device " + _DEVICE + r"(?: state [^)]*)?\)", _device, "none"),
    # One OOM is one event, however many tasks it kills: it opens on the first line of its report that
    # names it (pre-4.19 "Task in X killed as a result of limit of Y", the memcg's "Memory cgroup stats
    # for X", 4.19+'s "oom-kill:constraint=…" summary, the "Out of memory: Kill process" choice) and
    # takes the rest within its burst, with every "Killed process" of a memory.oom.group kill.
    # `oom_subject` then names it by its memory cgroup (mm/oom_kill.c, mm/memcontrol.c).
    (K.oom_kill, "killed as a result of limit of", r"Task in \S+ killed as a result of limit of", None, "oom"),
    (K.oom_kill, "Memory cgroup stats for ", r"Memory cgroup stats for /", None, "oom"),
    (K.oom_kill, "oom-kill:constraint=", r"oom-kill:constraint=\w{1,32},", None, "oom"),
    (K.oom_kill, "of memory: Kill process", r"(?:Memory cgroup out|Out) of memory: Kill process \d", None, "oom"),
    (K.oom_kill, "Killed process",
     r"Killed process (?P<pid>\d{1,10}),? (?:UID \d{1,10}, )?\((?P<comm>[^)]{0,64})\)", _process, "oom"),
    # Only the watchdog's own verdict (kernel/time/clocksource.c): "tsc: Marking TSC unstable due to …" on
    # its own is a boot-time decision (running on Hyper-V, check_tsc_sync_source failed, TSCs unsynchronized),
    # no drift seen; "… due to clocksource watchdog" joins the watchdog's event.
    (K.clocksource_unstable, "as unstable",
     r"Marking clocksource '(?P<cs>[^']{1,32})' as unstable", _clocksource, "clocksource"),
    (K.clocksource_unstable, " unstable (delta", r"Clocksource (?P<cs>\S{1,32}) unstable \(delta", _clocksource,
     "clocksource"),
)  # fmt: skip


def joins(mode: str, prefix: str, message: str, lines: int) -> bool:
    """Whether a line within the burst of an open OS event (of `lines` lines so far) belongs to it: the
    same XFS device's next lines, the rest of a clocksource switch, or the rest of one OOM's report."""
    text = message.lstrip()
    if mode == "prefix":
        return bool(prefix) and text.startswith(prefix)
    if mode == "clocksource":
        if text.startswith("tsc: Marking TSC unstable"):
            return "due to clocksource watchdog" in text
        return text.startswith(CLOCKSOURCE_LINES)
    return False


def oom_joins(message: str, so_far: list[str]) -> bool:
    """Whether a line within an open OOM's burst is its own: any line of its report until a task was killed,
    then only more kills (memory.oom.group kills every task of the cgroup, a line each), the group's
    announcement and the reaper; the next report's head starts a new OOM."""
    if not any("Killed process" in line for line in so_far):
        return True
    if "memory.oom.group" in message or "oom_reaper:" in message:
        return True
    return "Killed process" in message and any("memory.oom.group" in line for line in so_far)


_OOM_MEMCG = (
    re.compile(r"oom_memcg=(?P<v>[^,\s]{1,256})"),
    re.compile(r"killed as a result of limit of (?P<v>\S{1,256})"),
    re.compile(r"Tasks in (?P<v>\S{1,256}) are going to be killed due to memory\.oom\.group"),
    re.compile(r"Memory cgroup stats for (?P<v>/[^:\s]{0,255})"),
)
_OOM_CONSTRAINT = re.compile(r"oom-kill:constraint=(?P<v>\w{1,32})")
_OOM_VICTIM = re.compile(r"Killed process \d{1,10},? (?:UID \d{1,10}, )?\((?P<v>[^)]{0,64})\)")
HOST_OOM = "host"  # the subject of an OOM of the whole host (or its cpuset/mempolicy): no memory cgroup's limit


def oom_facts(lines: list[str]) -> dict[str, object]:
    """One OOM's facts from its lines: the memory cgroup whose limit was hit (None for a host-wide OOM), the
    constraint (CONSTRAINT_MEMCG, CONSTRAINT_NONE …; before 4.19 from "Memory cgroup out of memory" against
    "Out of memory"), the scope (cgroup or host) and the processes killed."""
    constraint = next((m.group("v") for line in lines if (m := _OOM_CONSTRAINT.search(line))), None)
    memcg = next((m.group("v") for p in _OOM_MEMCG for line in lines if (m := p.search(line))), None)
    if constraint is None:
        if any("Memory cgroup out of memory" in line for line in lines) or memcg is not None:
            constraint = "CONSTRAINT_MEMCG"
        elif any("Out of memory:" in line for line in lines):
            constraint = "CONSTRAINT_NONE"
    if constraint is not None and constraint != "CONSTRAINT_MEMCG":
        memcg = None  # a host-wide OOM's stats name no limit that was hit
    scope = "cgroup" if constraint == "CONSTRAINT_MEMCG" else ("host" if constraint else "unknown")
    victims = [m.group("v") for line in lines if (m := _OOM_VICTIM.search(line))]
    return {"memcg": memcg, "constraint": constraint, "scope": scope, "victims": victims[:16], "kills": len(victims)}


def oom_subject(lines: list[str]) -> str:
    """An OOM event's subject: its memory cgroup, `host` for a host-wide OOM, `unknown` when its report's
    head was lost (rate-limited) and only the kill line is left."""
    facts = oom_facts(lines)
    if facts["memcg"]:
        return str(facts["memcg"])
    return HOST_OOM if facts["scope"] == "host" else "unknown"


def fold_suppressed(events: list[EventDraft]) -> list[EventDraft]:
    """ext4's "EXT4-fs error: N callbacks suppressed" names no device: the kernel prints it (lib/ratelimit.c,
    the superblock's own limit, fs/ext4/super.c ext4_error_ratelimit) just before that filesystem's next
    error line it lets through. Its N errors go to that next event's count, when it is the next event; a
    line with nothing after it stays an event of its own (a host-level count of N)."""
    folded: list[EventDraft] = []
    for event in events:
        if folded and _counts_for(folded[-1], event):
            last = folded[-1]
            joined = [*last.lines, *event.lines][:MAX_LINES_PER_EVENT]
            folded[-1] = event.model_copy(update={"count": event.count + last.count, "lines": joined})
            continue
        folded.append(event)
    return folded


def _counts_for(last: EventDraft, event: EventDraft) -> bool:
    """Whether `last` is a device-less "callbacks suppressed" count that goes to `event`, a device's error."""
    return last.kind is K.fs_error and last.subject is None and event.kind is K.fs_error and event.subject is not None
