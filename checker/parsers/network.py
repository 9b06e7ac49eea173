"""Network ports: `ethtool -S IFACE` (the driver's own counters), `lldpctl -f json` (the switch port a NIC
is cabled to) and the sysfs values of /sys/class/net/IFACE.

Drivers name their counters differently: mlx5 counts FCS errors the PHY saw as `rx_crc_errors_phy`, ice
as `rx_crc_errors.nic`, i40e as `port.rx_crc_errors`, bnxt_en as `rx_fcs_err_frames`. The names below
pick one counter per meaning (the first a port has), so no error is counted twice.
"""

from __future__ import annotations

import json
import re
from typing import Any

from checker.parsers.common import Parsed, clip, guarded, problem, to_int
from checker.schemas import LldpNeighbor

# One meaning, the names drivers give it (the first present is used).
CRC_COUNTERS = (
    "rx_crc_errors_phy",  # mlx5: frames with a bad FCS at the PHY
    "rx_crc_errors.nic",  # ice
    "port.rx_crc_errors",  # i40e
    "rx_fcs_err_frames",  # bnxt_en
    "rx_fcs_errors",  # tg3
    "rx_crc_errors",  # ixgbe, igb and most others (as the kernel's statistics/rx_crc_errors)
)
# Evidence beside the FCS count, not added to it (a frame with a symbol error is an FCS error too).
# bnxt_en's rx_pcs_symbol_err is left out: no source says whether it counts before or after FEC, and
# before FEC every healthy PAM4 port counts all the time.
SYMBOL_COUNTERS = (
    "rx_symbol_err_phy",  # mlx5: symbol errors the PHY saw
    "rx_pcs_symbol_err_phy",  # mlx5, the PCS's count
)
LINK_DOWN_COUNTERS = (
    "link_down_events_phy",  # mlx5: the PHY's own count of link downs
    "link_down_events",  # bnxt_en (bnxt_port_stats_ext_arr)
)
_ERROR_NAME = re.compile(
    r"crc|fcs|symbol|align|link_down|discard|drop|err|fault|illegal|jabber|fragment|undersize|oversize|missed",
    re.IGNORECASE,
)
# Per-queue, per-channel and per-priority counters (mlx5 rx3_…, ch0_…, rx_prio0_…; ixgbe rx_queue_3_…,
# virtio rx_queue_0_…, ice rx_queue_3.…, tx-0.…): their port-level sums are what the rules read.
_PER_QUEUE = re.compile(
    r"^(?:rx|tx|ch|xdp|ptp)[-_]?\d+[_.]|queue[-_]?\d+|\[\d+\]|_prio\d+_|_pri\d+$|^(?:rx|tx)-\d+\.", re.IGNORECASE
)
MAX_COUNTERS = 48

# bnxt_en prefixes its per-ring counters with the ring: "     [0]: rx_ucast_packets: 391845113".
_STAT_LINE = re.compile(r"^\s+(?P<name>(?:\[\d{1,5}\]: )?[^:]{1,128}?):\s+(?P<value>-?\d+)\s*$")


def port_error_counter(name: str) -> bool:
    """A port-level counter of errors, drops or link downs (not a per-queue one, not a traffic count)."""
    return bool(_ERROR_NAME.search(name)) and not _PER_QUEUE.search(name)


@guarded(dict)
def parse_ethtool_stats(text: str) -> Parsed[dict[str, int]]:
    """`ethtool -S IFACE`: 'NIC statistics:' and one '     name: value' line per counter. Negative or
    unparsable values are skipped and said; a driver without statistics prints an error instead."""
    counters: dict[str, int] = {}
    problems: list[str] = []
    seen_header = False
    for line in text.splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        if line.rstrip().endswith("statistics:") and not line.startswith((" ", "\t")):
            seen_header = True
            continue
        match = _STAT_LINE.match(line)
        if match is None:
            if len(problems) < 5:
                problems.append(problem("not a 'name: value' counter line", line))
            continue
        value = to_int(match.group("value"))
        if value is None or value < 0:
            if len(problems) < 5:
                problems.append(problem("counter out of range", line))
            continue
        counters.setdefault(match.group("name").strip(), value)
    if not counters and not seen_header:
        return Parsed({}, [problem("no 'NIC statistics:' header and no counters", text)])
    return Parsed(counters, problems)


