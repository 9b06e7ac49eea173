"""Delta reports (checker.wire, remediator.wire): rebuilt exactly, or refused with "send full", never merged wrong.

The equivalence test replays a simulated fleet (faults on half its hosts, repeats of some hosts' states) through
ingest twice, once in full and once as agents send it with deltas (checker.agent.wire_state), and compares
the stored rows: reports, signals, host memory, decisions, remediations and tickets."""

from __future__ import annotations

import copy
import datetime as dt
import math
import uuid
from collections import Counter
from typing import Any

import orjson
import pytest
from pydantic import BaseModel, Field, ValidationError, create_model
from sqlalchemy import delete, select, text
from sqlalchemy.orm import Session

from checker.agent.wire_state import WireState
from checker.schemas import DiskHealth, HostIdentity, Observations, Report
from checker.sim import SimulatedFleet
from checker.wire import (
    SECTIONS,
    DeltaHost,
    MalformedDelta,
    ReportDelta,
    SendFull,
    encode_delta,
    rebuild,
    section_digest,
    section_values,
    state_digest,
)
from checker.wire_patch import apply_patch
from core.db import Base, Database
from remediator import capacity_class, wire
from remediator import ingest as remediator_ingest
from remediator import payloads as remediator_payloads
from remediator.ingest import ingest, ingest_batch
from remediator.inventory import HostInventory, apply_inventory
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


def envelope_moves(report: Report, n: int) -> Report:
    """From round 4 on, what only the envelope says changes on three hosts: a reboot (boot_id), an agent upgrade
    (agent_version) and a new interval; a delta sends the envelope whole, never from its base."""
    if n < 4 or report.host.hostname not in HOSTS_THAT_MOVE:
        return report
    which = HOSTS_THAT_MOVE.index(report.host.hostname)
    if which == 2:
        return report.model_copy(update={"interval_s": 30})
    field, value = (("boot_id", "rebooted-boot"), ("agent_version", "9.9.9"))[which]
    return report.model_copy(update={"host": report.host.model_copy(update={field: value})})


def history() -> list[list[Report]]:
    """Batches as a fleet sends them: every minute, and every third host again 20 s later saying the same; three
    hosts reboot, upgrade their agent and change their interval on the way (envelope_moves)."""
    fleet = SimulatedFleet(24, seed=5, fault_fraction=0.5)
    batches = []
    for n in range(ROUNDS):
        reports = [envelope_moves(r, n) for r in fleet.reports(at(n))]
        batches += [reports, [later(r, 1 / 3) for r in reports[::3]]]
    return batches


HOSTS_THAT_MOVE = [host.hostname for host in SimulatedFleet(24, seed=5, fault_fraction=0.5).hosts[:3]]


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
            if delta is None:
                received.append(Report.model_validate_json(orjson.dumps(report.model_dump(mode="json"))))
                continue
            agent.taken()
            rebuilt = wire.resolve(session, ReportDelta.model_validate_json(orjson.dumps(delta)))
            assert rebuilt == report  # the very report, field for field, envelope included
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
            # Whole: each host's first report and every sixth (full_every=6) from there; every other one a delta,
            # the centre having named a base it holds each time: 16 hosts x 8 reports, 8 hosts x 16
            per_host = Counter(r.host.hostname for batch in batches for r in batch)
            assert sent == sum(k - math.ceil(k / 6) for k in per_host.values()) == 16 * 6 + 8 * 13
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
        assert set(delta["changed"]) | set(delta["patched"]) <= set(SECTIONS)
        assert rebuild(ReportDelta.model_validate(delta), base.model_dump(mode="json")) == report
        assert len(orjson.dumps(delta)) < len(orjson.dumps(report.model_dump(mode="json")))


def test_a_delta_names_every_field_of_the_host_identity() -> None:
    """DeltaHost repeats HostIdentity's fields, each optional (a field not sent is the base's): a field added to
    HostIdentity and not to DeltaHost would make every delta of an agent that moves it a 422."""
    assert set(DeltaHost.model_fields) == set(HostIdentity.model_fields)


def stored_base(session: Session, ce: int = 5, hostname: str = "web-001") -> Report:
    base = edac_report(hostname, ce=ce, at=T0)
    ingest(session, [base], ruleset=RULES)
    return base


