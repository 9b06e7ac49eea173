"""EDAC counters: the sysfs tree under /sys/devices/system/edac/mc, the poll interval, and edac-util output.

The sysfs input is a mapping of paths relative to /sys/devices/system/edac/mc ("mc0/dimm0/dimm_ce_count")
to file contents, so the collector decides what to read and this module stays pure.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from checker.parsers.common import Parsed, clip, guarded, problem, to_int
from checker.schemas import EdacController, EdacDimm, EdacState

_MC_PATH = re.compile(r"^/?(?:sys/devices/system/edac/mc/)?mc(\d{1,18})/(.+)$")
_DIMM_DIR = re.compile(r"^(dimm|rank)(\d{1,18})/([a-z_]+)$")
_CSROW_FILE = re.compile(r"^csrow(\d{1,18})/(?:ch(\d{1,18})_)?([a-z_]+)$")

MAX_CONTROLLERS = 64
MAX_DIMMS = 512

# Whether an EDAC driver polls its controllers every edac_mc_poll_msec (mci->edac_check set, op_state
# POLL), told by the prefix of the controllers' mc_name, as drivers/edac names them. These log each
# error from the MCE decode chain (or firmware-first, ghes) and never poll: skx_common.c ("Skylake
# Socket#N IMC#M"), i10nm_base.c ("Intel_10nm Socket…"), amd64_edac.c ("F10h", "F17h_M30h", "F19h" …),
# ghes_edac.c, igen6_edac.c ("Intel_client_SoC MC#N").
EDAC_NEVER_POLLS = ("Skylake Socket", "Intel_10nm Socket", "F1", "ghes", "Intel_client_SoC")
# sb_edac.c ("Sandy Bridge/Ivy Bridge/Haswell/Broadwell/Knights Landing Socket#N") and i7core_edac.c
# ("i7 core #N") polled in the kernels of the design's measurements and no longer do in current ones:
# which one a host runs is not visible in sysfs, so they are neither tuned nor called healthy.
EDAC_POLLED_ONCE = ("Sandy Bridge", "Ivy Bridge", "Haswell", "Broadwell", "Knights Landing", "i7 core")


# What one poll can count. i7core_edac reads the controller's corrected-error counters
# (MC_COR_ECC_CNT_*, 15 bits each) and adds up what moved: a poll aggregates every error since the
# last, and a long interval risks the overflow the memory-failures design names. The chipset drivers
# below read a latched error log instead (first and next error registers: ie31200_process_error_info,
# i82443bxgx: edac_mc_handle_error with a count of 1 per channel per poll), so errors between two
# polls beyond the first are lost: a longer interval hides a failing DIMM's rate, and even at the
# kernel's 1 s a poll sees at most one error a second per channel. Their ctl_name prefixes, lowered;
# any other name is unknown (SoC drivers such as synopsys_edac count in hardware, pnd2 never polls).
EDAC_POLL_AGGREGATES = ("i7 core",)
EDAC_POLL_LATCHES = (
    "ie31200",
    "x38",
    "i3200",
    "i3000",
    "e7320",
    "e7520",
    "e7525",
    "3100",
    "e7205",
    "e7500",
    "e7501",
    "e7505",
    "i5000",
    "i5100",
    "i5400",
    "i7300",
    "i82875p",
    "i82975x",
    "i82443bxgx",
    "i82860",
    "r82600",
    "amd76",
)


def edac_polls(mc_name: str | None) -> bool | None:
    """True: a chipset driver known to poll (EDAC_POLL_LATCHES); False: a driver that never does;
    None: it depends on the kernel version, or the name is unknown (neither tuned nor called healthy)."""
    if not mc_name:
        return None
    if mc_name.startswith(EDAC_NEVER_POLLS):
        return False
    if mc_name.startswith(EDAC_POLLED_ONCE):
        return None
    return True if mc_name.lower().startswith(EDAC_POLL_LATCHES) else None


def edac_poll_counts(mc_name: str | None) -> str | None:
    """`aggregates` (a poll counts every error since the last), `latches` (one per channel per poll),
    or None (the driver does not poll, or its name is unknown)."""
    if not mc_name:
        return None
    if mc_name.startswith(EDAC_POLL_AGGREGATES):
        return "aggregates"
    return "latches" if edac_polls(mc_name) is True else None


@dataclass
class _Controller:
    files: dict[str, str] = field(default_factory=dict)
    dimms: dict[tuple[str, int], dict[str, str]] = field(default_factory=dict)
    csrows: dict[int, dict[str, str]] = field(default_factory=dict)
    channels: dict[tuple[int, int], dict[str, str]] = field(default_factory=dict)


def _count(value: str | None, where: str, problems: list[str]) -> int:
    """A counter file's value; unreadable or negative counts are 0 and a problem."""
    if value is None:
        return 0
    number = to_int(value)
    if number is None or number < 0:
        problems.append(problem(f"{where}: not a counter", value))
        return 0
    return number


