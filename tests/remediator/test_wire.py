"""Delta reports (checker.wire, remediator.wire): rebuilt exactly, or refused with "send full", never merged wrong.

The equivalence test replays a simulated fleet (faults on half its hosts, repeats of some hosts' states) through
ingest twice, once in full and once as agents send it with deltas (checker.agent.wire_state), and compares
the stored rows: reports, signals, host memory, decisions, remediations and tickets."""

from __future__ import annotations

import datetime as dt
import uuid
from typing import Any

import orjson
import pytest
from sqlalchemy import delete, select, text
from sqlalchemy.orm import Session

from checker.agent.wire_state import WireState
from checker.schemas import Report
from checker.sim import SimulatedFleet
from checker.wire import SECTIONS, MalformedDelta, ReportDelta, SendFull, encode_delta, rebuild, section_digest
from core.db import Base, Database
from remediator import capacity_class, wire
from remediator.ingest import ingest, ingest_batch
from remediator.inventory import HostInventory, apply_inventory
from remediator.models import Host, Signal
from remediator.models import Report as ReportRow
from remediator.rules import load_ruleset
from remediator.schemas import IngestResult, Refusal
from tests.builders.reports import T0, edac_report
from ticketing import models as ticketing_models  # noqa: F401 (its tables in Base.metadata)

RULES = load_ruleset([])
START = dt.datetime(2026, 6, 1, tzinfo=dt.UTC)
ROUNDS = 8
# Columns that differ between two runs whatever the format: the wall clock at which a row was written. Ids are
# compared (each run starts from the same sequence values), as are the texts that name them.
RUN_COLUMNS = {"created_at", "updated_at", "received_at"}
TABLES = ["hosts", "reports", "signals", "decisions", "remediations", "remediation_steps", "tickets", "ticket_events"]


def at(minutes: float) -> dt.datetime:
    return START + dt.timedelta(minutes=minutes)


def later(report: Report, minutes: float) -> Report:
    return report.model_copy(
        update={"report_id": uuid.uuid4(), "captured_at": report.captured_at + dt.timedelta(minutes=minutes)}
    )


def history() -> list[list[Report]]:
    """Batches as a fleet sends them: every minute, and every third host again 20 s later saying the same."""
    fleet = SimulatedFleet(24, seed=5, fault_fraction=0.5)
    batches = []
    for n in range(ROUNDS):
        reports = fleet.reports(at(n))
        batches += [reports, [later(r, 1 / 3) for r in reports[::3]]]
    return batches


def snapshot(session: Session) -> dict[str, list[str]]:
    """Every row of the tables ingest writes, without what only says which run wrote it, sorted."""
    session.flush()
    found = {}
    for name in TABLES:
        table = Base.metadata.tables[name]
        rows = session.execute(select(table)).mappings().all()
        kept = [{k: v for k, v in row.items() if k not in RUN_COLUMNS} for row in rows]
        for row in kept:
            # A ticket's evidence lists the host's signals newest first (remediator/evidence.py); signals of one
            # report tie on observed_at, and PostgreSQL returns ties in any order, so two runs of the same full
            # reports already differ there: compared as a set.
            if isinstance(evidence := row.get("evidence"), dict) and isinstance(evidence.get("signals"), list):
                evidence["signals"] = sorted(
                    evidence["signals"], key=lambda s: orjson.dumps(s, option=orjson.OPT_SORT_KEYS)
                )
        found[name] = sorted(orjson.dumps(row, option=orjson.OPT_SORT_KEYS, default=str).decode() for row in kept)
    return found


def replay(session: Session, batches: list[list[Report]], *, deltas: bool) -> int:
    """Ingest the batches, each report whole or as its agent would send it; the number sent as deltas."""
    agents: dict[str, WireState] = {}
    sent_as_delta = 0
    for batch in batches:
        received: list[Report] = []
        for report in batch:
            agent = agents.setdefault(report.host.hostname, WireState(report.host.hostname, path=None, full_every=6))
            delta = agent.prepare(report) if deltas else None
            agent.took_delta = delta is not None
            if delta is None:
                received.append(Report.model_validate_json(orjson.dumps(report.model_dump(mode="json"))))
                continue
            rebuilt = wire.resolve_payload(session, orjson.dumps(delta))
            assert isinstance(rebuilt, Report)
            assert rebuilt == report  # the very report, field for field
            received.append(rebuilt)
            sent_as_delta += 1
        result = ingest(session, received, ruleset=RULES, now=batch[0].captured_at)
        answer = result.model_dump(mode="json")
        for report in batch:
            agent = agents[report.host.hostname]
            agent.answered(answer)
            agent.finish()
    return sent_as_delta


