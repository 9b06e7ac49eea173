"""EDAC: the kernel's memory-controller counters under /sys/devices/system/edac/mc, and its poll interval.

Only the known attribute files are read (dimm*/ and rank*/ per-DIMM entries, legacy csrow*/chN_*
files, the controller's totals): never the write-only reset_counters or anything that could block.
"""

from __future__ import annotations

import re
from typing import Protocol

from checker.collectors.context import Context, Unavailable
from checker.parsers.edac import parse_edac_poll_msec, parse_edac_sysfs

EDAC_MC = "/sys/devices/system/edac/mc"
POLL_MSEC = "/sys/module/edac_core/parameters/edac_mc_poll_msec"
MC_FILES = ("mc_name", "ce_count", "ue_count", "ce_noinfo_count", "ue_noinfo_count", "seconds_since_reset")
DIMM_FILES = ("dimm_label", "dimm_location", "dimm_ce_count", "dimm_ue_count", "size", "dimm_mem_type")
CSROW_FILES = ("ce_count", "ue_count", "size_mb", "mem_type")
_MC = re.compile(r"mc\d{1,6}")
_DIMM = re.compile(r"(?:dimm|rank)\d{1,6}")
_CSROW = re.compile(r"csrow\d{1,6}")
_CHANNEL_FILE = re.compile(r"ch\d{1,6}_(?:ce_count|ue_count|dimm_label)")


class SysfsReader(Protocol):
    """What reading the tree takes: the collectors' host access and cyborg's System both do."""

    def read_text(self, path: str) -> str | None: ...

    def list_dir(self, path: str) -> list[str] | None: ...


def read_sysfs(host: SysfsReader) -> dict[str, str] | None:
    """The known EDAC files (paths relative to EDAC_MC, as parse_edac_sysfs takes them); None without EDAC.
    Also read by cyborg's load test (cyborg/drivers/memtest_edac.py), before and after its run."""
    entries = host.list_dir(EDAC_MC)
    if entries is None:
        return None
    files: dict[str, str] = {}

    def read(relative: str) -> None:
        text = host.read_text(f"{EDAC_MC}/{relative}")
        if text is not None:
            files[relative] = text

    for mc in (e for e in entries if _MC.fullmatch(e)):
        for name in MC_FILES:
            read(f"{mc}/{name}")
        for sub in host.list_dir(f"{EDAC_MC}/{mc}") or []:
            if _DIMM.fullmatch(sub):
                for name in DIMM_FILES:
                    read(f"{mc}/{sub}/{name}")
            elif _CSROW.fullmatch(sub):
                names = host.list_dir(f"{EDAC_MC}/{mc}/{sub}") or []
                for name in (*CSROW_FILES, *(n for n in names if _CHANNEL_FILE.fullmatch(n))):
                    read(f"{mc}/{sub}/{name}")
    return files


def collect(ctx: Context) -> None:
    entries = ctx.host.list_dir(EDAC_MC)
    if entries is None:
        raise Unavailable(f"no EDAC on this host: {EDAC_MC} does not exist (no EDAC driver loaded)")
    if not any(_MC.fullmatch(e) for e in entries):
        raise Unavailable(f"no memory controller registered under {EDAC_MC} (no EDAC driver for this platform)")
    files = read_sysfs(ctx.host) or {}
    sysfs_text = "\n".join(f"{path}: {value.strip()}" for path, value in files.items())
    state = ctx.take(parse_edac_sysfs(files), "EDAC sysfs", sysfs_text, empty=lambda s: not s.controllers)
    poll = ctx.host.read_text(POLL_MSEC)
    if poll is not None:
        state.poll_msec = ctx.take(parse_edac_poll_msec(poll), "edac_mc_poll_msec", poll)
    ctx.observations.edac = state
