"""Lost capacity (class 6): the host has less memory, fewer DIMMs, CPUs, disks or NICs than it should.

What the host has comes from its report (capacity: MemTotal, present CPUs, whole disks, physical NICs;
identity: the DIMMs dmidecode lists). What it should have comes, measure by measure, from the first of:
its inventory (a host label `capacity.<measure>`: a DIMM taken out on purpose and the inventory updated),
its class's `capacity:` block (firmware_baselines.yaml), for memory the DIMMs the board itself lists, and
otherwise the class's median (remediator/capacity_class.py: it needs the store). LBNL NHC's
check_hw_physmem, check_hw_cpuinfo and check_hw_eth make the same comparisons against a configured figure.

Having more than expected (a hot-spare disk, a NIC added) is never a finding. What went missing is named
from the host's previous inventory (kept in its memory: DIMM slots and serials, disk names and serials,
interfaces) and, for DIMMs, from the slots the class fills.
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field

from checker.schemas import Report
from remediator.capacity_baseline import DEFAULT_MEMORY_TOLERANCE_PCT, CapacityBaseline
from remediator.signals import SignalValue

MISSING, INVENTORY = "capacity_missing", "capacity_inventory"
MEASURES = ("memory", "dimms", "cpus", "disks", "nics")
LABEL_PREFIX = "capacity."  # host label capacity.dimms=11: the inventory says so
INVENTORY_EVERY = dt.timedelta(days=1)  # the inventory signal again, so the class's median never ages out
MAX_KEPT = 64  # parts remembered per measure
MAX_NAMED = 16
KIB_PER_GIB = 1024 * 1024
# Below the tolerance, a fixed allowance: a crashkernel (256 MiB-1 GiB), firmware tables and an iGPU's or
# SGX/TDX's reserved memory weigh the most on small hosts (a 16 GiB host shows about 15.2 GiB with a 256 MiB
# crashkernel, 5 % short). One lost DIMM is 4 GiB or more on any server this check is for.
MEMORY_SLACK_GIB = 1.0


class CapacityMemory(BaseModel):
    """The host's last fuller inventory (a part that vanished is named from it), and when the inventory
    signal last went out."""

    model_config = ConfigDict(extra="ignore")

    dimms: dict[str, str] = Field(default_factory=dict, description="DIMM locator -> serial ('' unknown).")
    disks: dict[str, str] = Field(default_factory=dict, description="Disk name -> serial ('' unknown).")
    nics: list[str] = Field(default_factory=list)
    sent_at: AwareDatetime | None = Field(None, description="When capacity_inventory last went out.")
    sent: dict[str, float] = Field(default_factory=dict, description="The measures it carried.")
    sel_at: dict[str, AwareDatetime] = Field(
        default_factory=dict, description="dimms/cpus -> when the SEL's own ticket signal for it last went out."
    )
    short: list[str] = Field(default_factory=list, description="The measures short in the last report.")


@dataclass
class Inventory:
    """What one report says the host has; a measure that was not read is absent, never 0."""

    measures: dict[str, float] = field(default_factory=dict)
    dimms: dict[str, str] = field(default_factory=dict)  # locator -> serial
    installed_gib: float | None = None  # the volatile DIMMs' sum per dmidecode
    non_volatile: int = 0  # Optane PMem / NVDIMM modules dmidecode lists (not in MemTotal in App Direct mode)
    disks: dict[str, str] = field(default_factory=dict)
    nics: list[str] = field(default_factory=list)
    cpus_online: int | None = None
    cpus_offline: list[int] = field(default_factory=list)
    sockets: int | None = None


def inventory_of(report: Report) -> Inventory:
    obs = report.observations
    found = Inventory()
    capacity, identity = obs.capacity, obs.identity
    if capacity is not None and capacity.mem_total_kb:
        found.measures["memory"] = round(capacity.mem_total_kb / KIB_PER_GIB, 1)
    if identity is not None and identity.dimms:  # no host has no DIMMs: an empty list is a failed dmidecode
        found.measures["dimms"] = float(len(identity.dimms))
        found.dimms = {d.locator: d.serial or "" for d in identity.dimms}
        volatile = [d for d in identity.dimms if d.non_volatile is not True]
        found.non_volatile = len(identity.dimms) - len(volatile)
        sizes = [d.size_mb for d in volatile if d.size_mb]
        found.installed_gib = round(sum(sizes) / 1024, 1) if volatile and len(sizes) == len(volatile) else None
    if capacity is not None:
        if capacity.cpus_present:  # never the online count: a CPU taken offline through sysfs is not lost
            found.measures["cpus"] = float(capacity.cpus_present)
        found.cpus_online, found.cpus_offline, found.sockets = (
            capacity.cpus_online,
            capacity.cpus_offline,
            capacity.sockets,
        )
        if capacity.disks is not None:
            found.measures["disks"] = float(len(capacity.disks))
            found.disks = {d.name: d.serial or "" for d in capacity.disks}
        if capacity.nics is not None:
            found.measures["nics"] = float(len(capacity.nics))
            found.nics = list(capacity.nics)
    if "disks" not in found.measures and obs.disks:
        found.measures["disks"] = float(len(obs.disks))
        found.disks = {d.device: d.serial or "" for d in obs.disks}
    if "nics" not in found.measures and identity is not None and identity.firmware.nics:
        found.measures["nics"] = float(len(identity.firmware.nics))
        found.nics = [n.interface for n in identity.firmware.nics]
    return found


@dataclass(frozen=True)
class Expectation:
    value: float
    source: str  # inventory, baseline, installed (the DIMMs the board lists), median
    tolerance_pct: float = 0.0
    slots: tuple[str, ...] = ()  # DIMM slots the class fills
    extra: Mapping[str, Any] = field(default_factory=dict)


def label_expectation(labels: Mapping[str, str], measure: str) -> Expectation | None:
    text = labels.get(LABEL_PREFIX + measure)
    if text is None:
        return None
    try:
        value = float(text)
    except ValueError:
        return None  # not a number: the label says nothing, the class's figure stands
    if not math.isfinite(value) or value < 0:
        return None
    return Expectation(value, "inventory", DEFAULT_MEMORY_TOLERANCE_PCT if measure == "memory" else 0.0)


def configured(
    measure: str, labels: Mapping[str, str], baseline: CapacityBaseline | None, inventory: Inventory
) -> Expectation | None:
    """The per-host expectation of one measure, or None: the class's median decides."""
    found = label_expectation(labels, measure)
    if found is not None:
        return found
    if baseline is not None and (value := baseline.expected(measure)) is not None:
        tolerance = baseline.memory_tolerance_pct if measure == "memory" else 0.0
        return Expectation(value, "baseline", tolerance, tuple(baseline.dimm_locators), {"bom": baseline.source})
    if measure == "memory" and inventory.installed_gib:
        tolerance = baseline.memory_tolerance_pct if baseline is not None else DEFAULT_MEMORY_TOLERANCE_PCT
        return Expectation(inventory.installed_gib, "installed", tolerance)
    return None


