"""The composition root's seam (api/runtime.py): every process builds its runtime once and hands it on, and
no module of the project keeps a service in a global, so what a task or a route runs with does not depend on
which process imported what, and two runtimes built side by side in one process share nothing."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from sqlalchemy.orm import Session

from api.app import create_app
from api.runtime import CentralRuntime, build_central
from api.settings import CentralSettings
from core.audit import AuditListeners
from core.db import Database, service_of
from core.queue import create_celery, find
from cyborg.central import CentralCyborg
from cyborg.host.runtime import HostExecutors
from remediator.runtime import Remediator
from ticketing.lifecycle import Reactions
from ticketing.notify.events import Subjects, record_alert
from ticketing.runtime import Ticketing

REPO = Path(__file__).resolve().parents[2]
PACKAGES = ("core", "checker", "remediator", "cyborg", "ticketing", "api")


def modules() -> list[Path]:
    return sorted(p for package in PACKAGES for p in (REPO / package).rglob("*.py"))


def test_no_module_of_the_project_keeps_a_global_statement() -> None:
    """A `global` rebinds a module's name at run time: the state it holds is the process's, filled by
    whoever ran first. Services live in the runtime a root built instead."""
    found = [
        f"{path.relative_to(REPO)}:{node.lineno}: global {', '.join(node.names)}"
        for path in modules()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, ast.Global)
    ]
    assert found == []


def runtime(tmp_path: Path, name: str, **settings: object) -> CentralRuntime:
    """A runtime as a process's root builds it, on a database and an in-process app of its own."""
    configured = CentralSettings(data_dir=tmp_path / name, **settings)  # type: ignore[arg-type]
    configured.data_dir.mkdir()
    return build_central(
        configured,
        database=Database(f"sqlite:///{tmp_path / name / 'fleetfix.db'}"),
        celery=create_celery("memory://", name=name, make_current=False),
    )


def services(session: Session) -> tuple[object, ...]:
    return tuple(service_of(session, kind) for kind in (Remediator, Reactions, Subjects, AuditListeners))


def test_two_runtimes_side_by_side_share_no_state(tmp_path: Path) -> None:
    worker = runtime(tmp_path, "worker", alerts_mode="webhook", slack_webhook_url="https://hooks.example/x")
    api = runtime(tmp_path, "api")
    try:
        # each app's tasks find their own stages, never the other's
        assert Remediator.of(worker.celery) is worker.remediator
        assert Remediator.of(api.celery) is api.remediator
        assert Ticketing.of(worker.celery) is worker.ticketing
        assert Ticketing.of(api.celery) is api.ticketing
        assert worker.remediator.database is worker.database
        assert api.remediator.database is api.database
        # nothing of one is the other's: rules, host keys, the executor, the tracker's and Slack's clients
        for mine, theirs in (
            (worker.remediator.rules, api.remediator.rules),
            (worker.remediator.host_keys, api.remediator.host_keys),
            (worker.remediator.cyborg, api.remediator.cyborg),
            (worker.ticketing.tracker, api.ticketing.tracker),
            (worker.ticketing.sender, api.ticketing.sender),
            (worker.ticketing.subjects, api.ticketing.subjects),
        ):
            assert mine is not theirs
        # a session carries the services of the runtime that opened it
        with worker.database.sessionmaker() as one, api.database.sessionmaker() as other:
            assert services(one) == (
                worker.remediator,
                worker.ticketing.reactions,
                worker.ticketing.subjects,
                AuditListeners((record_alert,)),
            )
            assert services(other) == (api.remediator, api.ticketing.reactions, api.ticketing.subjects, ())
        # the alerts' outbox is on in the one whose settings turn it on, and only there
        assert worker.settings.alerts_mode == "webhook"
        assert api.settings.alerts_mode == "off"
    finally:
        worker.dispose()
        api.dispose()


def test_a_routes_app_reaches_its_own_runtime(tmp_path: Path) -> None:
    first, second = runtime(tmp_path, "first"), runtime(tmp_path, "second")
    try:
        assert create_app(first).state.runtime is first
        assert create_app(second).state.runtime is second
    finally:
        first.dispose()
        second.dispose()


def test_a_worker_carries_out_every_action_and_the_api_only_the_schedulers_hooks(tmp_path: Path) -> None:
    settings = CentralSettings(data_dir=tmp_path)
    database = Database(f"sqlite:///{tmp_path / 'fleetfix.db'}")
    try:
        worker = build_central(
            settings, database=database, celery=create_celery("memory://", make_current=False), runs_actions=True
        )
        assert isinstance(worker.remediator.cyborg, CentralCyborg)
        assert worker.remediator.cyborg.runs("reboot")
        api = build_central(settings, database=database, celery=create_celery("memory://", make_current=False))
        assert api.remediator.cyborg.runs("drain")
        assert not api.remediator.cyborg.runs("reboot")
    finally:
        database.dispose()


def test_an_app_without_a_runtime_says_so() -> None:
    """A task of an app that no root built a runtime for fails with what is missing, instead of finding
    whatever another part of the process installed."""
    bare = create_celery("memory://", make_current=False)
    with pytest.raises(LookupError, match="carries no Remediator"):
        Remediator.of(bare)
    assert find(bare, HostExecutors) is None
    assert HostExecutors.of(bare).executors() == []


def test_a_workers_runtime_closes_its_bmc_sessions_when_it_stops_and_a_disposed_one_does_not(
    tmp_path: Path,
) -> None:
    """The worker's runtime logs out of the Redfish sessions it kept when the worker stops; a runtime disposed of
    before is not closed again (a lambda connected strongly per runtime built closed every one ever built)."""
    from celery.signals import worker_shutdown

    def worker(name: str) -> CentralRuntime:
        (tmp_path / name).mkdir()
        return build_central(
            CentralSettings(data_dir=tmp_path / name),
            database=Database(f"sqlite:///{tmp_path / name / 'fleetfix.db'}"),
            celery=create_celery("memory://", name=name, make_current=False),
            runs_actions=True,
        )

    closed: list[str] = []
    live, gone = worker("live"), worker("gone")
    try:
        for name, runtime in (("live", live), ("gone", gone)):
            runtime.remediator.cyborg.close = lambda name=name: closed.append(name)  # type: ignore[attr-defined]
        gone.dispose()
        worker_shutdown.send(sender=None)
        assert closed == ["live"]
    finally:
        live.dispose()


def test_a_worker_that_keeps_only_its_app_still_closes_its_bmc_sessions_when_it_stops(tmp_path: Path) -> None:
    """`fleetfix worker` keeps only `build_central(...).celery` (api/cli.py): the receiver must outlive the
    runtime object (a weakly connected one was collected at once, and nothing closed the sessions)."""
    import gc
    import weakref

    from celery.signals import worker_shutdown

    runtime = build_central(
        CentralSettings(data_dir=tmp_path),
        database=Database(f"sqlite:///{tmp_path / 'fleetfix.db'}"),
        celery=create_celery("memory://", name="kept", make_current=False),
        runs_actions=True,
    )
    cyborg, database = runtime.remediator.cyborg, runtime.database
    closer = weakref.ref(runtime.closes_on_stop)  # type: ignore[arg-type]  # not kept alive by the test
    closed: list[str] = []
    cyborg.close = lambda: closed.append("closed")  # type: ignore[attr-defined]
    del runtime
    gc.collect()
    try:
        worker_shutdown.send(sender=None)
        assert closed == ["closed"]
    finally:
        if (receiver := closer()) is not None:  # this test's: no later test sees it
            receiver.disconnect()
        database.dispose()
