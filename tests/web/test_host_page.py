"""The host page: repeats collapsed into runs, configuration facts in their own panel, a kind filter,
charts for the measurements the host has, and finding a host by name, serial or rack (issue 18)."""

from __future__ import annotations

import datetime as dt
import re
from pathlib import Path
from types import SimpleNamespace

from fastapi.testclient import TestClient

from api.web.host_signals import CHARTED_KINDS, FACT_KINDS, host_facts
from api.web.timeline import collapse_signals
from core.db import Database
from core.models import Role
from remediator.models import Host, Remediation, RemediationState, RemediationStep, Signal
from tests.web.helpers import signed_in

T0 = dt.datetime(2026, 11, 20, 8, 0, tzinfo=dt.UTC)
TIMES = "\N{MULTIPLICATION SIGN}"  # the page's repeat count
SIGNALS_DOC = Path(__file__).parents[2] / "docs" / "signals.md"


def _timeline(page: str) -> str:
    start = page.index('id="timeline"')
    return page[start : page.index("</ol>", start)]


def _every(seconds: int, count: int, start: dt.datetime = T0) -> list[dt.datetime]:
    return [start + dt.timedelta(seconds=seconds * i) for i in range(count)]


def _host_with_noise(db: Database) -> None:
    """A host reporting every 5 s: the same EDAC poll interval every report, a kernel event count that
    stays at 2 for 10 reports and then moves to 3, a CE rate that moves every report, and a remediation."""
    with db.session() as session:
        host = Host(hostname="noisy-1", datacenter="ams1", rack="ams1-r07", report_interval_s=5)
        session.add(host)
        session.flush()
        for at in _every(5, 20):
            session.add(
                Signal(
                    host_id=host.id,
                    kind="edac_poll_interval",
                    subject="edac",
                    value=37.0,
                    detail={"poll_msec": 37000},
                    observed_at=at,
                )
            )
        for i, at in enumerate(_every(5, 12)):
            session.add(
                Signal(
                    host_id=host.id,
                    kind="kernel_event_count",
                    subject="soft_lockup",
                    value=2.0 if i < 10 else 3.0,
                    observed_at=at,
                )
            )
        for i, at in enumerate(_every(5, 6)):
            session.add(
                Signal(
                    host_id=host.id,
                    kind="dimm_ce_rate",
                    subject="CPU_SrcID#0_Ha#0_Chan#2_DIMM#0",
                    value=10.0 + i,
                    observed_at=at,
                )
            )
        remediation = Remediation(host_id=host.id, rule_id="dimm-ce-storm", state=RemediationState.running)
        remediation.steps = [RemediationStep(index=0, action="drain")]
        session.add(remediation)


def test_repeats_collapse_into_one_line_with_count_and_span(client: TestClient, db: Database) -> None:
    _host_with_noise(db)
    signed_in(client, db, "vic", Role.viewer)
    page = client.get("/hosts/noisy-1").text
    timeline = _timeline(page)
    lines = re.findall(r"<li class=\"signal\">.*?</li>", timeline, re.S)
    kernel = [line for line in lines if "kernel_event_count" in line]
    # a change is shown: ten reports at 2 are one line, the move to 3 (two reports) another
    assert len(kernel) == 2, kernel
    assert "kernel_event_count 2" in kernel[1]
    assert f"{TIMES}10 over 45s" in kernel[1]
    assert "kernel_event_count 3" in kernel[0]
    assert f"{TIMES}2 over 5s" in kernel[0]
    # a charted measurement moves every report: one line with the range it moved in
    ce = [line for line in lines if "dimm_ce_rate" in line]
    assert len(ce) == 1
    assert "dimm_ce_rate 10 to 15" in ce[0]
    assert f"{TIMES}6" in ce[0]
    assert len(lines) == 3
    assert "remediation" in timeline
    assert "dimm-ce-storm" in timeline


def test_configuration_facts_sit_in_the_facts_panel_not_the_timeline(client: TestClient, db: Database) -> None:
    _host_with_noise(db)
    signed_in(client, db, "vic", Role.viewer)
    page = client.get("/hosts/noisy-1").text
    assert "edac_poll_interval" not in _timeline(page)
    facts = page[page.index('id="host-facts"') : page.index("</section>", page.index('id="host-facts"'))]
    assert "edac_poll_interval" in facts
    assert "<strong>37</strong>" in facts
    assert "poll_msec=37000" in facts
    assert "since 2026-11-20 08:00:00Z" in facts
    assert "20 reports" in facts
    assert "kernel_event_count" not in facts  # an event is no fact


def test_a_fact_holds_since_its_last_change() -> None:
    rows = [
        SimpleNamespace(kind="edac_poll_interval", subject="edac", value=v, detail={}, observed_at=at)
        for v, at in reversed(list(zip([1.0, 1.0, 37.0, 37.0, 37.0], _every(5, 5), strict=True)))
    ]  # newest first, as the page reads them
    (fact,) = host_facts(rows)
    assert fact.value == 37.0
    assert fact.reports == 3
    assert fact.since == T0 + dt.timedelta(seconds=10)
    assert fact.last_at == T0 + dt.timedelta(seconds=20)