def _size(value: str | None) -> int | None:
    number = to_int(value)
    return number if number is not None and number >= 0 else None


def _text(value: str | None, limit: int) -> str | None:
    if value is None:
        return None
    stripped = value.strip()
    return clip(stripped, limit) if stripped else None


@guarded(EdacState)
def parse_edac_sysfs(files: Mapping[str, str]) -> Parsed[EdacState]:
    """EDAC controllers and their DIMM counters from a sysfs snapshot.

    Layouts: dimmN/ and rankN/ (the EDAC core's per-DIMM API, dimm_* files) and the legacy
    csrowN/ with chN_ce_count/chN_dimm_label. When a controller has dimm or rank entries, its
    csrow entries describe the same memory again (legacy compatibility) and are not reported,
    so counts are not doubled.
    """
    problems: list[str] = []
    controllers: dict[int, _Controller] = {}
    for path, content in files.items():
        m = _MC_PATH.match(path.strip())
        if m is None:
            continue
        mc = int(m.group(1))
        rest = m.group(2)
        ctl = controllers.setdefault(mc, _Controller())
        if "/" not in rest:
            ctl.files[rest] = content
            continue
        dm = _DIMM_DIR.match(rest)
        if dm is not None:
            ctl.dimms.setdefault((dm.group(1), int(dm.group(2))), {})[dm.group(3)] = content
            continue
        cm = _CSROW_FILE.match(rest)
        if cm is not None:
            row = int(cm.group(1))
            if cm.group(2) is None:
                ctl.csrows.setdefault(row, {})[cm.group(3)] = content
            else:
                ctl.channels.setdefault((row, int(cm.group(2))), {})[cm.group(3)] = content

    result: list[EdacController] = []
    for mc in sorted(controllers):
        if len(result) >= MAX_CONTROLLERS:
            problems.append(f"more than {MAX_CONTROLLERS} memory controllers; mc{mc} and above dropped")
            break
        result.append(_controller(mc, controllers[mc], problems))
    return Parsed(EdacState(controllers=result), problems)


def _controller(mc: int, ctl: _Controller, problems: list[str]) -> EdacController:
    where = f"mc{mc}"
    dimms: list[EdacDimm] = []
    for (layout, index), attrs in sorted(ctl.dimms.items()):
        name = f"{layout}{index}"
        dimms.append(
            EdacDimm(
                mc=mc,
                name=name,
                layout="dimm" if layout == "dimm" else "rank",
                label=_text(attrs.get("dimm_label"), 256) or "",
                location=_text(attrs.get("dimm_location"), 256),
                ce_count=_count(attrs.get("dimm_ce_count"), f"{where}/{name}/dimm_ce_count", problems),
                ue_count=_count(attrs.get("dimm_ue_count"), f"{where}/{name}/dimm_ue_count", problems),
                size_mb=_size(attrs.get("size")),
                mem_type=_text(attrs.get("dimm_mem_type"), 64),
            )
        )
    if not dimms:
        dimms = _csrow_dimms(mc, ctl, problems)
    if len(dimms) > MAX_DIMMS:
        problems.append(f"{where}: {len(dimms)} DIMM entries, only {MAX_DIMMS} kept")
        dimms = dimms[:MAX_DIMMS]
    seconds = to_int(ctl.files.get("seconds_since_reset") or "")
    return EdacController(
        mc=mc,
        mc_name=_text(ctl.files.get("mc_name"), 128),
        ce_count=_count(ctl.files.get("ce_count"), f"{where}/ce_count", problems),
        ue_count=_count(ctl.files.get("ue_count"), f"{where}/ue_count", problems),
        ce_noinfo_count=_count(ctl.files.get("ce_noinfo_count"), f"{where}/ce_noinfo_count", problems),
        ue_noinfo_count=_count(ctl.files.get("ue_noinfo_count"), f"{where}/ue_noinfo_count", problems),
        seconds_since_reset=seconds if seconds is not None and seconds >= 0 else None,
        dimms=dimms,
    )


def _csrow_dimms(mc: int, ctl: _Controller, problems: list[str]) -> list[EdacDimm]:
    """Legacy layout: one entry per csrow channel, or per csrow when it lists no channels.

    Real kernels keep UE counts per csrow only; a chN_ue_count file is used when present.
    """
    dimms: list[EdacDimm] = []
    rows_with_channels = {row for row, _ in ctl.channels}
    for (row, ch), attrs in sorted(ctl.channels.items()):
        name = f"csrow{row}/ch{ch}"
        size = _size(ctl.csrows.get(row, {}).get("size_mb"))
        dimms.append(
            EdacDimm(
                mc=mc,
                name=name,
                layout="csrow",
                label=_text(attrs.get("dimm_label"), 256) or "",
                ce_count=_count(attrs.get("ce_count"), f"mc{mc}/{name}_ce_count", problems),
                ue_count=_count(attrs.get("ue_count"), f"mc{mc}/{name}_ue_count", problems),
                size_mb=size,
                mem_type=_text(ctl.csrows.get(row, {}).get("mem_type"), 64),
            )
        )
    for row, attrs in sorted(ctl.csrows.items()):
        if row in rows_with_channels:
            continue
        name = f"csrow{row}"
        dimms.append(
            EdacDimm(
                mc=mc,
                name=name,
                layout="csrow",
                ce_count=_count(attrs.get("ce_count"), f"mc{mc}/{name}/ce_count", problems),
                ue_count=_count(attrs.get("ue_count"), f"mc{mc}/{name}/ue_count", problems),
                size_mb=_size(attrs.get("size_mb")),
                mem_type=_text(attrs.get("mem_type"), 64),
            )
        )
    return dimms


