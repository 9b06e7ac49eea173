"""The evidence bundle the remediator hands to tickets: where the part is, what it showed, why it
is ticketed and what was tried — each string and list bounded, so a bundle stays small.
"""

from __future__ import annotations

import datetime as dt
import functools
import re
from collections.abc import Sequence
from typing import Any

from sqlalchemy import or_, select
from sqlalchemy.orm import Session, selectinload

from remediator.derive.capacity import capacity_part
from remediator.derive.cxl import cxl_functions, cxl_part
from remediator.derive.xid import nvswitch_part
from remediator.dimm_redfish import (
    before_this_boot,
    bmc_counts,
    inventory_of_this_boot,
    latest_modules,
    match_module,
    merge_part,
)
from remediator.dimms import DimmLabelMaps, attribute, load_label_maps, locate_in_observations
from remediator.gpu_diag import dcgm_diag_of
from remediator.gpu_parts import gpu_part, pci_address, same_device
from remediator.models import Host, Remediation, Signal
from remediator.models import Report as ReportRow
from remediator.network_evidence import nic_counters, nic_part
from remediator.os_evidence import filesystem_part, workload_part
from remediator.pcie_evidence import link_ends, pcie_history, pcie_part

REPORTS_SCANNED = 50
"""Stored reports (each a distinct observation state of the host) searched for the part's history."""
MAX_STRING = 8000
MAX_ITEMS = 200
SEL_SENSORS = {
    "dimm": {"memory"},
    "psu": {"power supply", "power unit"},
    "fan": {"fan", "cooling device"},
    # an airflow ticket (a rack's cooling too): the BMC's temperature threshold entries of the host that ran hot
    "airflow": {"temperature"},
}
KERNEL_KINDS = {
    "dimm": {"edac_ce", "edac_ue", "mce_hardware_error", "mce_logged", "cmci_storm", "ghes_error", "memory_failure"},
    "disk": {"block_io_error", "nvme_timeout", "nvme_reset"},
    "fan": {"thermal_throttle"},
    "cpu": {"mce_hardware_error", "mce_logged"},
    "host": {"panic", "oops", "hard_lockup", "soft_lockup", "hung_task", "mce_hardware_error"},
    "nic": {"nic_link_down", "nic_link_up", "nic_tx_timeout"},
    "filesystem": {"fs_error", "fs_readonly"},
    "workload": {"oom_kill"},
    "pcie_device": {"pcie_aer_corrected", "pcie_aer_uncorrected", "cxl_protocol_error"},  # a CXL port's CPER too
    "gpu": {"gpu_xid", "gpu_fallen_off_bus", "gpu_identity"},  # matched by PCI address (remediator/gpu_parts.py)
    "nvswitch": {"gpu_sxid"},
    # by its PCI function; its AER lines say whether the link went ("type=Inaccessible")
    "cxl_memory": {
        "cxl_protocol_error",
        "cxl_mem_disabled",
        "cxl_device_failed",
        "cxl_mem_resumed",
        "pcie_aer_corrected",
        "pcie_aer_uncorrected",
    },
}


def evidence_bundle(
    session: Session, host: Host, remediation: Remediation, *, part_type: str | None = None
) -> dict[str, Any]:
    """What the technician needs, frozen when the ticket opens (see docs/tickets.md)."""
    if part_type is None:
        part_type = next(
            (
                str(s.params.get("part_type"))
                for s in remediation.steps
                if s.action == "ticket" and s.params.get("part_type")
            ),
            "host",
        )
    bundle = part_evidence(
        session,
        host,
        part_type,
        remediation.subject,
        reason=remediation.reason,
        rule=remediation.rule_id,
        remediation=remediation,
    )
    gaps = verification_gaps(bundle.get("remediations") or [])
    tests = load_tests(bundle.get("remediations") or [])
    return {**bundle, **({"gaps": gaps} if gaps else {}), **({"load_tests": tests} if tests else {})}


def verification_gaps(attempts: list[dict[str, Any]]) -> list[str]:
    """What earlier steps could not check (verify_memory_under_load without stressapptest …), each once:
    a ticket says what was never verified rather than let it pass for verified."""
    found: dict[str, None] = {}
    for attempt in attempts:
        for step in attempt.get("steps") or []:
            changed = (step.get("result") or {}).get("changed") or {}
            if isinstance(changed, dict):
                for gap in [changed.get("gap"), *(changed.get("gaps") or [])]:
                    if isinstance(gap, str) and gap:
                        found.setdefault(f"{step.get('action')}: {gap}", None)
    return list(found)[:20]