def test_a_quiet_gap_breaks_a_run() -> None:
    times = [*_every(5, 3), *_every(5, 2, T0 + dt.timedelta(seconds=60))]  # 50 s quiet: over three intervals
    rows = [SimpleNamespace(kind="sel_full", subject="sel", value=95.0, detail={}, observed_at=at) for at in times]
    lines = collapse_signals(rows, interval_s=5)
    assert sorted(line.count for line in lines) == [2, 3]
    assert len(collapse_signals(rows, interval_s=30)) == 1  # a 30 s reporter missed less than three reports


def test_the_timeline_filters_by_kind(client: TestClient, db: Database) -> None:
    _host_with_noise(db)
    signed_in(client, db, "vic", Role.viewer)
    page = client.get("/hosts/noisy-1").text
    kinds = page[page.index('id="timeline-kinds"') :]
    assert "?kind=remediation" in kinds
    assert "?kind=kernel_event_count" in kinds
    assert "?kind=dimm_ce_rate" in kinds
    only_kernel = _timeline(client.get("/hosts/noisy-1?kind=kernel_event_count").text)
    assert only_kernel.count("<li ") == 2
    assert "dimm_ce_rate" not in only_kernel
    assert "remediation " not in only_kernel
    only_remediations = _timeline(client.get("/hosts/noisy-1?kind=remediation").text)
    assert "dimm-ce-storm" in only_remediations
    assert 'class="signal"' not in only_remediations
    nothing = client.get("/hosts/noisy-1?kind=fan_failure").text
    assert 'id="timeline"' not in nothing
    assert "Nothing of kind fan_failure" in nothing


def test_charts_for_what_the_host_has(client: TestClient, db: Database) -> None:
    _host_with_noise(db)
    with db.session() as session:
        host = Host(hostname="disky-1", datacenter="ams1", report_interval_s=60)
        session.add(host)
        session.flush()
        for i, at in enumerate(_every(3600, 3)):
            session.add(
                Signal(
                    host_id=host.id,
                    kind="smart_reallocated_growth",
                    subject="sda:S3YZ",
                    value=8.0,
                    detail={"previous": 8 * i, "current": 8 * (i + 1)},
                    observed_at=at,
                )
            )
            session.add(
                Signal(host_id=host.id, kind="isolated_cpu_irq_rate", subject="cpu5", value=40.0 + i, observed_at=at)
            )
    signed_in(client, db, "vic", Role.viewer)
    disky = client.get("/hosts/disky-1").text
    charts = disky[disky.index('id="host-charts"') :]
    assert "Disk defect counters at each growth" in charts
    assert "sda:S3YZ reallocated sectors" in charts
    assert "24 count" in charts  # the counter's current value is drawn, not the step
    assert "Device IRQs per second on isolated CPUs" in charts
    assert "cpu5" in charts
    assert "Correctable errors per second" not in charts  # no CE data on this host: no empty CE chart
    noisy = client.get("/hosts/noisy-1").text
    assert "Correctable errors per second, by DIMM" in noisy
    assert "Disk defect counters" not in noisy


def test_every_fact_kind_is_a_documented_every_report_signal() -> None:
    rows = {
        match.group(1): match.group(0)
        for match in re.finditer(r"^\| `([a-z_0-9]+)` \|.*$", SIGNALS_DOC.read_text(), re.M)
    }
    for kind in FACT_KINDS:
        assert kind in rows, f"{kind} is not in docs/signals.md"
        assert re.search(r"every report|configuration fact|not a finding", rows[kind]), kind
    assert not set(FACT_KINDS) & CHARTED_KINDS
    assert "dimm_ce_rate" not in FACT_KINDS
    assert "kernel_event_count" not in FACT_KINDS


def test_find_a_host_by_name_serial_or_rack(client: TestClient, db: Database) -> None:
    with db.session() as session:
        session.add_all(
            [
                Host(hostname="web-101", datacenter="ams1", rack="ams1-r07", labels={"serial": "CZJ1234ABC"}),
                Host(
                    hostname="db-7",
                    datacenter="fra3",
                    rack="fra3-r02",
                    memory={"capacity": {"dimms": {"DIMM_A1": "80AD01234567"}, "disks": {"sda": "S3YZNX0K"}}},
                ),
                Host(hostname="web_x", datacenter="fra3", rack="fra3-r09"),
            ]
        )
    signed_in(client, db, "vic", Role.viewer)

    def found(q: str) -> list[str]:
        page = client.get("/hosts", params={"q": q}).text
        return re.findall(r'<a href="/hosts/[^"]+"><strong>([^<]+)</strong>', page)

    assert found("web-1") == ["web-101"]
    assert found("ams1-r07") == ["web-101"]
    assert found("czj1234") == ["web-101"]  # chassis serial from the inventory label, any case
    assert found("80AD0123") == ["db-7"]  # a DIMM serial the host reported
    assert found("S3YZNX0K") == ["db-7"]
    assert found("web_") == ["web_x"]  # a LIKE wildcard is taken literally (web-101 does not match)
    assert found("nowhere") == []
    assert "No host's name, rack or serial contains" in client.get("/hosts?q=nowhere").text
    assert 'href="/hosts"' in client.get("/").text  # the search is in the navigation
