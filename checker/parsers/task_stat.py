"""/proc/PID/stat and /proc/PID/task/TID/stat: one line, `pid (comm) state ppid … processor …` (proc(5)).

comm is the task's name as the kernel keeps it (15 characters) and may hold anything, spaces and
parentheses included ('(rx) loop 2)'), so it is everything between the first '(' and the *last*
')'; the numbered fields follow that. Only what the isolated-workload collector needs is kept, and
the line is split only as far as field 39: the collector reads one per thread, so this is hot.
"""

from __future__ import annotations

from typing import NamedTuple

from checker.parsers.common import Parsed, clip, guarded, problem

PF_KTHREAD = 0x00200000  # include/linux/sched.h: the task is a kernel thread
# Positions after the ')' of fields 3 (state), 4 (ppid), 9 (flags), 20 (num_threads), 39 (processor).
_STATE, _PPID, _FLAGS, _NUM_THREADS, _PROCESSOR = 0, 1, 6, 17, 36
MAX_COMM_CHARS = 64


class TaskStat(NamedTuple):
    pid: int
    comm: str
    state: str
    ppid: int
    flags: int
    num_threads: int
    processor: int  # the CPU the task last ran on

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
    if len(state) != 1 or not (_unsigned(ppid) and _unsigned(flags) and _unsigned(threads) and _unsigned(cpu)):
        return Parsed(None, [problem("stat line with a field that is not a number", text)])
    comm = clip(text[opening + 1 : closing], MAX_COMM_CHARS)
    return Parsed(TaskStat(int(pid), comm, state, int(ppid), int(flags), int(threads), int(cpu)))
