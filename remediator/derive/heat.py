"""CPU packages running hot, from the kernel's thermal-throttle counters (the report's
`thermal_throttle` section: checker/collectors/thermal_throttle.py).

How the kernel moves them (arch/x86/kernel/cpu/mce/therm_throt.c, therm_throt_process, Linux 5.5
on): `package_throttle_count` grows when a throttling episode STARTS; `package_throttle_total_time_ms`
grows by the episode's length only when it ENDS (an episode that starts more than 10 C below the
package's limit is counted but never timed). A package held at its limit moves neither counter
until it cools: its time shows at once when the episode ends, longer than the interval it ended in.

So the time throttled is judged over a sliding window (WINDOW_S, ten minutes), not report by report:
HeatMemory keeps each package's counters of the reports within the window (and the newest before it),
and each report's share is the time the counters moved within the window over the window (over the
span since the newest sample before it, when that is longer; over the whole window when the history
is shorter: a lower bound). A long episode that ends shows as 100% (capped), with `exceeds_window`.
The counters are absolute since boot: a new boot, a counter that went down or a gap over MAX_GAP_S
starts the history afresh.

- `cpu_throttle_percent`, subject `package N`: that share, on reports where the window holds time
  throttled. `open_episode` in the detail when the count moved in the window and the time did not (an
  episode that has not ended, or one the kernel does not time): the kernel log
  (`thermal-throttling`) and the BMC's sensors see a package held hot sooner.
  `since` (the window's first sample), `counted` ([end epoch seconds, throttled fraction] per interval
  between two samples, above 1 when an episode that began before the interval ended in it) and
  `counted_percent_of_s` (the window divided by): a detection while an airflow
  repair is verified reopens its ticket only on the time throttled after it (remediator.recount).
- `cpu_throttle_events`, subject `package N`: throttle episodes started within the window, per hour,
  on reports with some (every kernel; before 5.5 the kernel also logs them: `thermal-throttling`).
Power-limit notifications are not heat (a CPU at its RAPL limit) and make no signal.

Power: `power_unit_fault` (the SEL's Power Unit redundancy lost, remediator/derive/sel.py) gets the
host's PSU sensors as candidates (`psu`, `psu_candidates`), so its ticket names the PSUs to check.
"""

from __future__ import annotations

import datetime as dt
import itertools

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field

from checker.schemas import SensorReading, ThermalThrottle, ThrottlePackage
from remediator.signals import MAX_GAP_S, SignalValue

CRITICAL_PSU_STATES = frozenset({"cr", "nr", "lcr", "ucr", "lnr", "unr", "ns"})
MAX_PSUS = 8
WINDOW_S = 600.0
MAX_SAMPLES = 16  # per package: a report a minute keeps eleven
Sample = tuple[float, int, int | None]  # epoch seconds, package throttle count, total time throttled (ms)


class HeatMemory(BaseModel):
    model_config = ConfigDict(extra="ignore")

    at: AwareDatetime
    boot: str | None = None
    history: dict[str, list[Sample]] = Field(
        default_factory=dict, max_length=64, description="Package -> its counters within the window, oldest first."
    )


def _kept(samples: list[Sample], now_s: float) -> list[Sample]:
    """The samples within the window and the newest one before it (the window's baseline)."""
    inside = [x for x in samples if x[0] >= now_s - WINDOW_S]
    before = [x for x in samples if x[0] < now_s - WINDOW_S]
    return ([before[-1]] if before else []) + inside[-(MAX_SAMPLES - 1) :]


def _went_down(last: Sample, sample: Sample) -> bool:
    was, now = last[2], sample[2]
    return sample[1] < last[1] or (was is not None and now is not None and now < was)


def _throttled_share(kept: list[Sample]) -> list[list[float]]:
    """[end epoch seconds, throttled fraction] per interval between two samples: what remediator.recount
    needs to judge the window without the time before a repair. A fraction is not capped at 1: time beyond
    the interval's own came from an episode that began before it (the kernel times an episode when it
    ends), which the recount needs to tell an episode that began before the repair (review of the counted
    spans, finding 4); the window's own share is capped (`_signals`)."""
    shares = []
    for (start, _, before), (end, _, after) in itertools.pairwise(kept):
        if before is not None and after is not None and end > start:
            shares.append([end, round(max(0, after - before) / ((end - start) * 1000), 4)])
    return shares


