"""/proc/PID/stat and /proc/PID/task/TID/stat: one line, `pid (comm) state ppid … processor …` (proc(5)).

comm is the task's name as the kernel keeps it (15 characters) and may hold anything, spaces and
parentheses included ('(rx) loop 2)'), so it is everything between the first '(' and the *last*
')'; the numbered fields follow that. Only what the isolated-workload and cputime collectors need is
kept, and the line is split only as far as field 39: they read one per thread, so this is hot.
"""

from __future__ import annotations

from typing import NamedTuple

from checker.parsers.common import Parsed, clip, guarded, problem

PF_KTHREAD = 0x00200000  # include/linux/sched.h: the task is a kernel thread
# Positions after the ')' of fields 3 (state), 4 (ppid), 9 (flags), 20 (num_threads), 39 (processor).
_STATE, _PPID, _FLAGS, _NUM_THREADS, _PROCESSOR = 0, 1, 6, 17, 36
# ... and of fields 14 (utime), 15 (stime), 22 (starttime): clock ticks (sysconf(_SC_CLK_TCK)).
_UTIME, _STIME, _STARTTIME = 11, 12, 19
MAX_COMM_CHARS = 64


class TaskStat(NamedTuple):
    pid: int
    comm: str
    state: str
    ppid: int
    flags: int
    num_threads: int
    processor: int  # the CPU the task last ran on
    # CPU time in user and kernel mode, and the start after boot, in clock ticks. In /proc/PID/stat the
    # times are the whole thread group's, exited threads included; in /proc/PID/task/TID/stat one thread's.
    utime: int = 0
    stime: int = 0
    starttime: int = 0

    @property
    def kernel_thread(self) -> bool:
        return bool(self.flags & PF_KTHREAD)

    @property
    def exited(self) -> bool:
        """A zombie or a dead task: it runs nowhere any more."""
        return self.state in ("Z", "X", "x")


def _unsigned(token: str) -> bool:
    return token.isascii() and token.isdecimal() and len(token) <= 20


@guarded(lambda: None)
def parse_task_stat(text: str) -> Parsed[TaskStat | None]:
    """One stat line -> TaskStat, or None (with a problem) when it is not one."""
    opening, closing = text.find("("), text.rfind(")")
    if opening < 0 or closing < opening:
        return Parsed(None, [problem("stat line without '(comm)'", text)])
    pid = text[:opening].strip()
    fields = text[closing + 1 :].split(maxsplit=_PROCESSOR + 1)
    if not _unsigned(pid) or len(fields) <= _PROCESSOR:
        return Parsed(None, [problem("stat line without pid or processor field", text)])
    state, ppid, flags, threads, cpu = (fields[i] for i in (_STATE, _PPID, _FLAGS, _NUM_THREADS, _PROCESSOR))
    utime, stime, start = fields[_UTIME], fields[_STIME], fields[_STARTTIME]
    numbers = (ppid, flags, threads, cpu, utime, stime, start)
    if len(state) != 1 or not all(_unsigned(n) for n in numbers):
        return Parsed(None, [problem("stat line with a field that is not a number", text)])
    comm = clip(text[opening + 1 : closing], MAX_COMM_CHARS)
    return Parsed(
        TaskStat(
            int(pid), comm, state, int(ppid), int(flags), int(threads), int(cpu), int(utime), int(stime), int(start)
        )
    )