def centre(session: Session, delta: dict[str, Any]) -> Report | str:
    """What POST /reports/delta makes of a delta: the rebuilt report, or the reason of its "send full"."""
    try:
        return wire.resolve(session, ReportDelta.model_validate_json(orjson.dumps(delta)))
    except SendFull as refused:
        return refused.reason


def test_a_section_that_differs_from_the_base_answers_send_full_and_stores_nothing(session: Session) -> None:
    base = stored_base(session)
    # the agent believes the base said 7 errors: its "unchanged" edac digest is not the stored one's
    believed = edac_report(ce=7).model_copy(update={"report_id": base.report_id})
    report = edac_report(ce=7, at=T0 + dt.timedelta(minutes=1))
    delta = ReportDelta.model_validate(encode_delta(report, believed))
    assert "edac" not in delta.changed
    assert "edac" not in delta.patched
    with pytest.raises(SendFull, match="the unchanged sections differ from the base report"):
        wire.resolve(session, delta)
    assert [r.id for r in session.scalars(select(ReportRow))] == [base.report_id]


def as_whole(document: dict[str, Any], report: Report, section: str) -> dict[str, Any]:
    """The delta with `section` sent whole rather than patched (the agent sends whichever is shorter)."""
    assert section in document["patched"]
    del document["patched"][section]
    document["changed"][section] = section_values(report, [section])[section]
    return document


def test_a_tampered_changed_section_fails_the_whole_digest(session: Session) -> None:
    base = stored_base(session)
    report = edac_report(ce=9, at=T0 + dt.timedelta(minutes=1))
    document = as_whole(encode_delta(report, base), report, "edac")
    assert centre(session, copy.deepcopy(document)) == report
    document["changed"]["edac"]["controllers"][0]["ce_count"] = 8  # not what the agent digested
    with pytest.raises(SendFull, match="does not match the delta's digest"):
        wire.resolve(session, ReportDelta.model_validate(document))


def test_lost_state_answers_send_full_then_a_full_report_recovers(session: Session) -> None:
    base = stored_base(session)
    agent = WireState("web-001", path=None)
    assert agent.prepare(base) is None  # the first cycle goes whole
    agent.answered({"bases": [{"hostname": "web-001", "report_id": str(base.report_id)}]})
    agent.finish()
    assert agent.base is not None
    assert agent.base.report_id == base.report_id
    # the centre lost the state the agent holds as its base (pruned, or the database was rebuilt)
    session.execute(delete(ReportRow))
    report = edac_report(ce=6, at=T0 + dt.timedelta(minutes=1))
    delta = agent.prepare(report)
    assert delta is not None
    refused = centre(session, delta)
    assert isinstance(refused, str)
    assert "is not stored" in refused
    agent.refused(refused)
    assert agent.base is None  # so the same report goes whole (the HTTP delivery does it at once)
    result = ingest(session, [report], ruleset=RULES)
    agent.answered(result.model_dump(mode="json"))
    agent.finish()
    assert agent.base is not None
    assert agent.base.report_id == report.report_id
    following = edac_report(ce=6, at=T0 + dt.timedelta(minutes=2))
    following_delta = agent.prepare(following)
    assert following_delta is not None
    assert centre(session, following_delta) == following


def test_a_host_the_centre_never_heard_of_is_asked_for_a_full_report(session: Session) -> None:
    base, report = edac_report("new-host", ce=1), edac_report("new-host", ce=1, at=T0 + dt.timedelta(minutes=1))
    with pytest.raises(SendFull, match="no state is held for new-host"):
        wire.resolve(session, ReportDelta.model_validate(encode_delta(report, base)))


def test_a_delta_naming_another_hosts_stored_report_as_its_base_is_answered_send_full(session: Session) -> None:
    # web-002's stored report says exactly what web-001's next report says, section for section: only the
    # host filter on the base lookup stops web-001's delta from being rebuilt on it
    stored_base(session, hostname="web-001")
    theirs = stored_base(session, hostname="web-002")
    mine = edac_report("web-001", ce=5, at=T0 + dt.timedelta(minutes=1))
    delta = encode_delta(mine, theirs)
    assert list(delta["changed"]) == []  # every section the same as the other host's
    refused = centre(session, delta)
    assert isinstance(refused, str)
    assert refused.startswith(f"the base report {theirs.report_id} of 2026-03-01T12:00:00+00:00 is not stored")