def _signals(package: ThrottlePackage, kept: list[Sample], now_s: float) -> list[SignalValue]:
    base = kept[0]
    count, total = package.package_throttle_count, package.package_throttle_total_time_ms
    span = now_s - base[0]
    events = count - base[1]
    throttled_ms = total - base[2] if total is not None and base[2] is not None else None
    over = max(span, WINDOW_S)  # a shorter history: a share of the whole window, a lower bound
    subject = f"package {package.package}"
    detail = {
        "package": package.package,
        "cpu": package.cpu,
        "events": events,
        "throttled_ms": throttled_ms,
        "window_s": round(over, 3),
        "history_s": round(span, 3),
        "package_throttle_count": count,
        "core_throttle_count": package.core_throttle_count,
        "open_episode": events > 0 and not throttled_ms and total is not None,
        "source": f"/sys/devices/system/cpu/cpu{package.cpu}/thermal_throttle",
    }
    signals: list[SignalValue] = []
    if throttled_ms:
        percent = min(100.0, 100.0 * throttled_ms / (over * 1000))
        detail.update(throttled_percent=round(percent, 2), exceeds_window=throttled_ms > over * 1000)
        since = dt.datetime.fromtimestamp(base[0], dt.UTC).isoformat()  # the counted span (remediator.recount)
        counted = {"since": since, "counted": _throttled_share(kept), "counted_percent_of_s": round(over, 3)}
        signals.append(SignalValue("cpu_throttle_percent", subject, percent, {**detail, **counted}))
    if events:
        signals.append(SignalValue("cpu_throttle_events", subject, events * 3600 / over, detail))
    return signals


def throttle_signals(
    state: ThermalThrottle | None, previous: HeatMemory | None, *, now: dt.datetime, boot: str | None
) -> tuple[list[SignalValue], HeatMemory | None]:
    if state is None:
        return [], previous
    now_s = now.timestamp()
    fresh = previous is None or (boot is not None and previous.boot not in (None, boot))
    if previous is not None and not 0 < (now - previous.at).total_seconds() <= MAX_GAP_S:
        fresh = True
    signals: list[SignalValue] = []
    history: dict[str, list[Sample]] = {}
    for package in state.packages:
        key = str(package.package)
        sample: Sample = (now_s, package.package_throttle_count, package.package_throttle_total_time_ms)
        before = [] if fresh or previous is None else previous.history.get(key, [])
        if before and _went_down(before[-1], sample):
            before = []  # went down within a boot: a reset, the history starts again
        kept = _kept([*before, sample], now_s)
        history[key] = kept
        if len(kept) > 1:
            signals += _signals(package, kept, now_s)
    return signals, HeatMemory(at=now, boot=boot, history=history)


def name_psus(signals: list[SignalValue], sensors: list[SensorReading] | None) -> list[SignalValue]:
    """A Power Unit's lost redundancy names no PSU (IPMI's Power Unit sensor is the host's power as a
    whole): the PSUs the BMC lists become its candidates, so the ticket names them. One PSU sensor past
    a critical threshold, or missing its reading while the others read, is the likely one."""
    # a PSU's status sensor (discrete: no numeric reading), not its watts, current or temperature
    discrete = [s for s in sensors or [] if s.kind == "psu" and s.reading is None]
    psus = [s for s in discrete if "status" in s.name.lower()] or discrete  # PS1 Status, not PS1 1a Fan Fail
    if not psus:
        for signal in signals:
            if signal.kind == "power_unit_fault":
                signal.detail.update(psu="every PSU: its sensors were not read", ambiguous=True)
        return signals
    abnormal = [s for s in psus if s.status in CRITICAL_PSU_STATES]
    candidates = [{"sensor": s.name, "status": s.status, "reading": s.reading, "unit": s.unit} for s in psus[:MAX_PSUS]]
    if len(abnormal) == 1 and abnormal[0].status == "ns":
        named = f"{abnormal[0].name} reads ns (no reading: the failed PSU, or an empty slot by design)"
    elif len(abnormal) == 1:
        named = abnormal[0].name
    elif len(psus) == 1:
        named = f"{psus[0].name}, the only PSU the BMC lists"
    else:
        named = "one of " + ", ".join(s.name for s in psus[:MAX_PSUS])
    for signal in signals:
        if signal.kind == "power_unit_fault":
            signal.detail.update(psu=named, psu_candidates=candidates, ambiguous=len(abnormal) != 1)
    return signals