@guarded(lambda: None)
def parse_edac_poll_msec(text: str) -> Parsed[int | None]:
    """/sys/module/edac_core/parameters/edac_mc_poll_msec: the EDAC polling period in ms."""
    value = to_int(text)
    if value is None or value < 0:
        return Parsed(None, [problem("edac_mc_poll_msec is not a non-negative integer", text)])
    return Parsed(value, [])


_UTIL_NOINFO = re.compile(r"^mc(\d{1,18}): (\d{1,18}) (Corrected|Uncorrected) Errors with no DIMM info$")
_UTIL_CSROW_UE = re.compile(r"^mc(\d{1,18}): csrow(\d{1,18}): (\d{1,18}) Uncorrected Errors$")
_UTIL_CSROW_CE = re.compile(r"^mc(\d{1,18}): csrow(\d{1,18}): (.+): (\d{1,18}) Corrected Errors$")
_UTIL_REPORT = re.compile(r"^mc(\d{1,18}):([^:]+):([^:]+):(CE|UE):(\d{1,18})$")


@guarded(EdacState)
def parse_edac_util(text: str) -> Parsed[EdacState]:
    """`edac-util -v` or `edac-util --report=full` output, as EdacState.

    edac-util reads only the csrow API: it misses dimm/rank counters on newer drivers,
    so prefer the sysfs parser; this one is for hosts where only edac-util output exists.
    """
    problems: list[str] = []
    noinfo: dict[int, dict[str, int]] = {}
    rows: dict[tuple[int, int], dict[str, object]] = {}
    seen: set[int] = set()
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if "Fatal:" in line or "Error:" in line:
            problems.append(problem("edac-util failed", line))
            continue
        if m := _UTIL_NOINFO.match(line):
            mc = int(m.group(1))
            seen.add(mc)
            noinfo.setdefault(mc, {})["ce" if m.group(3) == "Corrected" else "ue"] = int(m.group(2))
        elif m := _UTIL_CSROW_UE.match(line):
            mc = int(m.group(1))
            seen.add(mc)
            rows.setdefault((mc, int(m.group(2))), {})["ue"] = int(m.group(3))
        elif m := _UTIL_CSROW_CE.match(line):
            mc = int(m.group(1))
            seen.add(mc)
            row = rows.setdefault((mc, int(m.group(2))), {})
            row["ce"] = int(m.group(4))
            row["label"] = m.group(3)
        elif m := _UTIL_REPORT.match(line):
            mc = int(m.group(1))
            seen.add(mc)
            key = "ce" if m.group(4) == "CE" else "ue"
            if m.group(2) == "noinfo":
                noinfo.setdefault(mc, {})[key] = int(m.group(5))
            elif (rm := re.fullmatch(r"csrow(\d{1,18})", m.group(2))) is not None:
                row = rows.setdefault((mc, int(rm.group(1))), {})
                row[key] = int(m.group(5))
                if m.group(3) != "all":
                    row["label"] = m.group(3)
        elif "No errors to report" not in line and not line.endswith("edac-util -v"):
            problems.append(problem("unrecognised edac-util line", line))
    controllers: list[EdacController] = []
    for mc in sorted(seen)[:MAX_CONTROLLERS]:
        dimms = []
        for (row_mc, row_number), attrs in sorted(rows.items()):
            if row_mc != mc:
                continue
            ce, ue, label = attrs.get("ce", 0), attrs.get("ue", 0), attrs.get("label", "")
            dimms.append(
                EdacDimm(
                    mc=mc,
                    name=f"csrow{row_number}",
                    layout="csrow",
                    label=clip(str(label), 256),
                    ce_count=ce if isinstance(ce, int) else 0,
                    ue_count=ue if isinstance(ue, int) else 0,
                )
            )
        counts = noinfo.get(mc, {})
        total_ce = counts.get("ce", 0) + sum(d.ce_count for d in dimms)
        total_ue = counts.get("ue", 0) + sum(d.ue_count for d in dimms)
        controllers.append(
            EdacController(
                mc=mc,
                ce_count=total_ce,
                ue_count=total_ue,
                ce_noinfo_count=counts.get("ce", 0),
                ue_noinfo_count=counts.get("ue", 0),
                dimms=dimms[:MAX_DIMMS],
            )
        )
    return Parsed(EdacState(controllers=controllers), problems)