def test_full_reports_of_old_agents_are_taken_as_before_and_name_the_base(session: Session) -> None:
    reports = [edac_report(ce=5, at=T0 + dt.timedelta(minutes=i)) for i in range(3)]
    for report in reports:
        result = ingest(session, [report], ruleset=RULES)
        assert result.accepted == [report.report_id]
    [named] = result.bases  # the first report's row: the later two repeated it
    assert (named.hostname, named.report_id, named.captured_at) == ("web-001", reports[0].report_id, T0)


def patched_edac(session: Session) -> tuple[Report, dict[str, Any]]:
    """A stored base with 100000 CEs and the delta of the next report (100005): edac goes as a patch."""
    base = stored_base(session, ce=100000)
    report = edac_report(ce=100005, at=T0 + dt.timedelta(minutes=1))
    document = encode_delta(report, base)
    assert document["patched"]["edac"] == {"p": {"controllers": {"a": {"0/ce_count": 5, "0/dimms/0/ce_count": 5}}}}
    return report, document


@pytest.mark.parametrize(
    "extra",
    [
        {"s": {"controllers/0/dimms/1/ce_count": 1}},
        {"a": {"controllers/0/dimms/1/ue_count": 1}},
        {"d": ["controllers/0/dimms/1/label"]},
        {"p": {"controllers/0/dimms": {"n": 1}}},
    ],
    ids=["set", "add", "delete", "length"],
)
def test_a_patch_that_does_not_give_the_agents_section_answers_send_full(
    session: Session, extra: dict[str, Any]
) -> None:
    """Each operation applied where the base has the value, the section valid, but not what the agent had: the
    whole digest refuses it, and nothing is stored."""
    report, document = patched_edac(session)
    assert centre(session, copy.deepcopy(document)) == report
    for op, members in extra.items():
        if isinstance(members, list):
            document["patched"]["edac"].setdefault(op, []).extend(members)
        else:
            document["patched"]["edac"].setdefault(op, {}).update(members)
    refused = centre(session, document)
    assert refused == "the rebuilt report does not match the delta's digest (the host, or patched or changed ['edac'])"
    assert len(session.scalars(select(ReportRow.id)).all()) == 1  # the base only


@pytest.mark.parametrize(
    ("patch", "error"),
    [
        ({"s": {"controllers/7/ce_count": 1}}, "patched.edac.controllers: index 7 is beyond the array's 1 items"),
        ({"a": {"controllers/0/mc_name": 1}}, "patched.edac.controllers.0.mc_name: adds an integer to an integer"),
        ({"q": {}}, "patched.edac: unknown patch operations ['q']"),
        ({"s": {"controllers/0/ce_count": -1}}, "patched.edac.controllers.0.ce_count: Input should be greater than"),
    ],
    ids=["beyond", "not-a-counter", "unknown-op", "invalid-value"],
)
def test_a_malformed_patch_is_refused_naming_where(session: Session, patch: dict[str, Any], error: str) -> None:
    _, document = patched_edac(session)
    document["patched"]["edac"] = patch
    with pytest.raises(MalformedDelta) as raised:
        wire.resolve(session, ReportDelta.model_validate(document))
    assert raised.value.errors[0].startswith(error)


def test_a_malformed_changed_section_is_refused_naming_section_and_field(session: Session) -> None:
    base = stored_base(session)
    report = edac_report(ce=9, at=T0 + dt.timedelta(minutes=1))
    document = as_whole(encode_delta(report, base), report, "edac")
    document["changed"]["edac"]["controllers"][0]["ce_count"] = -1
    document["digest"] = redigest(document, base)
    with pytest.raises(MalformedDelta) as raised:
        wire.resolve(session, ReportDelta.model_validate(document))
    assert raised.value.errors[0].startswith("changed.edac.controllers.0.ce_count: Input should be greater")


def test_a_deeply_nested_changed_section_is_refused_as_malformed_before_it_is_digested(session: Session) -> None:
    base = stored_base(session)
    report = edac_report(ce=9, at=T0 + dt.timedelta(minutes=1))
    document = as_whole(encode_delta(report, base), report, "edac")
    document["changed"]["edac"] = nested(300)
    with pytest.raises(MalformedDelta) as raised:  # was orjson's TypeError (recursion limit) out of the digest
        wire.resolve(session, ReportDelta.model_validate(document))
    assert raised.value.errors[0].startswith("changed.edac: Input should be a valid dictionary")