def port_counters(counters: dict[str, int]) -> dict[str, int]:
    """The counters a report keeps: the known CRC, symbol and link-down names first, then other error
    counters, at most MAX_COUNTERS."""
    known = [n for n in (*CRC_COUNTERS, *SYMBOL_COUNTERS, *LINK_DOWN_COUNTERS) if n in counters]
    rest = sorted(n for n in counters if n not in known and port_error_counter(n))
    return {clip(n, 128): counters[n] for n in [*known, *rest][:MAX_COUNTERS]}


def first_of(names: tuple[str, ...], counters: dict[str, int]) -> tuple[str, int] | None:
    """The first counter of `names` the port has, with its value."""
    for name in names:
        if name in counters:
            return name, counters[name]
    return None


def _text(value: Any, limit: int) -> str | None:
    if isinstance(value, list):  # lldpd gives a list when a field has several values (mgmt-ip)
        value = value[0] if value else None
    if isinstance(value, dict):
        value = value.get("value")
    if isinstance(value, str | int) and str(value).strip():
        return clip(str(value).strip(), limit)
    return None


def _port_name(port: dict[str, Any]) -> str | None:
    """The switch port's name: its id when the switch sends an ifname or a local name, else (a MAC) the
    description, which is where such switches put the name (Arista: 'Ethernet13/1')."""
    raw_id = port.get("id")
    port_id: dict[str, Any] = raw_id if isinstance(raw_id, dict) else {}
    if port_id.get("type") in ("ifname", "local", "ifalias"):
        return _text(port_id, 128)
    return _text(port.get("descr"), 128) or _text(port_id, 128)


def _neighbor(entry: dict[str, Any]) -> LldpNeighbor:
    chassis = entry.get("chassis") or {}
    name: str | None = None
    if isinstance(chassis, dict) and not isinstance(chassis.get("id"), dict) and len(chassis) == 1:
        name, chassis = next(iter(chassis.items()))  # {"<SysName>": {...}}: the switch's name is the key
    chassis = chassis if isinstance(chassis, dict) else {}
    raw_port = entry.get("port")
    port: dict[str, Any] = raw_port if isinstance(raw_port, dict) else {}
    return LldpNeighbor(
        chassis=clip(name, 256) if name else None,
        chassis_id=_text(chassis.get("id"), 128),
        port=_port_name(port),
        port_descr=_text(port.get("descr"), 256),
        mgmt_ip=_text(chassis.get("mgmt-ip"), 64),
    )


@guarded(dict)
def parse_lldpctl_json(text: str) -> Parsed[dict[str, LldpNeighbor]]:
    """`lldpctl -f json` (lldpd 0.9 on): local interface -> the neighbour it hears. lldpd writes one
    interface as an object and several as a list of one-key objects (lldpd issue #236); both are read."""
    try:
        data = json.loads(text)
    except (ValueError, RecursionError) as error:  # nesting deeper than the decoder's stack: not lldpctl's
        return Parsed({}, [problem(f"not JSON ({type(error).__name__})", text)])
    lldp = data.get("lldp") if isinstance(data, dict) else None
    if not isinstance(lldp, dict):
        return Parsed({}, [problem("no 'lldp' object", text)])
    interfaces = lldp.get("interface") or []
    items: list[tuple[str, Any]] = []
    for block in interfaces if isinstance(interfaces, list) else [interfaces]:
        if isinstance(block, dict):
            items += list(block.items())
    found: dict[str, LldpNeighbor] = {}
    problems: list[str] = []
    for interface, entry in items[:256]:
        if not isinstance(entry, dict):
            problems.append(problem(f"interface {interface}: not an object", str(entry)))
            continue
        found.setdefault(clip(str(interface), 64), _neighbor(entry))
    return Parsed(found, problems)


def parse_sysfs_int(text: str | None) -> int | None:
    """A counter or speed file of /sys/class/net: a whole number; -1 (speed of a link that is down) is None."""
    value = to_int(text.strip()) if text else None
    return value if value is not None and value >= 0 else None
