"""The cputime watch's rotation through ingest (rule cputime-exceeds-elapsed), registered into
tests/decisions/cases.py's CASES: a host with more processes than one cycle reads. Our /proc fixture
(tests/checker/fixtures/proc-cputime.txt) with 300 idle sshd processes added before the job's pid, so
the agent reaches the job in its third cycle (128 stat files a cycle).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from sqlalchemy import select
from sqlalchemy.orm import Session

from checker.schemas import Report
from remediator.models import Host, Remediation, Signal
from tests.decisions.cases import case, cputime_host
from tests.decisions.harness import Expect, SnapHost
from ticketing.models import Ticket

IDLE_PIDS = range(1000, 1300)


def big_host(tmp: Path, *, without: tuple[str, ...] = ()) -> SnapHost:
    host = cputime_host(tmp, without=without)
    idle = host.snap.path("/proc/6100/stat").read_text()
    for pid in IDLE_PIDS:
        host.snap.file(f"/proc/{pid}/stat", idle.replace("6100 (sshd)", f"{pid} (sshd)", 1))
    return host


def signals(session: Session, host: SnapHost) -> list[Signal]:
    return list(
        session.scalars(
            select(Signal)
            .join(Host, Host.id == Signal.host_id)
            .where(Host.hostname == host.hostname, Signal.kind == "cputime_exceeds_elapsed")
            .order_by(Signal.observed_at)
        ).all()
    )


@case(
    "a host past one cycle's reads: the job is flagged when the rotation reaches it, then every cycle",
    "cputime-exceeds-elapsed",
)
def cputime_rotation_finds_the_job(tmp: Path) -> tuple[SnapHost, list[Report], Expect]:
    host = big_host(tmp)
    reports = [host.cycle(minute) for minute in range(5)]
    seen = [r.observations.cputime for r in reports]
    assert [w.flagged if w else None for w in seen] == [0, 0, 1, 1, 1]

    def steady(session: Session, remediation: Remediation | None, ticket: Ticket | None) -> None:
        assert remediation is not None
        assert ticket is not None
        rows = signals(session, host)
        # nothing said before the rotation reached the job (no verdict yet), then one every cycle
        assert [(row.value, row.detail["examples"][0]["pid"]) for row in rows] == [(1.0, 4711)] * 3

    return (
        host,
        reports,
        Expect(
            "cputime-exceeds-elapsed",
            "ticket",
            title=r"1 processes with CPU time above their run time",
            part_type="kernel",
            never_actions=frozenset({"reboot", "reimage", "install_kernel", "drain"}),
            also=steady,
        ),
    )


def zero_after_a_rotation(reports: int) -> Callable[[Session, SnapHost], None]:
    def check(session: Session, host: SnapHost) -> None:
        rows = signals(session, host)
        assert rows, "no zero once a rotation finished"
        assert len(rows) < reports  # none during the first rotation: it had not judged every process yet
        assert all((row.value, row.detail["complete"]) == (0, True) for row in rows)

    return check


@case("a clean host past one cycle's reads: no zero until a whole rotation judged it, then nothing", None)
def cputime_rotation_clean(tmp: Path) -> tuple[SnapHost, list[Report], Expect]:
    host = big_host(tmp, without=("proc/4711/",))
    reports = [host.cycle(minute) for minute in range(6)]
    expect = Expect(None, never=frozenset({"cputime-exceeds-elapsed"}), then=zero_after_a_rotation(len(reports)))
    return host, reports, expect