def test_a_simulated_fleet_gives_the_same_rows_through_either_format(session: Session) -> None:
    fleet = SimulatedFleet(24, seed=5, fault_fraction=0.5)
    apply_inventory(session, [HostInventory(**row) for row in fleet.inventory()], actor="test")
    batches = history()
    outcome = {}
    sequences = sequence_values(session)
    for deltas in (False, True):
        capacity_class.clear_cache()
        restart(session, sequences)
        savepoint = session.begin_nested()
        sent = replay(session, batches, deltas=deltas)
        outcome[deltas] = snapshot(session)
        savepoint.rollback()
        if deltas:
            assert sent > len(batches)  # most reports after the first went as deltas
    full, delta = outcome[False], outcome[True]
    assert len(full["signals"]) > 100  # the fleet's faults fired
    assert full["decisions"]
    assert full["tickets"]
    for name in TABLES:
        assert delta[name] == full[name], name


def sequence_values(session: Session) -> dict[str, int]:
    """PostgreSQL's sequences as they stand (a rolled-back savepoint does not rewind them); SQLite: none."""
    if session.get_bind().dialect.name != "postgresql":
        return {}
    names = session.scalars(text("SELECT sequence_schema || '.' || sequence_name FROM information_schema.sequences"))
    return {name: session.scalar(text("SELECT nextval(:s)"), {"s": name}) for name in list(names)}


def restart(session: Session, sequences: dict[str, int]) -> None:
    for name, value in sequences.items():
        session.execute(text("SELECT setval(:s, :v)"), {"s": name, "v": value})


def test_delta_rebuilds_the_report_and_is_smaller() -> None:
    fleet = SimulatedFleet(10, seed=3, fault_fraction=0.3)
    before, now = fleet.reports(at(0)), fleet.reports(at(1))
    for base, report in zip(before, now, strict=True):
        delta = encode_delta(report, base)
        assert set(delta["changed"]) | set(delta["unchanged"]) == set(SECTIONS)
        assert rebuild(ReportDelta.model_validate(delta), base.model_dump(mode="json")) == report
        assert len(orjson.dumps(delta)) < len(orjson.dumps(report.model_dump(mode="json")))


def stored_base(session: Session, ce: int = 5) -> Report:
    base = edac_report(ce=ce, at=T0)
    ingest(session, [base], ruleset=RULES)
    return base


def test_a_section_that_differs_from_the_base_answers_send_full_and_stores_nothing(session: Session) -> None:
    base = stored_base(session)
    # the agent believes the base said 7 errors: its "unchanged" edac digest is not the stored one's
    believed = edac_report(ce=7).model_copy(update={"report_id": base.report_id})
    report = edac_report(ce=7, at=T0 + dt.timedelta(minutes=1))
    delta = ReportDelta.model_validate(encode_delta(report, believed))
    assert "edac" in delta.unchanged
    with pytest.raises(SendFull, match="section edac differs from the base report"):
        wire.resolve(session, delta)
    refused = wire.resolve_payload(session, delta.model_dump(mode="json"))
    assert isinstance(refused, Refusal)
    assert refused.errors[0].startswith("send full: section edac differs")
    assert [r.id for r in session.scalars(select(ReportRow))] == [base.report_id]


def test_a_tampered_changed_section_fails_the_whole_digest(session: Session) -> None:
    base = stored_base(session)
    report = edac_report(ce=9, at=T0 + dt.timedelta(minutes=1))
    document = encode_delta(report, base)
    document["changed"]["edac"]["controllers"][0]["ce_count"] = 8  # not what the agent digested
    with pytest.raises(SendFull, match="does not match the delta's digest"):
        wire.resolve(session, ReportDelta.model_validate(document))


def test_lost_state_answers_send_full_then_a_full_report_recovers(session: Session) -> None:
    base = stored_base(session)
    agent = WireState("web-001", path=None)
    assert agent.prepare(base) is None  # the first cycle goes whole
    agent.answered({"bases": [{"hostname": "web-001", "report_id": str(base.report_id)}]})
    agent.finish()
    assert agent.base == base
    # the centre lost the state the agent holds as its base (pruned, or the database was rebuilt)
    session.execute(delete(ReportRow))
    report = edac_report(ce=6, at=T0 + dt.timedelta(minutes=1))
    delta = agent.prepare(report)
    assert delta is not None
    refused = wire.resolve_payload(session, delta)
    assert isinstance(refused, Refusal)
    assert "is not stored" in refused.errors[0]
    agent.refused(refused.errors[0])
    assert agent.base is None  # so the same report goes whole (the HTTP delivery does it at once)
    result = ingest(session, [report], ruleset=RULES)
    agent.answered(result.model_dump(mode="json"))
    agent.finish()
    assert agent.base == report
    following = edac_report(ce=6, at=T0 + dt.timedelta(minutes=2))
    rebuilt = wire.resolve_payload(session, agent.prepare(following))
    assert rebuilt == following