def short_of(measure: str, seen: float, expected: Expectation) -> float | None:
    """How much is missing, or None when the host has what it should (for memory: within the tolerance and
    MEMORY_SLACK_GIB below it)."""
    floor = expected.value * (1 - expected.tolerance_pct / 100)
    if measure == "memory":
        floor -= MEMORY_SLACK_GIB
    if seen >= floor - 1e-9:
        return None
    return round(expected.value - seen, 1 if measure == "memory" else 0)


def missing_signal(
    measure: str,
    seen: float,
    expected: Expectation,
    inventory: Inventory,
    kept: CapacityMemory | None,
    hardware_class: str,
) -> SignalValue | None:
    missing = short_of(measure, seen, expected)
    if missing is None:
        return None
    detail: dict[str, Any] = {
        "expected": expected.value,
        "seen": seen,
        "source": expected.source,
        "hardware_class": hardware_class,
        **dict(expected.extra),
    }
    named: list[str] = []
    if measure == "memory":
        detail.update(tolerance_pct=expected.tolerance_pct, slack_gib=MEMORY_SLACK_GIB)
        detail.update(installed_gib=inventory.installed_gib, dimms=len(inventory.dimms))
        detail["non_volatile_dimms"] = inventory.non_volatile
    elif measure == "dimms":
        empty = [slot for slot in expected.slots if slot not in inventory.dimms]
        gone = {loc: serial for loc, serial in (kept.dimms if kept else {}).items() if loc not in inventory.dimms}
        detail.update(
            empty_slots=empty[:MAX_NAMED], gone=[{"locator": k, "serial": v} for k, v in gone.items()][:MAX_NAMED]
        )
        named = list(dict.fromkeys([*gone, *empty]))
    elif measure == "cpus":
        detail.update(
            online=inventory.cpus_online, offline=inventory.cpus_offline[:MAX_NAMED], sockets=inventory.sockets
        )
    elif measure == "disks":
        gone = gone_disks(kept.disks if kept else {}, inventory.disks)
        detail["gone"] = [{"device": k, "serial": v} for k, v in gone.items()][:MAX_NAMED]
        detail["present"] = sorted(inventory.disks)[:MAX_NAMED]
        named = [f"serial {v} (was {k})" if v else k for k, v in gone.items()]
    elif measure == "nics":
        gone_nics = [n for n in (kept.nics if kept else []) if n not in inventory.nics]
        detail.update(gone=gone_nics[:MAX_NAMED], present=inventory.nics[:MAX_NAMED])
        named = gone_nics
    detail["missing"] = ", ".join(named[:MAX_NAMED]) if named else "not named (no earlier inventory shows which)"
    return SignalValue(MISSING, measure, float(missing), detail)