def load_tests(attempts: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Earlier runs under load (verify_memory_under_load after a hard PPR …), oldest first: the verdict, the
    DIMMs that erred and whether the one verified was among them, the share of memory tested."""
    found: list[dict[str, Any]] = []
    for attempt in attempts:
        for step in attempt.get("steps") or []:
            changed = (step.get("result") or {}).get("changed")
            if step.get("action") != "verify_memory_under_load" or not isinstance(changed, dict):
                continue
            listed, coverage = changed.get("dimms_erred") or [], changed.get("coverage") or {}
            erred = [d.get("label") or d.get("location") for d in listed if isinstance(d, dict)]
            run = {"remediation_id": attempt.get("id"), "verdict": changed.get("verdict"), "dimm": changed.get("dimm")}
            share = coverage.get("percent_of_available") if isinstance(coverage, dict) else None
            run.update(dimms_erred=erred, dimm_erred=changed.get("dimm_erred"), percent_tested=share)
            found.append(run)
    return found[-10:]


def part_evidence(
    session: Session,
    host: Host,
    part_type: str,
    subject: str,
    *,
    reason: str,
    rule: str | None = None,
    remediation: Remediation | None = None,
) -> dict[str, Any]:
    """The evidence bundle of one part of one host: where it is, what it is, what it said, what was tried."""
    reports = [
        row.body
        for row in session.scalars(
            select(ReportRow)
            .where(ReportRow.host_id == host.id)
            .order_by(ReportRow.captured_at.desc())
            .limit(REPORTS_SCANNED)
        )
    ]
    reports.reverse()  # oldest first
    latest = reports[-1] if reports else {}
    observations = latest.get("observations") or {}
    identity = observations.get("identity") or {}
    firmware = identity.get("firmware") or {}
    recent = session.scalars(
        select(Signal)
        .where(Signal.host_id == host.id, Signal.subject == subject)
        .order_by(Signal.observed_at.desc())
        .limit(50)
    ).all()
    bundle: dict[str, Any] = {
        "location": {
            "datacenter": host.datacenter,
            "row": host.row,
            "rack": host.rack,
            "slot": host.slot,
            "hardware_class": host.hardware_class,
            "cluster": host.cluster,
        },
        "host": {
            "hostname": host.hostname,
            "machine_id": host.machine_id,
            "state": host.state.value,
            "last_report_at": host.last_report_at.isoformat() if host.last_report_at else None,
            "kernel": identity.get("kernel"),
            "system": {k: firmware.get(k) for k in ("system_manufacturer", "system_product", "system_serial")},
            "bios_version": firmware.get("bios_version"),
        },
        "part_type": part_type,
        "part": _part(
            part_type,
            subject,
            observations,
            hardware_class=host.hardware_class,
            recent=recent,
            redfish_memory=latest_modules(reports) if part_type == "dimm" else (),
            redfish_current=inventory_of_this_boot(reports),
        ),
        "reason": reason,
        "rule": rule,
        "remediation_id": remediation.id if remediation is not None else None,
        "signals": [
            {"kind": s.kind, "value": s.value, "at": s.observed_at.isoformat(), "detail": _bounded(s.detail)}
            for s in recent
        ],
        "counter_history": _counter_history(part_type, subject, reports),  # by name; by serial below
        "sel": _sel_entries(part_type, subject, reports),
        "kernel_log": _kernel_events(part_type, subject, reports),
        "remediations": _attempts(session, host, subject, remediation),
    }
    if part_type == "dimm":
        bundle["error_reporting"] = _error_reporting(session, host)
        part = bundle["part"]
        if part.get("certain") and part.get("serial"):  # the BMC's counts of the same module, by its serial
            bundle["counter_history"] = _counter_history(part_type, subject, reports, part["serial"])
    if part_type == "disk":
        bundle["smart"] = _bounded(_disk(subject, observations))
    if part_type == "gpu" and (diag := dcgm_diag_of(bundle["part"], observations)) is not None:
        bundle["dcgm_diag"] = diag  # the site's dcgmi diag run: evidence only (remediator/gpu_diag.py)
    if part_type == "power_feed":
        bundle["rack_input_loss"] = rack_input_loss(session, host)
    if opened := chassis_opened(session, host):
        bundle["chassis_intrusion"] = opened
    return bundle


def _error_reporting(session: Session, host: Host) -> dict[str, Any]:
    """The host's newest SMI rate and reporting mode beside a DIMM's errors (docs/error-reporting.md):
    whether its CEs cost SMIs (firmware-first, or SMIs that track the CE rate) is the technician's to see."""
    out: dict[str, Any] = {}
    for kind in ("smi_rate", "error_reporting_mode"):
        newest = session.scalars(
            select(Signal)
            .where(Signal.host_id == host.id, Signal.kind == kind)
            .order_by(Signal.observed_at.desc())
            .limit(1)
        ).first()
        if newest is not None:
            out[kind] = {"value": newest.value, "at": newest.observed_at.isoformat(), "detail": _bounded(newest.detail)}
    return out


RACK_FEED_WINDOW = dt.timedelta(hours=1)


CHASSIS_WITHIN = dt.timedelta(days=7)  # ours: a technician's visit the part's fault may follow


def chassis_opened(session: Session, host: Host) -> list[dict[str, Any]]:
    """The host's chassis intrusions (the BMC's log, `chassis_intrusion`: no rule of its own) within a week
    of its newest: a part that fails after the chassis was opened may have been reseated or swapped (the
    review of the Redfish rules, note 14)."""
    rows = session.scalars(
        select(Signal)
        .where(Signal.host_id == host.id, Signal.kind == "chassis_intrusion")
        .order_by(Signal.observed_at.desc())
        .limit(5)
    ).all()
    newest = rows[0].observed_at if rows else None
    return [
        {"at": r.observed_at.isoformat(), "sensor": r.subject, "events": (r.detail or {}).get("events")}
        for r in rows
        if newest is not None and newest - r.observed_at <= CHASSIS_WITHIN
    ]


def rack_input_loss(session: Session, host: Host) -> dict[str, Any] | None:
    """The hosts of this host's rack whose PSUs lost their input within an hour of this host's latest
    loss (this one among them): several at once point at the rack's feed (its PDU or breaker), not at
    each host's PSU."""
    if not host.rack:
        return None
    latest = session.scalar(
        select(Signal.observed_at)
        .where(Signal.host_id == host.id, Signal.kind == "psu_input_lost")
        .order_by(Signal.observed_at.desc())
        .limit(1)
    )
    if latest is None:
        return None
    names = session.scalars(
        select(Host.hostname)
        .join(Signal, Signal.host_id == Host.id)
        .where(
            Host.datacenter == host.datacenter,
            Host.rack == host.rack,
            Signal.kind == "psu_input_lost",
            Signal.observed_at >= latest - RACK_FEED_WINDOW,
            Signal.observed_at <= latest + RACK_FEED_WINDOW,
        )
        .distinct()
        .order_by(Host.hostname)
        .limit(MAX_ITEMS)
    ).all()
    return {"datacenter": host.datacenter, "rack": host.rack, "hosts": list(names), "window_s": 3600}


def ticket_title(title: str, evidence: dict[str, Any]) -> str:
    """The rule's title, with what the evidence adds that a technician must read first: a power-feed
    check names the rack's feed when several hosts of the rack lost their input together."""
    feed = evidence.get("rack_input_loss") if evidence.get("part_type") == "power_feed" else None
    if isinstance(feed, dict) and len(feed.get("hosts") or []) >= 2:
        return f"{title} ({len(feed['hosts'])} hosts of rack {feed['rack']} lost input: check the rack's feed)"
    return title


def _norm(text: str) -> str:
    return "".join(ch for ch in text.lower() if ch.isalnum())


@functools.cache
def dimm_label_maps() -> DimmLabelMaps:
    return load_label_maps()


BMC_DIMM_KINDS = frozenset(
    {"sel_memory_ecc", "sel_memory_ce_rate", "bmc_dimm_ce_rate", "bmc_dimm_uncorrectable", "bmc_dimm_ce_alarm"}
)


def _dimm(
    subject: str,
    observations: dict[str, Any],
    hardware_class: str,
    recent: Sequence[Signal],
    redfish_memory: Sequence[dict[str, Any]] = (),
    redfish_current: bool = True,
) -> dict[str, Any]:
    """The DIMM a signal names, by topology and the hardware class's label map (remediator.dimms): its
    dmidecode record and serial only when that is certain, else the EDAC location and the candidates;
    then what the BMC's Redfish inventory says of the name (remediator.dimm_redfish)."""
    detail = next((s.detail for s in recent if s.detail and ("mc" in s.detail or "label" in s.detail)), None)
    location = locate_in_observations(subject, observations, detail)
    dimms = (observations.get("identity") or {}).get("dimms") or []
    found = attribute(location, dimms, hardware_class=hardware_class, label_maps=dimm_label_maps())
    if not redfish_memory:
        return found.evidence()
    served = next((s.detail for s in recent if s.detail and s.detail.get("source") == "redfish"), None)
    # The BMC named the DIMM only when no EDAC signal did (an EDAC-named subject is the EDAC label: the
    # Redfish match never overrides the host's refusal to name it; dimm_redfish.merge_part).
    bmc_named = detail is None and any(s.kind in BMC_DIMM_KINDS for s in recent)
    match = match_module(subject, served, redfish_memory)
    if not redfish_current:
        match = before_this_boot(match)
    return merge_part(found.evidence(), match, bmc_named=bmc_named)


_FIRMWARE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9 _.:#/\-]{0,127}$")  # cyborg.actions.DIMM_PATTERN


def dimm_aliases(session: Session, host: Host, subject: str) -> list[str]:
    """Other names the firmware may print for the DIMM a signal names (a GHES record's `DIMM location:` or
    `fru_text:` is usually SMBIOS's "Bank Locator Locator" or the Locator alone), for hard_ppr's
    `locations`. Only when the label map makes the DIMM certain: an uncertain one gives none, so the PPR
    capture repairs only records that name the EDAC label itself and never a neighbour's row."""
    latest = session.scalars(
        select(ReportRow).where(ReportRow.host_id == host.id).order_by(ReportRow.captured_at.desc()).limit(1)
    ).first()
    observations = (latest.body if latest is not None else {}).get("observations") or {}
    recent = session.scalars(
        select(Signal)
        .where(Signal.host_id == host.id, Signal.subject == subject)
        .order_by(Signal.observed_at.desc())
        .limit(50)
    ).all()
    part = _dimm(subject, observations, host.hardware_class, recent)
    if not part.get("certain"):
        return []
    locator, bank = (part.get("locator") or "").strip(), (part.get("bank_locator") or "").strip()
    dimms = (observations.get("identity") or {}).get("dimms") or []
    same = sum(1 for d in dimms if str(d.get("locator") or "").strip().lower() == locator.lower())
    # The Locator alone only when no other DIMM of the board has it: many boards repeat DIMM_A1 per socket,
    # told apart by the Bank Locator alone, and a record naming the other socket's DIMM_A1 must not match.
    names = [f"{bank} {locator}" if bank and locator else "", locator if same <= 1 else ""]
    return [n for n in dict.fromkeys(names) if n and n != subject and _FIRMWARE_NAME.fullmatch(n)]


def _cpu(subject: str, observations: dict[str, Any], recent: Sequence[Signal]) -> dict[str, Any]:
    """The package a CPU signal is about: `socketS bankB`, or `cpuN` with the socket its machine-check
    records named (CPU numbers are not laid out by socket on every board, so none is guessed); model and
    microcode from the identity section. A CPU has no serial the host shows."""
    socket: int | None = None
    head = subject.split()[0] if subject.split() else ""
    if head.startswith("socket") and head[6:].isdigit():
        socket = int(head[6:])
    else:
        named = next(
            (s.detail for s in recent if s.subject == subject and (s.detail or {}).get("socket") is not None), None
        )
        socket = (named or {}).get("socket")
    packages = (observations.get("identity") or {}).get("cpus") or []
    package = next((p for p in packages if p.get("socket") == socket), None)
    if package is None and len({(p.get("model_name"), p.get("microcode")) for p in packages}) == 1:
        package = packages[0]  # every package alike: the model is known even when the socket is not
    return {
        "id": subject,
        "socket": socket,
        "vendor": (package or {}).get("vendor"),
        "model": (package or {}).get("model_name"),
        "microcode": (package or {}).get("microcode"),
        "serial": None,
    }


def _disk(subject: str, observations: dict[str, Any]) -> dict[str, Any] | None:
    disks = observations.get("disks") or []
    return next((d for d in disks if subject and subject in (d.get("serial"), d.get("device"))), None)


def _part(
    part_type: str,
    subject: str,
    observations: dict[str, Any],
    *,
    hardware_class: str = "",
    recent: Sequence[Signal] = (),
    redfish_memory: Sequence[dict[str, Any]] = (),
    redfish_current: bool = True,
) -> dict[str, Any] | None:
    """What the part is, with `vendor`, `model` and `serial` named the same way for every kind."""
    if part_type == "dimm":
        return _dimm(subject, observations, hardware_class, recent, redfish_memory, redfish_current)
    if part_type == "disk":
        disk = _disk(subject, observations)
        if disk is None:
            return None
        return {
            "device": disk.get("device"),
            "slot": disk.get("device"),  # the controller port or path it is reached through
            "protocol": disk.get("protocol"),
            "vendor": (disk.get("model") or "").split(" ")[0] if " " in (disk.get("model") or "") else None,
            "model": disk.get("model"),
            "serial": disk.get("serial"),
            "firmware": disk.get("firmware"),
            "pci_address": disk.get("pci_address"),  # an NVMe drive's PCIe function (remediator.linked_parts)
        }
    if part_type == "cpu":
        return _cpu(subject, observations, recent)
    if part_type in ("pcie_device", "pcie"):  # BDF, slot, class, vendor:device, link, AER (pcie_evidence.py)
        return pcie_part(subject, observations, recent)
    if part_type == "capacity":  # what is missing: slots, serials, devices (remediator/derive/capacity.py)
        return capacity_part(subject, recent)
    if part_type == "gpu":  # index, BDF, uuid, serial, product, VBIOS (remediator/gpu_parts.py)
        return gpu_part(subject, observations, recent[0].detail if recent else None)
    if part_type == "nvswitch":  # address and nvidia-nvswitchN (remediator/derive/xid.py)
        return nvswitch_part(subject, recent[0].detail if recent else None)
    if part_type == "nic":  # interface, PCI address, driver, firmware, switch port (network_evidence.py)
        return nic_part(subject, observations, recent)
    if part_type == "cxl_memory":
        return cxl_part(subject, observations, [s.detail for s in recent if s.detail])
    if part_type == "filesystem":  # mount point, type, the disk under it (remediator/os_evidence.py)
        return filesystem_part(subject, observations)
    if part_type == "workload":  # an OOM's memory cgroup, constraint and victims (remediator/os_evidence.py)
        return workload_part(subject, recent)
    if part_type in ("psu", "fan"):
        sensors = [
            s
            for s in observations.get("sensors") or []
            if s.get("kind") == part_type and _norm(subject) in _norm(s["name"])
        ]
        return {"id": subject, "vendor": None, "model": None, "serial": None, "sensors": sensors[:20]}
    return None


def _counter_history(
    part_type: str, subject: str, reports: list[dict[str, Any]], serial: str | None = None
) -> list[dict[str, Any]]:
    """The part's counters in each stored observation state, oldest first (a row spans `at`..`until`)."""
    history: list[dict[str, Any]] = []
    for body in reports:
        observations = body.get("observations") or {}
        span = {"at": body.get("captured_at")}
        if part_type == "dimm":
            for controller in (observations.get("edac") or {}).get("controllers") or []:
                for dimm in controller.get("dimms") or []:
                    if subject in (dimm.get("label"), f"mc{dimm.get('mc')}/{dimm.get('name')}"):
                        history.append({**span, "ce": dimm.get("ce_count"), "ue": dimm.get("ue_count")})
            history += [{**span, **counts} for counts in bmc_counts(subject, observations, serial)]
        elif part_type == "disk":
            disk = _disk(subject, observations)
            if disk is not None:
                counters = ("reallocated_sectors", "pending_sectors", "offline_uncorrectable", "media_errors")
                history.append({**span, **{name: disk.get(name) for name in counters}})
        elif part_type == "nic" and (port := nic_counters(subject, observations)) is not None:
            history.append({**span, **port})
        elif part_type == "pcie_device" and (row := pcie_history(subject, observations)) is not None:
            history.append({**span, **row})
    return history[-MAX_ITEMS:]


def _sel_entries(part_type: str, subject: str, reports: list[dict[str, Any]]) -> list[dict[str, Any]]:
    sensors = SEL_SENSORS.get(part_type)
    found: dict[Any, dict[str, Any]] = {}
    for body in reports:
        for entry in ((body.get("observations") or {}).get("sel") or {}).get("entries") or []:
            names_part = bool(subject) and (entry.get("component") == subject or subject in (entry.get("raw") or ""))
            related = sensors is not None and str(entry.get("sensor_type", "")).lower() in sensors
            if names_part or related or part_type == "host":
                found[(entry.get("record_id"), entry.get("timestamp"))] = entry
    return list(found.values())[-50:]


def _kernel_events(part_type: str, subject: str, reports: list[dict[str, Any]]) -> list[dict[str, Any]]:
    kinds = KERNEL_KINDS.get(part_type, set())
    short = subject.rsplit("/", 1)[-1]
    found: dict[Any, dict[str, Any]] = {}
    # A disk ticket names the disk by serial; the kernel by its device (sda; nvme0n1 of controller nvme0).
    disk = _disk(subject, (reports[-1].get("observations") or {}) if reports else {}) if part_type == "disk" else None
    device = str(disk.get("device") or "").rsplit("/", 1)[-1] if disk else ""
    for body in reports:
        for event in ((body.get("observations") or {}).get("kernel_log") or {}).get("events") or []:
            lines = event.get("lines") or []
            names_part = bool(subject) and (
                event.get("subject") == subject or event.get("kind") == subject or any(short in line for line in lines)
            )
            related = event.get("kind") in kinds and event.get("subject") in (None, "", subject)
            if event.get("kind") in kinds and device:
                named = str(event.get("subject") or "")
                related = related or named == device or (device.startswith("nvme") and named.startswith(device + "n"))
            if event.get("kind") in kinds and part_type == "pcie_device":  # the port logs its link's errors too
                related = related or event.get("subject") in link_ends(subject, body.get("observations") or {})
            if event.get("kind") in kinds and part_type == "cxl_memory":  # the kernel names the PCI function
                related = related or event.get("subject") in cxl_functions(subject, body.get("observations") or {})
            if event.get("kind") in kinds and part_type in ("gpu", "nvswitch"):  # `gpu3 00000000:4E:00.0` too
                related = related or same_device(pci_address(subject), pci_address(str(event.get("subject") or "")))
            if names_part or related:
                found[(event.get("seq"), event.get("timestamp"), event.get("kind"))] = event
    return list(found.values())[-20:]


def _attempts(session: Session, host: Host, subject: str, current: Remediation | None) -> list[dict[str, Any]]:
    """Every remediation tried on this part (and the chain that led to the current one), with step logs."""
    chain: set[int] = set()
    previous = current.previous_id if current is not None else None
    while previous is not None and previous not in chain and len(chain) < 20:
        chain.add(previous)
        earlier = session.get(Remediation, previous)
        previous = earlier.previous_id if earlier is not None else None
    query = (
        select(Remediation)
        .where(Remediation.host_id == host.id, or_(Remediation.subject == subject, Remediation.id.in_(chain)))
        .options(selectinload(Remediation.steps))
        .order_by(Remediation.id)
    )
    return [
        {
            "id": r.id,
            "rule": r.rule_id,
            "state": r.state.value,
            "rung": r.rung,
            "reason": r.reason,
            "created_at": r.created_at.isoformat(),
            "finished_at": r.finished_at.isoformat() if r.finished_at else None,
            "steps": [
                {
                    "index": s.index,
                    "action": s.action,
                    "state": s.state.value,
                    "attempts": s.attempts,
                    "started_at": s.started_at.isoformat() if s.started_at else None,
                    "finished_at": s.finished_at.isoformat() if s.finished_at else None,
                    "result": _bounded(s.result),
                }
                for s in r.steps
            ],
        }
        for r in session.scalars(query).all()[-20:]
        if current is None or r.id != current.id or r.steps
    ]


def _bounded(value: Any) -> Any:
    """The same JSON, with long strings and lists cut (a command log can be megabytes)."""
    if isinstance(value, str):
        return value if len(value) <= MAX_STRING else value[:MAX_STRING] + f"… [{len(value) - MAX_STRING} more]"
    if isinstance(value, list):
        return [_bounded(v) for v in value[-MAX_ITEMS:]]
    if isinstance(value, dict):
        return {k: _bounded(v) for k, v in value.items()}
    return value
