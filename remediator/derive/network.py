"""Network ports from the report's `network` section: link errors and flaps per interface, with counter resets.

Counters are absolute (since the driver loaded), so each report's delta against the previous one is what
happened in between; a new boot, a counter that went down (a driver reload) or a gap over six hours
gives no delta: the new values are the baseline. Deltas go into buckets kept in memory, so a signal's
value is a count over a fixed span (the last hour, the last day) whatever the report interval, and every
port is judged from its buckets on every report, whether or not this report brought it new errors.

- `nic_crc_error_rate`, subject the interface, on reports that brought the port new errors: frames with a
  bad FCS plus alignment (frame) errors in the last hour. Symbol errors are evidence only (`symbol`): by
  IEEE 802.3 clause 30 a frame with a symbol error is counted as an FCS or alignment error too; they count
  only on a port without an FCS counter. `rising` when errors arrived in at least RISING_BUCKETS of the
  hour's twelve five-minute buckets, or in every report the hour can hold when reports are 20 minutes or
  more apart (`needed`): a steady stream (a dirty optic, a bad cable), not the burst of a re-seat.
  `over_allowance` when the hour's count is at least max(100, 3 x what the PHY's IEEE BER objective allows
  at line rate, `ieee_allowance_per_hour`). A report with a new link down on the port empties its buckets
  and its own errors are not counted: a re-seat, a swap or link training leaves errors that are not the
  fault. `scope` is `every-port` when every linked port with an FCS counter (two or more) is rising and
  at least half way to its allowance floor (`erring`: so a NIC whose ports cross the floor a report apart
  is never a cable ticket for the first): then it is the NIC, its slot or the host (or the one switch they
  all reach), not a cable, and `nic_errors_every_port` says so with the candidates (its `over_allowance`
  when every port is over); else `one-port`.
- `nic_link_flaps`, subject the interface, on reports with a new down: link downs in the last day (the
  PHY's own count, link_down_events_phy / link_down_events, when the driver has it: it does not count
  ring, channel or MTU changes; else carrier_down_count, else half of carrier_changes). Downs in a report
  whose kernel log has a transmit timeout on the port are the driver's reset (nic-tx-timeouts' fault), not
  counted. `redundant` when another port of the host has a link (its bond partner or any other) that is not
  flapping too, and for a bond member is in the active 802.3ad aggregator (or in another one while the port is
  its own aggregator's only linked member); "unreported" when the report does not give the partner's bond
  state (remediator/derive/network_ports.py port_redundancy).
- `nic_drop_rate`, subject the interface: packets dropped (rx_dropped, rx_missed_errors, tx_dropped) per
  hour over the interval, from one a second on: host-side load (rings, CPU) far more often than hardware,
  so no rule acts on it.
- `counter_reset`, subject the interface: its counters went down without a reboot (a driver reload).
Every port signal's detail names the part: interface, driver, PCI address, NIC firmware (from identity)
and the switch port LLDP gave (`where`, one line for a ticket title). Counted signals carry `since` (the
earliest time counted) and `counted` ([epoch seconds, count] pairs: a bucket's start, `counted_s` its width;
a report's downs at the report's time, though they happened since the previous report: a bucket the resolve
falls in is uncertain; `nic_errors_every_port` also each port's own, `counted_ports`, for up to
MAX_PORTS_COUNTED ports): a detection while a repair is verified reopens its ticket only on what was
counted after the repair (remediator.recount, remediator.repairs.route_detection).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Collection
from typing import Any

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field

from checker.parsers.network import CRC_COUNTERS, LINK_DOWN_COUNTERS, SYMBOL_COUNTERS, first_of
from checker.schemas import Identity, NetworkState, NicPort
from remediator.derive.network_ports import every_port_signal, flapping_ports, part_of, port_redundancy
from remediator.signals import MAX_GAP_S, SignalValue

HOUR_S = 3600
DAY_S = 24 * HOUR_S
CRC_BUCKET_S = 300  # twelve buckets an hour
RISING_BUCKETS = 3
MAX_DOWNS_KEPT = 64  # a port's downs of the day, one entry per report with one (more is flapping anyway)
MAX_PORTS = 32
# Drops below one a second are noise on any busy host (rx_dropped also counts frames no protocol took):
# our own floor, so the signal is not a row per port per report everywhere.
DROP_FLOOR_PER_HOUR = 3600.0
ERROR_FLOOR_PER_HOUR = 100  # our own floor below which no port is over its allowance
ALLOWANCE_FACTOR = 3

Bucket = tuple[int, int]
# crc, symbol, frame, drops, link downs (None: the port has no such counter)
Counters = tuple[int | None, int | None, int | None, int | None, int | None]


def ber_objective(speed_mbps: int) -> float:
    """The IEEE 802.3 BER objective at the MAC/PLS interface: 1e-12 for 10GBASE-R (802.3ae), 25GBASE-R
    (802.3by) and 40/100GBASE-R (802.3ba), 1e-13 for 200G and 400G (802.3bs)."""
    return 1e-13 if speed_mbps >= 200_000 else 1e-12


def allowance_per_hour(speed_mbps: int | None) -> float | None:
    """Bit errors an hour the objective allows at line rate: an upper bound on errored frames."""
    if not speed_mbps:
        return None
    return round(speed_mbps * 1e6 * HOUR_S * ber_objective(speed_mbps), 3)


class NetMemory(BaseModel):
    model_config = ConfigDict(extra="ignore")

    at: AwareDatetime
    boot: str | None = None
    ports: dict[str, Counters] = Field(default_factory=dict, description="Interface -> its counters last seen.")
    errors: dict[str, list[Bucket]] = Field(
        default_factory=dict, description="Interface -> link errors per five-minute bucket (the last hour)."
    )
    first: dict[str, int] = Field(
        default_factory=dict, description="Interface -> epoch seconds of the first report its buckets count."
    )
    downs: dict[str, list[Bucket]] = Field(
        default_factory=dict, description="Interface -> (epoch seconds, link downs) per report with one (a day)."
    )
    sources: dict[str, str] = Field(
        default_factory=dict, description="Interface -> the counters its values came from ('crc|symbol|downs')."
    )


def counters_of(port: NicPort) -> tuple[Counters, str]:
    """The port's counters, and which sources gave them: when a source changes between reports (ethtool
    failed once, or was installed), the values are a new baseline, never a delta across two counters."""
    crc = first_of(CRC_COUNTERS, port.driver_counters) or first_of(("rx_crc_errors",), port.statistics)
    symbol = first_of(SYMBOL_COUNTERS, port.driver_counters)
    stats = port.statistics
    drops = [stats[n] for n in ("rx_dropped", "rx_missed_errors", "tx_dropped") if n in stats]
    if (phy := first_of(LINK_DOWN_COUNTERS, port.driver_counters)) is not None:
        downs: int | None = phy[1]
        down_source = phy[0]
    elif port.carrier_down_count is not None:
        downs, down_source = port.carrier_down_count, "carrier_down_count"
    else:
        downs = (port.carrier_changes + 1) // 2 if port.carrier_changes is not None else None
        down_source = "carrier_changes"
    counters = (
        crc[1] if crc else None,
        symbol[1] if symbol else None,
        stats.get("rx_frame_errors"),
        sum(drops) if drops else None,
        downs,
    )
    return counters, "|".join((crc[0] if crc else "", symbol[0] if symbol else "", down_source))[:200]


def _delta(now: Counters, before: Counters) -> tuple[int, ...] | None:
    """Each counter's growth; None when any went down (the driver reloaded: every counter restarted)."""
    deltas = []
    for new, old in zip(now, before, strict=True):
        if new is None or old is None:
            deltas.append(0)
        elif new < old:
            return None
        else:
            deltas.append(new - old)
    return tuple(deltas)


