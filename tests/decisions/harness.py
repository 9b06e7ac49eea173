"""A host whose tools answer from the sample corpus (a snapshot), cycle after cycle, into the real
ingest path; and what a scenario expects the default pack to decide about it.

Each cycle runs the agent's real collectors on the snapshot (checker.cycle.run_cycle, with the
collectors' cursors kept between cycles as the agent keeps them), stamps the report with the
scenario's clock, and ingests it. The snapshot is changed between cycles the way the host would
change: a counter moves, the kernel log grows, the SEL gains entries.
"""

from __future__ import annotations

import datetime as dt
import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from bench.samples import EDAC_ROOT, SnapshotBuilder, kmsg_records, listing_to_files, sample, scan_open_json
from checker.collectors.context import CollectorState
from checker.cycle import run_cycle
from checker.schemas import Report
from remediator import runner
from remediator.ingest import ingest
from remediator.inventory import HostInventory, apply_inventory
from remediator.models import RUNNABLE_REMEDIATION_STATES, Decision, Host, Remediation
from remediator.rules import RuleSet, load_ruleset
from ticketing.models import Ticket

RULES: RuleSet = load_ruleset([])
T0 = dt.datetime(2026, 9, 1, 8, 0, tzinfo=dt.UTC)
SUPERMICRO_DMIDECODE = "dmi/dmidecode-full-supermicro-ami-3.0b.txt"
INTEL_CPUINFO = "cpuinfo/intel-i7-8650u-8thread-microcode-0xb4.txt"
SEL_INFO = "ipmi-sel/ipmitool-sel-info-545-entries.txt"


class SnapHost:
    """One host of the scenario: its snapshot, its agent's cursors, its clock."""

    def __init__(self, directory: Path, hostname: str = "dt-host-01", *, hardware_class: str = "x9drt-lab") -> None:
        self.hostname = hostname
        self.hardware_class = hardware_class
        # booted ten minutes before the scenario starts: the samples' kernel messages (stamped in seconds
        # since boot) are this boot's news, not history older than their windows
        booted = int((T0 - dt.timedelta(minutes=10)).timestamp())
        self.snap = SnapshotBuilder(directory / hostname, hostname=hostname).boot(btime=booted)
        self.snap.file("/etc/machine-id", "0f1e2d3c4b5a69788796a5b4c3d2e1f0\n")
        self.snap.file("/proc/cpuinfo", sample(INTEL_CPUINFO))
        self.snap.file("/proc/sys/kernel/osrelease", "6.1.0-28-amd64\n")
        self.snap.file("/proc/cmdline", "BOOT_IMAGE=/vmlinuz-6.1.0-28-amd64 root=/dev/sda1 ro quiet\n")
        dmidecode = sample(SUPERMICRO_DMIDECODE)
        self.snap.command(["dmidecode", "-t", "memory"], dmidecode)
        self.snap.command(["dmidecode", "-t", "bios", "-t", "system"], dmidecode)
        self.state = CollectorState()
        self.kmsg_lines: list[str] = []
        self.kmsg_seq = 100
        self.sel_lines: list[str] = []
        self.minute = 0
        self.baselines: str | None = None  # class baselines of the scenario (YAML), instead of the default file
        self.labels: dict[str, str] = {}  # inventory labels (bmc_address …)
        self.setup: list[Callable[[Session], None]] = []  # run at registration: the rest of its class, say

    # -- what the host's tools answer ------------------------------------------------------

    def edac(self, files: dict[str, str], *, poll_msec: int | None = None) -> SnapHost:
        """EDAC's sysfs files; the polling interval as the pack leaves it unless the scenario says: the
        design's 37 s for a counting driver (i7core), the kernel's 1 s for every other."""
        for relative, text in files.items():
            self.snap.file(EDAC_ROOT + relative, text)
        if poll_msec is None:
            counting = any(text.startswith("i7 core") for name, text in files.items() if name.endswith("mc_name"))
            poll_msec = 37000 if counting else 1000
        self.snap.file("/sys/module/edac_core/parameters/edac_mc_poll_msec", f"{poll_msec}\n")
        return self

    def real_edac(self, path: str, **counts: int) -> SnapHost:
        """A real EDAC sysfs listing, with some of its counters set to what the scenario needs."""
        files = listing_to_files(sample(path), EDAC_ROOT)
        for relative, value in counts.items():
            files[relative.replace("__", "/")] = f"{value}\n"
        return self.edac(files)

    def kernel_log(self, text: str) -> SnapHost:
        """More kernel messages (a sample, or lines in its wording): /dev/kmsg grows."""
        records = kmsg_records(text, first_seq=self.kmsg_seq)
        self.kmsg_seq += records.count("\n")
        self.kmsg_lines.append(records)
        self.snap.kmsg("".join(self.kmsg_lines))
        return self

    def sel(self, listing: str, *, percent: int | None = None) -> SnapHost:
        """SEL entries (`ipmitool sel elist` lines) added since the last cycle: `sel info` (the real one)
        counts them, and says how full the log is when `percent` is given."""
        known = len(self.sel_lines)
        lines = [line for line in listing.splitlines() if line.strip()]
        self.sel_lines += lines
        info = sample(SEL_INFO)
        info = re.sub(r"Entries\s*:\s*\d+", f"Entries          : {len(self.sel_lines)}", info)
        if percent is not None:
            info = re.sub(r"Percent Used\s*:\s*\d+%", f"Percent Used     : {percent}%", info)
        info = re.sub(r"Last Add Time\s*:.*", f"Last Add Time    : {len(self.sel_lines)}", info)
        self.snap.command(["ipmitool", "sel", "info"], info)
        whole = "\n".join(self.sel_lines) + "\n"
        self.snap.command(["ipmitool", "sel", "elist"], whole)
        if len(self.sel_lines) > known:
            self.snap.command(
                ["ipmitool", "sel", "elist", "last", str(len(self.sel_lines) - known)], "\n".join(lines) + "\n"
            )
        return self

    def sensors(self, listing: str) -> SnapHost:
        self.snap.command(["ipmitool", "sdr", "elist"], listing)
        return self

    def disks(self, devices: dict[str, tuple[str, str, str]]) -> SnapHost:
        """smartctl's answers: device -> (type, protocol, its JSON)."""
        self.snap.command(
            ["smartctl", "--scan-open", "-j"], scan_open_json([(d, t, p) for d, (t, p, _) in devices.items()])
        )
        for device, (kind, _, text) in devices.items():
            self.snap.command(["smartctl", "-a", "-j", "-d", kind, device], text)
        return self

    def file(self, path: str, text: str) -> SnapHost:
        self.snap.file(path, text)
        return self

    # -- cycles ----------------------------------------------------------------------------

    def cycle(self, minute: float) -> Report:
        """One check cycle at T0 + minute, as the agent sends it (its cursors then committed)."""
        report = run_cycle(self.snap.host(), hostname=self.hostname, state=self.state)
        self.state.commit()
        return report.model_copy(update={"captured_at": T0 + dt.timedelta(minutes=minute)})


