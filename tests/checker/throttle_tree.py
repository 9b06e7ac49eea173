"""A thermal_throttle sysfs tree for tests, from the corpus's real terminal session
(kernel-log/dmesg-xeon-power-limit-notification-and-thermal-throttle-sysfs.txt: `ls` and `cat` of
/sys/devices/system/cpu/cpu0/thermal_throttle/ on a Xeon E5-2430, Linux 3.2), with the files the
kernel added since (5.5: `*_throttle_total_time_ms`) where a scenario sets them."""

from __future__ import annotations

import re

from bench.samples import SnapshotBuilder, sample

SESSION = "kernel-log/dmesg-xeon-power-limit-notification-and-thermal-throttle-sysfs.txt"
CPU = "/sys/devices/system/cpu"


def session_files(text: str) -> dict[str, str]:
    """'# cat PATH' followed by its value, for every such block of the session."""
    return {m.group(1): m.group(2) + "\n" for m in re.finditer(r"^# cat (\S+)\n(\S+)$", text, flags=re.M)}


def install(snap: SnapshotBuilder, packages: int = 2, **counts: int) -> None:
    """Each package one CPU (cpuN is package N), with the real session's counters, then `counts`
    (e.g. package_throttle_total_time_ms=…) on every package."""
    real = session_files(sample(SESSION))
    snap.file(f"{CPU}/online", f"0-{packages - 1}\n" if packages > 1 else "0\n")
    for cpu in range(packages):
        snap.file(f"{CPU}/cpu{cpu}/topology/physical_package_id", f"{cpu}\n")
        snap.file(f"{CPU}/cpu{cpu}/topology/package_cpus_list", f"{cpu}\n")
        for path, value in real.items():
            snap.file(path.replace("/cpu0/", f"/cpu{cpu}/"), value)
        for name, value in counts.items():
            snap.file(f"{CPU}/cpu{cpu}/thermal_throttle/{name}", f"{value}\n")