def nested(depth: int) -> Any:
    value: Any = 1
    for _ in range(depth):
        value = [value]
    return value


def redigest(document: dict[str, Any], base: Report) -> str:
    """The whole digest of a hand-edited delta (so that only the edited value is wrong): its values rebuilt from
    the base's as the centre does, without validating them."""
    values = section_values(base)
    for name, patch in document["patched"].items():
        values[name] = apply_patch(copy.deepcopy(values[name]), patch, name)
    values.update(document["changed"])
    digests = {name: section_digest(value) for name, value in values.items()}
    host = HostIdentity.model_validate({**base.host.model_dump(mode="json"), **document["host"]})
    held = host.model_dump(mode="json", exclude_defaults=True)
    return state_digest({**digests, "host": section_digest(held)}, {**values, "host": held})


@pytest.mark.parametrize(
    ("edit", "named"),
    [
        (lambda d: d["changed"].update(bogus=1), "unknown sections ['bogus']"),
        (lambda d: d["changed"].update(edac=None), "sections both changed and patched ['edac']"),
        (lambda d: d.update(unchanged_digest="0" * 64), "unchanged_digest\n  String should match"),
        (lambda d: d.pop("base"), "base\n  Field required"),
        (lambda d: d.update(unchanged={"edac": "0" * 64}), "unchanged\n  Extra inputs are not permitted"),
    ],
    ids=["unknown", "both", "bad-digest", "no-base", "stage-1"],
)
def test_a_malformed_envelope_is_refused_naming_what_and_where(edit: Any, named: str) -> None:
    base = edac_report(ce=1)
    document = encode_delta(edac_report(ce=2, at=T0 + dt.timedelta(minutes=1)), base)
    edit(document)
    with pytest.raises(ValidationError) as raised:
        ReportDelta.model_validate(document)
    assert named in str(raised.value)


def without_edac(report: Report) -> Report:
    return report.model_copy(update={"observations": report.observations.model_copy(update={"edac": None})})


def test_a_section_the_delta_does_not_name_is_the_bases_and_must_digest_so(session: Session) -> None:
    """A section named in neither `changed` nor `patched` is the base's. An agent whose schema lacks the section
    sent it absent (null) in its base too, as its full report would: the rebuilt report has it absent. Before, the
    delta listed each unchanged section by name and digest, and one named nowhere was taken at its default."""
    base = without_edac(edac_report(ce=5, at=T0))
    ingest(session, [base], ruleset=RULES)
    report = without_edac(edac_report(ce=5, at=T0 + dt.timedelta(minutes=1)))
    document = encode_delta(report, base)
    assert "edac" not in document["changed"]
    assert "edac" not in document["patched"]
    assert centre(session, document) == report


def test_an_agent_that_does_not_send_a_section_its_base_holds_is_answered_send_full(session: Session) -> None:
    """The base holds edac (the agent sent it then) but this agent's delta says nothing of it, as one downgraded
    to a schema without the section would: the centre does not take the base's edac on a guess."""
    base = stored_base(session)
    report = without_edac(edac_report(ce=5, at=T0 + dt.timedelta(minutes=1)))
    document = encode_delta(report, without_edac(base))  # the agent's view: neither has edac
    assert "edac" not in document["changed"]
    refused = centre(session, document)
    assert refused == f"the unchanged sections differ from the base report {base.report_id}"


def test_the_stream_refuses_every_delta_and_a_deeply_nested_one_loses_nothing_else(db: Database) -> None:
    """Stage 1 takes deltas over HTTP only: on the stream each is refused alone, before any base is looked up,
    however it nests; the good report beside it is stored."""
    base = edac_report(ce=5, at=T0)
    first = ingest_batch([orjson.dumps(base.model_dump(mode="json")).decode()], database=db, ruleset=RULES)
    assert first.accepted == [base.report_id]
    good = edac_report(ce=65, at=T0 + dt.timedelta(minutes=1))
    deep = encode_delta(edac_report(ce=66, at=T0 + dt.timedelta(minutes=2)), base)
    deep["changed"]["edac"] = "@@"
    deep["patched"].pop("edac", None)
    deep_text = orjson.dumps(deep).decode().replace('"@@"', "[" * 1000 + "1" + "]" * 1000)
    valid = encode_delta(edac_report(ce=67, at=T0 + dt.timedelta(minutes=3)), base)
    other = edac_report("web-002", ce=1, at=T0 + dt.timedelta(minutes=1))
    result: IngestResult = ingest_batch(
        [deep_text, orjson.dumps(good.model_dump(mode="json")).decode(), valid, other.model_dump(mode="json")],
        database=db,
        ruleset=RULES,
    )
    assert sorted(result.accepted) == sorted([good.report_id, other.report_id])
    assert [r.index for r in result.refused] == [0, 2]
    for refusal in result.refused:
        assert refusal.errors == [f"encoding: {wire.STREAM_REFUSAL}"]
    assert result.refused[1].report_id == valid["report_id"]