@dataclass(frozen=True)
class Expect:
    """What the default pack must decide about the scenario's host."""

    rule: str | None  # the rule that plans; None: nothing at all is planned
    action: str | None = None  # its plan's first action
    title: str | None = None  # a regular expression the ticket's title matches (the plan run to its ticket)
    part_type: str | None = None
    part: str | None = None
    serial: str | None = None  # the replacement part's serial on the ticket ("" : no serial, the part uncertain)
    never: frozenset[str] = field(default_factory=frozenset)  # rules that must plan nothing here
    never_actions: frozenset[str] = field(default_factory=frozenset)  # actions no plan may hold
    also: Callable[[Session, Remediation | None, Ticket | None], None] | None = None  # further checks
    then: Callable[[Session, SnapHost], None] | None = None  # what happens after the reports (time passes)


def register(session: Session, host: SnapHost, **inventory: Any) -> None:
    row = {
        "hostname": host.hostname,
        "hardware_class": host.hardware_class,
        "datacenter": "ams1",
        "rack": "r07",
        "labels": host.labels,
    }
    apply_inventory(session, [HostInventory(**{**row, **inventory})], actor="test")
    for step in host.setup:
        step(session)


def run(session: Session, host: SnapHost, reports: list[Report], *, rules: RuleSet = RULES) -> None:
    for report in reports:
        result = ingest(session, [report], ruleset=rules)
        assert not result.refused, result.refused


def remediations(session: Session, hostname: str) -> list[Remediation]:
    return list(
        session.scalars(
            select(Remediation).join(Host, Host.id == Remediation.host_id).where(Host.hostname == hostname)
        ).all()
    )


def to_ticket(session: Session, remediation: Remediation, rules: RuleSet = RULES) -> Ticket | None:
    """Run the plan's person steps (drain, ticket) to its ticket."""
    while remediation.state in RUNNABLE_REMEDIATION_STATES:
        pending = next((s for s in remediation.steps if s.state.value == "pending"), None)
        if pending is None or pending.action not in ("drain", "ticket"):
            break
        runner.advance(session, remediation.id, ruleset=rules)
    ticket_id = next((s.result.get("ticket_id") for s in remediation.steps if s.action == "ticket" and s.result), None)
    return session.get(Ticket, ticket_id) if ticket_id else None


def tickets_of(session: Session, hostname: str) -> list[Ticket]:
    return list(session.scalars(select(Ticket).where(Ticket.hostname == hostname).order_by(Ticket.id)).all())


def check(session: Session, host: SnapHost, expect: Expect, *, rules: RuleSet = RULES) -> None:
    planned = remediations(session, host.hostname)
    rules_planned = [r.rule_id for r in planned]
    beside = [t for t in tickets_of(session, host.hostname) if t.remediation_id is None]
    decided = session.scalars(
        select(Decision.rule_id, Decision.outcome, Decision.reason)
        .join(Host, Host.id == Decision.host_id)
        .where(Host.hostname == host.hostname)
    ).all()
    for rule in expect.never:
        assert rule not in rules_planned, (rule, rules_planned)
    for remediation in planned:
        assert not {s.action for s in remediation.steps} & expect.never_actions, (
            remediation.rule_id,
            remediation.steps,
        )
    if expect.rule is None:
        assert planned == [], [(r.rule_id, r.reason) for r in planned]
        assert beside == []
        return
    assert expect.rule in rules_planned, (expect.rule, rules_planned, json.dumps([list(d) for d in decided])[:2000])
    remediation = next(r for r in planned if r.rule_id == expect.rule)
    if expect.action is not None:
        assert remediation.steps[0].action == expect.action, [s.action for s in remediation.steps]
    ticket = None
    # a plan whose host action comes first opens its ticket after the host carried it out
    if remediation.steps[-1].action == "ticket" and all(s.action in ("drain", "ticket") for s in remediation.steps):
        ticket = to_ticket(session, remediation, rules)
        assert ticket is not None, remediation.steps
        if expect.title is not None:
            assert re.search(expect.title, ticket.title), ticket.title
        if expect.part_type is not None:
            assert ticket.part_type == expect.part_type
        if expect.part is not None:
            assert ticket.part == expect.part
        if expect.serial is not None:
            serial = ((ticket.evidence or {}).get("part") or {}).get("serial")
            assert (serial or "") == expect.serial, ticket.evidence.get("part")
    if expect.also is not None:
        expect.also(session, remediation, ticket)
