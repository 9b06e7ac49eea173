"""Heat in the simulated fleet: every host's BMC temperature sensors (`ipmitool sdr elist` as the
collector parses it) and, on Intel, the kernel's thermal-throttle counters per package; and the
`rack_hot` fault, a rack position whose cooling failed: the host and up to RACK_NEIGHBOURS other hosts
of its rack (SimulatedFleet shares the fault with them as `rack_heat`) run their CPUs past the upper
critical threshold and throttle in short episodes (EPISODE_S every EPISODE_EVERY_S), so the centre
sees several hot hosts in one rack and opens one cooling ticket for the rack. The counters move as
the kernel moves them (therm_throt.c): the count when an episode starts, the time when it ends.
Sensor states are `sdr elist`'s: ucr/unr past an upper threshold, lcr/lnr past a lower one.

The BMC logs a threshold crossing in its SEL (`log_thresholds`): one entry per upper threshold a reading
crossed going high, asserted once when it crosses and deasserted when it drops back, never each cycle
(ipmitool `sel elist` as the Intel S2600 sample in shared/fixtures/ipmi-sel prints its SSB Temp's
threshold pairs: 'Temperature SSB Temp | Lower Non-critical going low  | Asserted | Reading 0 < Threshold 5
degrees C', deasserted in the reverse order). A Dell iDRAC9 has no non-critical threshold on its CPU
temperatures (the R650 Thermal sample: UpperThresholdCritical only), so it logs only the critical one.

Readings come from the hostname (no draw from the host's generator: the fleet's other faults replay
as before); counters are a function of the time since the heat began (`Fault.started_at`).
"""

from __future__ import annotations

import datetime as dt
import zlib
from typing import TYPE_CHECKING

from checker.schemas import CollectorRun, CollectorStatus, SensorReading, ThermalThrottle, ThrottlePackage
from checker.sim.faults import Fault

if TYPE_CHECKING:
    from checker.sim.host import VirtualHost

RACK_NEIGHBOURS = 2
EPISODE_EVERY_S = 20.0  # a hot host's package starts a throttling episode this often …
EPISODE_S = 7.0  # … and each lasts this long: 35% of the time
CPU_LIMITS = {"lnr": 0.0, "lcr": 5.0, "lnc": 10.0, "unc": 85.0, "ucr": 90.0, "unr": 95.0}
INLET_LIMITS = {"lnr": -5.0, "lcr": 0.0, "lnc": 5.0, "unc": 40.0, "ucr": 45.0, "unr": 50.0}
HOT_CPU_C = 93.0  # past ucr, below unr: sdr elist's 'ucr'


def share_rack_heat(hosts: list[VirtualHost]) -> None:
    """Each rack_hot fault heats up to RACK_NEIGHBOURS healthy hosts of its host's rack (first by index)."""
    for host in hosts:
        fault = next((f for f in host.faults if f.kind == "rack_hot"), None)
        if fault is None:
            continue
        host.rack_heat = fault
        healthy = [h for h in hosts if h.rack == host.rack and h is not host and not h.faults and h.rack_heat is None]
        for neighbour in healthy[:RACK_NEIGHBOURS]:
            neighbour.rack_heat = fault


def progress(host: VirtualHost, fault: Fault, now: dt.datetime) -> None:
    host.rack_heat = fault
    if fault.started_at is None:
        fault.started_at = now


def _hot(host: VirtualHost, now: dt.datetime) -> float | None:
    """Seconds the host's rack position has been hot at `now`, or None."""
    fault = host.rack_heat
    if fault is None or fault.started_at is None or now < fault.started_at:
        return None
    return (now - fault.started_at).total_seconds()


def _status(reading: float, limits: dict[str, float]) -> str:
    """The state `ipmitool sdr elist` prints: the threshold crossed, upper or lower."""
    for name in ("unr", "ucr", "unc"):
        if reading >= limits[name]:
            return name
    for name in ("lnr", "lcr", "lnc"):
        if reading <= limits[name]:
            return name
    return "ok"


def _temperatures(host: VirtualHost, now: dt.datetime) -> list[tuple[str, float, dict[str, float]]]:
    """(sensor name, reading, thresholds) of the host's temperature sensors at `now`."""
    seed = zlib.crc32(host.hostname.encode())
    hot = _hot(host, now) is not None
    found = [
        (f"CPU{socket + 1} Temp", HOT_CPU_C + socket if hot else 48.0 + (seed >> (socket * 3)) % 12, CPU_LIMITS)
        for socket in range(host.hardware.sockets)
    ]
    found.append(("Inlet Temp", 36.0 if hot else 21.0 + seed % 5, INLET_LIMITS))
    return found