def test_a_host_the_centre_never_heard_of_is_asked_for_a_full_report(session: Session) -> None:
    base, report = edac_report("new-host", ce=1), edac_report("new-host", ce=1, at=T0 + dt.timedelta(minutes=1))
    with pytest.raises(SendFull, match="no state is held for new-host"):
        wire.resolve(session, ReportDelta.model_validate(encode_delta(report, base)))


def test_full_reports_of_old_agents_are_taken_as_before_and_name_the_base(session: Session) -> None:
    reports = [edac_report(ce=5, at=T0 + dt.timedelta(minutes=i)) for i in range(3)]
    for report in reports:
        result = ingest(session, [report], ruleset=RULES)
        assert result.accepted == [report.report_id]
    [named] = result.bases  # the first report's row: the later two repeated it
    assert (named.hostname, named.report_id, named.captured_at) == ("web-001", reports[0].report_id, T0)


def test_a_malformed_changed_section_is_refused_naming_section_and_field(session: Session) -> None:
    base = stored_base(session)
    document = encode_delta(edac_report(ce=9, at=T0 + dt.timedelta(minutes=1)), base)
    document["changed"]["edac"]["controllers"][0]["ce_count"] = -1
    document["digest"] = redigest(document, base)
    with pytest.raises(MalformedDelta) as raised:
        wire.resolve(session, ReportDelta.model_validate(document))
    assert raised.value.errors[0].startswith("changed.edac.controllers.0.ce_count: Input should be greater")


def redigest(document: dict[str, Any], base: Report) -> str:
    """The whole digest of a hand-edited delta (so that only the edited value is wrong)."""
    from checker.wire import sections_of, state_digest

    held = sections_of(base.model_dump(mode="json"))
    digests = {s: section_digest(document["changed"][s] if s in document["changed"] else held[s]) for s in SECTIONS}
    return state_digest(digests)


@pytest.mark.parametrize(
    ("edit", "named"),
    [
        (lambda d: d["changed"].pop("edac"), "sections neither changed nor unchanged ['edac']"),
        (lambda d: d["unchanged"].update(bogus="0" * 64), "unknown sections ['bogus']"),
        (lambda d: d["unchanged"].update(edac="0" * 64), "sections both changed and unchanged ['edac']"),
        (lambda d: d["unchanged"].update(identity="xyz"), "delta.unchanged.identity: String should match"),
        (lambda d: d.pop("base"), "delta.base: Field required"),
    ],
    ids=["missing", "unknown", "both", "bad-digest", "no-base"],
)
def test_a_malformed_envelope_is_refused_naming_what_and_where(edit: Any, named: str) -> None:
    base = edac_report(ce=1)
    document = encode_delta(edac_report(ce=2, at=T0 + dt.timedelta(minutes=1)), base)
    edit(document)
    refused = wire.parse_delta(document)
    assert isinstance(refused, Refusal)
    assert named in refused.errors[0]


def test_the_stream_path_takes_deltas_and_refuses_one_it_cannot_rebuild(db: Database) -> None:
    base = edac_report(ce=5, at=T0)
    first = ingest_batch([orjson.dumps(base.model_dump(mode="json")).decode()], database=db, ruleset=RULES)
    assert first.accepted == [base.report_id]
    assert first.bases[0].report_id == base.report_id
    good = edac_report(ce=65, at=T0 + dt.timedelta(minutes=1))
    unknown = base.model_copy(update={"report_id": uuid.uuid4()})  # a base the centre never stored
    lost = edac_report(ce=65, at=T0 + dt.timedelta(minutes=2))
    result: IngestResult = ingest_batch(
        [orjson.dumps(encode_delta(good, base)).decode(), encode_delta(lost, unknown)], database=db, ruleset=RULES
    )
    assert result.accepted == [good.report_id]
    [refusal] = result.refused
    assert refusal.index == 1
    assert refusal.errors[0].startswith("send full: the base report")
    with db.session() as session:
        [rate] = session.scalars(select(Signal.value).where(Signal.kind == "dimm_ce_rate")).all()
        assert rate == 1.0  # 60 errors over 60 s: rebuilt from the base, evaluated as the full report would be
        assert session.scalars(select(Host.last_report_id)).one() == good.report_id


def test_a_signed_delta_about_another_host_is_refused_before_its_base_is_looked_up(session: Session) -> None:
    base = stored_base(session)
    delta = encode_delta(edac_report(ce=6, at=T0 + dt.timedelta(minutes=1)), base)
    refused = wire.resolve_payload(session, delta, signer="web-002")
    assert isinstance(refused, Refusal)
    assert refused.errors == ["host 'web-002' may only report for itself, not for 'web-001'"]
    assert isinstance(wire.resolve_payload(session, delta, signer="web-001"), Report)