def gone_disks(before: Mapping[str, str], now: Mapping[str, str]) -> dict[str, str]:
    """The disks of an earlier inventory missing now: by serial where it had one (names shift when a disk
    is lost and the host reboots: sdc becomes sdb), by name only for a disk without one."""
    serials = {serial for serial in now.values() if serial}
    return {name: serial for name, serial in before.items() if (serial not in serials if serial else name not in now)}


def _remember(inventory: Inventory, kept: CapacityMemory | None) -> CapacityMemory:
    """The fuller of the two inventories per part kind: what vanished stays named until it is back."""
    kept = kept or CapacityMemory()
    update: dict[str, Any] = {}
    if inventory.dimms and len(inventory.dimms) >= len(kept.dimms):
        update["dimms"] = dict(list(inventory.dimms.items())[:MAX_KEPT])
    if "disks" in inventory.measures and len(inventory.disks) >= len(kept.disks):
        update["disks"] = dict(list(inventory.disks.items())[:MAX_KEPT])
    if "nics" in inventory.measures and len(inventory.nics) >= len(kept.nics):
        update["nics"] = inventory.nics[:MAX_KEPT]
    return kept.model_copy(update=update)


def one_per_lost_dimm(signals: list[SignalValue], *, dimms_short: bool = False) -> list[SignalValue]:
    """A lost DIMM is one finding: memory short beside a DIMM count short (this report) is left out."""
    if dimms_short or any(s.kind == MISSING and s.subject == "dimms" for s in signals):
        return [s for s in signals if not (s.kind == MISSING and s.subject == "memory")]
    return signals


def inventory_signal(inventory: Inventory, kept: CapacityMemory, now: dt.datetime) -> SignalValue | None:
    """The host's measures for its class's median: when they change, and once a day (signals age out)."""
    if not inventory.measures:
        return None
    due = kept.sent_at is None or now - kept.sent_at >= INVENTORY_EVERY
    if not due and kept.sent == inventory.measures:
        return None
    detail = {**inventory.measures, "dimm_locators": sorted(inventory.dimms)[:MAX_KEPT]}
    return SignalValue(INVENTORY, "host", inventory.measures.get("memory", 0.0), detail)


def capacity_signals(
    report: Report,
    previous: CapacityMemory | None,
    *,
    labels: Mapping[str, str],
    baseline: CapacityBaseline | None,
    hardware_class: str,
    now: dt.datetime,
) -> tuple[list[SignalValue], CapacityMemory | None]:
    """capacity_missing for every measure short of its per-host expectation, and the inventory signal."""
    if report.observations.capacity is None and report.observations.identity is None:
        return [], previous
    inventory = inventory_of(report)
    signals: list[SignalValue] = []
    for measure, seen in inventory.measures.items():
        expected = configured(measure, labels, baseline, inventory)
        if expected is not None and (
            found := missing_signal(measure, seen, expected, inventory, previous, hardware_class)
        ):
            signals.append(found)
    signals = one_per_lost_dimm(signals)
    kept = _remember(inventory, previous)
    sent = inventory_signal(inventory, kept, now)
    if sent is not None:
        signals.append(sent)
        kept = kept.model_copy(update={"sent_at": now, "sent": dict(inventory.measures)})
    return signals, kept


def capacity_part(subject: str, recent: Sequence[Any]) -> dict[str, Any]:
    """A lost-capacity ticket's part: what is missing, named as the signal named it (evidence.py)."""
    detail = next((dict(s.detail or {}) for s in recent if s.kind == MISSING), {})
    gone = detail.get("gone") or []
    serials = [g.get("serial") for g in gone if isinstance(g, dict) and g.get("serial")]
    return {
        "id": subject,
        "missing": detail.get("missing"),
        "expected": detail.get("expected"),
        "seen": detail.get("seen"),
        "source": detail.get("source"),
        "empty_slots": detail.get("empty_slots"),
        "gone": gone,
        "vendor": None,
        "model": None,
        "serial": serials[0] if len(serials) == 1 else None,
    }