def sensors(host: VirtualHost, now: dt.datetime) -> list[SensorReading]:
    return [
        SensorReading(
            name=name,
            kind="temperature",
            status=_status(reading, limits),
            reading=reading,
            unit="degrees C",  # `sdr elist`, what the collector runs, prints no thresholds
        )
        for name, reading, limits in _temperatures(host, now)
    ]


# The upper thresholds as the SEL names them (IPMI 2.0 table 42-2, ipmitool's words), lowest first.
UPPER_THRESHOLDS = (("unc", "Upper Non-critical"), ("ucr", "Upper Critical"), ("unr", "Upper Non-recoverable"))


def _logged(host: VirtualHost, name: str) -> tuple[tuple[str, str], ...]:
    """The upper thresholds the host's BMC has on a sensor (and so logs)."""
    if host.hardware.bmc_vendor == "dell" and name.startswith("CPU"):  # R650 Thermal: CPU temps' critical only
        return tuple(t for t in UPPER_THRESHOLDS if t[0] != "unc")
    return UPPER_THRESHOLDS


def log_thresholds(host: VirtualHost, since: dt.datetime | None, now: dt.datetime) -> None:
    """The BMC's SEL entries for the temperature thresholds crossed since the last look: each upper threshold
    a reading went past is asserted once (at the heat's start when it began in (since, now]), and deasserted
    when the reading is back under it."""
    for name, reading, limits in _temperatures(host, now):
        before = host.thresholds_asserted.get(name, ())
        past = tuple(key for key, _words in _logged(host, name) if reading >= limits[key])
        if past == before:
            continue
        words = dict(UPPER_THRESHOLDS)
        began = host.rack_heat.started_at if host.rack_heat is not None else None
        at = now if began is None or began > now else max(began, since or began)
        for key in (k for k in past if k not in before):
            extra = f"Reading {reading:.0f} > Threshold {limits[key]:.0f} degrees C"
            host.sel(at, f"Temperature {name}", f"{words[key]} going high ", extra=extra)
        for key in reversed([k for k in before if k not in past]):
            extra = f"Reading {reading:.0f} > Threshold {limits[key]:.0f} degrees C"  # ipmitool: '>' for going high
            host.sel(now, f"Temperature {name}", f"{words[key]} going high ", direction="Deasserted", extra=extra)
        if past:
            host.thresholds_asserted[name] = past
        else:
            host.thresholds_asserted.pop(name, None)


def throttle(host: VirtualHost, now: dt.datetime) -> ThermalThrottle | None:
    if not host.hardware.intel:
        return None
    seed = zlib.crc32(host.hostname.encode())
    hot_s = _hot(host, now) or 0.0
    per_socket = host.hardware.logical_cpus // host.hardware.sockets
    started = int(hot_s // EPISODE_EVERY_S) + 1 if hot_s else 0  # the count moves when an episode starts
    ended = int((hot_s - EPISODE_S) // EPISODE_EVERY_S) + 1 if hot_s >= EPISODE_S else 0  # the time when it ends
    packages = []
    for socket in range(host.hardware.sockets):
        base_count = (seed >> socket) % 40  # the odd throttle of past heat waves, long over
        packages.append(
            ThrottlePackage(
                package=socket,
                cpu=socket * per_socket,
                package_throttle_count=base_count + started,
                package_throttle_total_time_ms=base_count * 150 + int(ended * EPISODE_S * 1000),
                core_throttle_count=0,
                core_throttle_total_time_ms=0,
            )
        )
    return ThermalThrottle(packages=packages)


def collector_runs(host: VirtualHost) -> dict[str, CollectorRun]:
    runs = {"sensors": CollectorRun(status=CollectorStatus.ok, duration_ms=180.0, source="ipmitool")}
    if host.hardware.intel:
        runs["thermal_throttle"] = CollectorRun(status=CollectorStatus.ok, duration_ms=0.2)
    else:
        runs["thermal_throttle"] = CollectorRun(
            status=CollectorStatus.unavailable,
            duration_ms=0.1,
            reason="no /sys/devices/system/cpu/cpuN/thermal_throttle/package_throttle_count: no Intel thermal "
            "monitor interrupt on this CPU (AMD, most VMs)",
        )
    return runs