def _add(buckets: list[Bucket], at: dt.datetime, count: int) -> list[Bucket]:
    """Five-minute buckets of the last hour, with `count` added to the one of `at`."""
    index = int(at.timestamp()) // CRC_BUCKET_S
    first = index - HOUR_S // CRC_BUCKET_S + 1
    kept = [b for b in buckets if b[0] >= first]
    if count:
        if kept and kept[-1][0] == index:
            kept[-1] = (index, kept[-1][1] + count)
        else:
            kept.append((index, count))
    return kept


def _add_downs(entries: list[Bucket], at: dt.datetime, count: int) -> list[Bucket]:
    """The day's downs, one (epoch seconds, count) entry per report with some."""
    stamp = int(at.timestamp())
    kept = [e for e in entries if e[0] > stamp - DAY_S]
    if count:
        kept.append((stamp, count))
    return kept[-MAX_DOWNS_KEPT:]


def error_floor(allowance: float | None) -> float:
    """The hour's count from which a port is over its allowance: ERROR_FLOOR_PER_HOUR, or ALLOWANCE_FACTOR
    times what the BER objective allows, whichever is more (remediator.recount judges a recount by it too)."""
    return max(ERROR_FLOOR_PER_HOUR, ALLOWANCE_FACTOR * (allowance or 0.0))