def test_a_payload_that_breaks_parsing_is_refused_alone(db: Database, monkeypatch: pytest.MonkeyPatch) -> None:
    """Whatever a payload trips while it is read (here a RecursionError, as a deeply nested NUL search raised), it
    is refused naming what; the batch's other reports are stored."""
    real = remediator_payloads.parse_one

    def breaks_on_web_002(payload: Any, now: dt.datetime) -> Report | Refusal:
        if "web-002" in str(payload):
            raise RecursionError("maximum recursion depth exceeded")
        return real(payload, now)

    monkeypatch.setattr(remediator_ingest, "parse_one", breaks_on_web_002)
    good, bad = edac_report(ce=1, at=T0), edac_report("web-002", ce=1, at=T0)
    result = ingest_batch([bad.model_dump(mode="json"), good.model_dump(mode="json")], database=db, ruleset=RULES)
    assert result.accepted == [good.report_id]
    [refusal] = result.refused
    assert refusal.index == 0
    assert refusal.errors == ["report: could not be read (RecursionError: maximum recursion depth exceeded)"]


def copy_of(model: type[BaseModel], drop: tuple[str, ...] = (), **fields: Any) -> type[BaseModel]:
    """`model` as an older release declared it: without the fields in `drop`, some fields of older types."""
    kept: dict[str, Any] = {n: (f.annotation, f) for n, f in model.model_fields.items() if n not in drop}
    kept.update(fields)
    return create_model(model.__name__, __config__=model.model_config, **kept)  # type: ignore[call-overload,no-any-return]


def older_report_schema() -> type[BaseModel]:
    """The report schema of an agent built before the centre added DiskHealth.pci_address and the redfish
    section (docs/report-schema.md: the centre is upgraded before the agents)."""
    disk = copy_of(DiskHealth, drop=("pci_address",))
    observations = copy_of(Observations, drop=("redfish",), disks=(list[disk] | None, None))  # type: ignore[valid-type]
    return copy_of(Report, observations=(observations, Field(default_factory=observations)))


def test_an_agent_on_an_older_schema_has_its_deltas_taken_without_ping_pong(session: Session) -> None:
    """Before, every section holding a model the centre had added a field to (disks: pci_address) digested
    differently on the two sides: each delta was refused, then sent whole, every cycle, until the agent was
    upgraded. Digests without default values, and a section not named taken at its default, agree."""
    older = older_report_schema()
    fleet = SimulatedFleet(6, seed=3, fault_fraction=0.0)
    agents: dict[str, WireState] = {}
    deltas = 0
    for n in range(5):
        for current in fleet.reports(at(n)):
            document = current.model_dump(mode="json")
            document["observations"].pop("redfish")
            for disk in document["observations"]["disks"] or []:
                disk.pop("pci_address")
            sent = older.model_validate(document)  # what the older agent builds
            as_whole = Report.model_validate_json(orjson.dumps(sent.model_dump(mode="json")))  # its full report
            agent = agents.setdefault(current.host.hostname, WireState(current.host.hostname, path=None))
            delta = agent.prepare(sent)  # type: ignore[arg-type]
            if delta is None:
                received: Report | str = as_whole
            else:
                assert "redfish" not in delta["changed"]
                assert "redfish" not in delta["patched"]
                assert "disks" not in delta["changed"]  # the disks did not change
                assert "disks" not in delta["patched"]
                received = centre(session, delta)
                assert received == as_whole, received  # before: "section disks differs from the base report …"
                agent.taken()
                deltas += 1
            assert isinstance(received, Report)
            result = ingest(session, [received], ruleset=RULES, now=received.captured_at)
            agent.answered(result.model_dump(mode="json"))
            agent.finish()
    assert deltas == 6 * 4  # all but each host's first report
    assert all(agent.refusals == 0 for agent in agents.values())
