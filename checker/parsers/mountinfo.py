"""/proc/self/mountinfo (Documentation/filesystems/proc.rst, "3.5 /proc/<pid>/mountinfo").

    36 35 98:0 /mnt1 /mnt2 rw,noatime master:1 - ext3 /dev/root rw,errors=continue
    (1)(2)(3)   (4)   (5)      (6)      (7)   (8) (9)   (10)         (11)

mount id, parent id, major:minor, root of the mount within the filesystem, mount point, per-mount
options, optional fields up to the "-", filesystem type, source, superblock options. Paths escape
space, tab, newline and backslash as octal (\\040). A filesystem the kernel made read-only (ext4
errors=remount-ro) shows "ro" in its superblock options while its mount options still say "rw".
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from checker.parsers.common import Parsed, guarded, problem

MAX_ENTRIES = 4096
_OCTAL = re.compile(r"\\([0-7]{3})")


@dataclass(frozen=True, slots=True)
class MountEntry:
    mount_id: int
    major: int
    minor: int
    root: str
    mountpoint: str
    mount_options: tuple[str, ...]
    fstype: str
    source: str
    super_options: tuple[str, ...]

    @property
    def read_only(self) -> bool:
        return "ro" in self.mount_options or "ro" in self.super_options

    @property
    def forced_read_only(self) -> bool:
        """rw asked, ro now: the kernel turned the filesystem read-only under the mount."""
        return "rw" in self.mount_options and "ro" in self.super_options


def _unescape(text: str) -> str:
    return _OCTAL.sub(lambda m: chr(int(m.group(1), 8)), text)


@guarded(list)
def parse_mountinfo(text: str) -> Parsed[list[MountEntry]]:
    entries: list[MountEntry] = []
    problems: list[str] = []
    for raw in text.splitlines():
        if not raw.strip():
            continue
        fields = raw.split(" ")
        try:
            dash = fields.index("-", 6)
        except ValueError:
            problems.append(problem("mountinfo line without its '-' separator", raw))
            continue
        major, _, minor = fields[2].partition(":")
        if len(fields) < dash + 4 or not (major.isdecimal() and minor.isdecimal() and fields[0].isdecimal()):
            problems.append(problem("not a mountinfo line", raw))
            continue
        entries.append(
            MountEntry(
                mount_id=int(fields[0]),
                major=int(major),
                minor=int(minor),
                root=_unescape(fields[3]),
                mountpoint=_unescape(fields[4]),
                mount_options=tuple(fields[5].split(",")),
                fstype=fields[dash + 1],
                source=_unescape(fields[dash + 2]),
                super_options=tuple(fields[dash + 3].split(",")),
            )
        )
        if len(entries) >= MAX_ENTRIES:
            break
    return Parsed(entries, problems)