def _iso(epoch: int) -> str:
    return dt.datetime.fromtimestamp(epoch, dt.UTC).isoformat()


def _needed(elapsed: float) -> int:
    """Buckets with errors that make a stream steady: RISING_BUCKETS, or as many reports as the hour's
    buckets hold at this report interval when that is fewer (two at 30 minutes, one at an hour)."""
    per_hour = int((HOUR_S - CRC_BUCKET_S) // max(elapsed, 1.0)) + 1 if elapsed > 0 else RISING_BUCKETS
    return max(1, min(RISING_BUCKETS, per_hour))


def _judge(port: NicPort, memory: NetMemory, elapsed: float) -> dict[str, Any]:
    """The port's last hour, from its buckets."""
    buckets = memory.errors.get(port.interface, [])
    last_hour = sum(n for _, n in buckets)
    active = sum(1 for _, n in buckets if n)
    needed = _needed(elapsed)
    allowance = allowance_per_hour(port.speed_mbps)
    floor = error_floor(allowance)
    since = max(memory.first.get(port.interface, 0), buckets[0][0] * CRC_BUCKET_S) if buckets else None
    return {
        "erring": bool(last_hour) and active >= needed and last_hour >= floor / 2,
        "last_hour": last_hour,
        "buckets_with_errors": active,
        "needed": needed,
        "rising": bool(last_hour) and active >= needed,
        "ieee_allowance_per_hour": allowance,
        "over_allowance": last_hour >= floor,
        "since": _iso(since) if since is not None else None,
        "counted": [[i * CRC_BUCKET_S, n] for i, n in buckets],
        "counted_s": CRC_BUCKET_S,  # each entry counts [t, t + 5 min) (remediator.recount)
    }


def network_signals(
    network: NetworkState | None,
    identity: Identity | None,
    previous: NetMemory | None,
    *,
    now: dt.datetime,
    boot_id: str | None,
    tx_timeouts: Collection[str] = (),
) -> tuple[list[SignalValue], NetMemory | None]:
    """The report's port signals, and the memory the next report is judged against. `tx_timeouts`: the
    interfaces whose transmit queue timed out in this report's kernel log (their downs are resets)."""
    if network is None:
        return [], previous
    rebooted = previous is not None and boot_id is not None and previous.boot is not None and boot_id != previous.boot
    elapsed = (now - previous.at).total_seconds() if previous is not None else 0.0
    usable = previous is not None and not rebooted and 0 < elapsed <= MAX_GAP_S
    memory = NetMemory(at=now, boot=boot_id)
    signals: list[SignalValue] = []
    new_errors: dict[str, dict[str, Any]] = {}
    ports = network.ports[:MAX_PORTS]
    flapped: list[tuple[NicPort, dict[str, Any], int, bool, str]] = []
    for port in ports:
        name = port.interface
        counters, sources = counters_of(port)
        memory.ports[name] = counters
        memory.sources[name] = sources
        same = previous is not None and previous.sources.get(name, sources) == sources
        before = previous.ports.get(name) if previous is not None and usable and same else None
        deltas = _delta(counters, before) if before is not None else None
        if before is not None and deltas is None:
            detail = {"source": "network", "before": list(before), "now": list(counters), "rebooted": False}
            signals.append(SignalValue("counter_reset", name, float(counters[0] or 0), detail))
        crc, symbol, frame, drops, downs = deltas or (0, 0, 0, 0, 0)
        errors = (crc if counters[0] is not None else symbol) + frame
        old_errors = previous.errors.get(name, []) if previous is not None else []
        old_downs = previous.downs.get(name, []) if previous is not None else []
        first = previous.first.get(name) if previous is not None else None
        reset_downs = bool(downs) and name in tx_timeouts
        if downs:  # a link down: what came before, and the training errors after it, are not the fault
            old_errors, errors, first = [], 0, None
        memory.errors[name] = _add(old_errors, now, errors)
        if memory.errors[name]:
            memory.first[name] = first if first is not None else int(now.timestamp())
        memory.downs[name] = _add_downs(old_downs, now, 0 if reset_downs else downs)
        part = part_of(port, identity, network)
        if errors:
            new_errors[name] = {
                **part,
                "new": errors,
                "crc": crc,
                "symbol": symbol,
                "frame": frame,
                "per_hour": round(errors * HOUR_S / elapsed, 3),
                "interval_s": round(elapsed, 3),
            }
        if downs:
            flapped.append((port, part, downs, reset_downs, sources.rsplit("|", 1)[-1]))
        if drops and drops * HOUR_S / elapsed >= DROP_FLOOR_PER_HOUR:
            detail = {**part, "new": drops, "interval_s": round(elapsed, 3)}
            signals.append(SignalValue("nic_drop_rate", name, drops * HOUR_S / elapsed, detail))
    # redundancy once every port's downs of the day are in: a partner flapping too is no backup (finding 3)
    flapping = flapping_ports(memory.downs)
    by_name = {p.interface: p for p in ports}
    for name, detail in new_errors.items():
        detail.update(port_redundancy(by_name[name], ports, flapping))
    for port, part, downs, reset_downs, source in flapped:
        signals += _flaps(port, ports, part, memory, downs, reset_downs, source, flapping)
    signals += _error_signals(network, identity, memory, new_errors, elapsed)
    return signals, memory


def _flaps(
    port: NicPort,
    ports: list[NicPort],
    part: dict[str, Any],
    memory: NetMemory,
    downs: int,
    reset: bool,
    source: str,
    flapping: Collection[str] = (),
) -> list[SignalValue]:
    entries = memory.downs[port.interface]
    if reset or not entries:
        return []
    detail = {
        **part,
        **port_redundancy(port, ports, flapping),
        "new": downs,
        "last_day": sum(n for _, n in entries),
        "source": source,
        "since": _iso(entries[0][0]),
        "counted": [list(e) for e in entries],
        "carrier_changes": port.carrier_changes,
    }
    return [SignalValue("nic_link_flaps", port.interface, float(detail["last_day"]), detail)]


def _countable(port: NicPort, memory: NetMemory) -> bool:
    """A data port that can say whether it errs: linked, with a device, with an FCS counter."""
    counters = memory.ports.get(port.interface)
    linked = port.operstate == "up" or port.carrier is True
    return linked and port.physical and counters is not None and counters[0] is not None


def _error_signals(
    network: NetworkState,
    identity: Identity | None,
    memory: NetMemory,
    new_errors: dict[str, dict[str, Any]],
    elapsed: float,
) -> list[SignalValue]:
    """Per-port error signals, and the every-port one when all countable linked ports are rising together:
    every port judged from its buckets, so a report in which one of them saw no new error changes nothing."""
    linked = [p for p in network.ports[:MAX_PORTS] if _countable(p, memory)]
    judged = {p.interface: _judge(p, memory, elapsed) for p in network.ports[:MAX_PORTS]}
    every = len(linked) >= 2 and all(judged[p.interface]["erring"] for p in linked)
    signals = [
        SignalValue(
            "nic_crc_error_rate",
            name,
            float(judged[name]["last_hour"]),
            {**d, **judged[name], "scope": "every-port" if every else "one-port"},
        )
        for name, d in new_errors.items()
    ]
    if every:
        details = {p.interface: {**part_of(p, identity, network), **judged[p.interface]} for p in linked}
        floors = {p.interface: error_floor(judged[p.interface]["ieee_allowance_per_hour"]) for p in linked}
        signals.append(every_port_signal(linked, details, floors))
    return signals
