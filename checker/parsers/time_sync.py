"""Clock synchronisation: `chronyc -c tracking` (chrony's CSV) and `timedatectl show` (systemd's properties).

chronyc's CSV prints the fields of `chronyc tracking` in its order, one line: reference id (hex),
its name or address, stratum, reference time (seconds since the epoch), system time (the offset
chronyd is slewing away; positive when the clock is behind, chrony's "slow"), last offset, RMS
offset, frequency, residual frequency, skew (ppm), root delay, root dispersion, update interval
(seconds) and leap status. chronyd with no selected source reports reference id 00000000 (or
7F7F0101, LOCAL, when `local` is configured) and leap status "Not synchronised".
"""

from __future__ import annotations

import math

from checker.parsers.common import Parsed, clip, epoch_utc, guarded, plausible, problem, to_float, to_int
from checker.schemas import TimeSync

CHRONY_FIELDS = 14
NO_REFERENCE = frozenset({"00000000", "7F7F0101"})  # none selected; the local clock (`local stratum N`)
NOT_SYNCHRONISED = "Not synchronised"
LOCAL_REFID = "7F7F0101"  # 127.127.1.1: chronyd's `local` reference


@guarded(lambda: None)
def parse_chronyc_tracking(text: str) -> Parsed[TimeSync | None]:
    """The first line of `chronyc -c tracking` with the 14 fields; None with a problem otherwise."""
    line = next((raw for raw in text.splitlines() if raw.strip()), "")
    fields = line.strip().split(",")
    if len(fields) < CHRONY_FIELDS:
        return Parsed(
            None, [problem(f"not chronyc -c tracking ({len(fields)} fields, {CHRONY_FIELDS} expected)", line)]
        )
    refid, name, stratum, ref_time, system_time = fields[:5]
    leap = fields[13].strip()
    offset = _finite(system_time)
    seconds = _finite(ref_time)
    level = to_int(stratum)
    level = level if level is not None and 0 <= level <= 255 else None
    refid = refid.strip().upper()
    synchronised = refid not in NO_REFERENCE and leap != NOT_SYNCHRONISED and (level or 0) > 0
    value = TimeSync(
        source="chrony",
        synchronised=synchronised,
        reference=clip(name.strip(), 256) or (clip(refid, 256) if refid not in NO_REFERENCE else None),
        stratum=level,
        offset_s=offset,
        reference_time=plausible(epoch_utc(seconds)) if seconds else None,
        leap_status=clip(leap, 32) or None,
        local_clock=refid == LOCAL_REFID,
    )
    return Parsed(value, [])


def _finite(text: str) -> float | None:
    value = to_float(text)
    return value if value is not None and math.isfinite(value) else None


def _yes(value: str | None) -> bool | None:
    if value is None:
        return None
    return value.strip().lower() in ("yes", "true", "1")


@guarded(lambda: None)
def parse_timedatectl_show(text: str) -> Parsed[TimeSync | None]:
    """`timedatectl show`: KEY=VALUE lines; NTPSynchronized is the kernel's own "clock synchronised"
    flag (adjtimex STA_UNSYNC clear), whichever daemon set it."""
    properties: dict[str, str] = {}
    for raw in text.splitlines():
        key, found, value = raw.partition("=")
        if found and key.strip():
            properties[key.strip()] = value
    synced = _yes(properties.get("NTPSynchronized"))
    if synced is None:
        return Parsed(None, [problem("timedatectl show printed no NTPSynchronized", text)])
    return Parsed(TimeSync(source="timedatectl", synchronised=synced, ntp_enabled=_yes(properties.get("NTP"))), [])
