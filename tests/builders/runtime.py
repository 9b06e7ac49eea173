"""The central runtime around a test's database, wired as a process's root wires it (api/runtime.py).

The `db` fixture builds one for every test, with ticketing alone (no reaction of the remediator to ticket
changes: `repair_reactions()` adds it); a test that needs other parts (cyborg's executor with its fakes,
settings of its own, other rules, the reactions) builds it again with them (`rewire`): the app and the
database then carry the new parts, and nothing process-wide is patched.
"""

from __future__ import annotations

import functools
from typing import Any

from celery import current_app
from sqlalchemy.orm import Session

from api.runtime import CentralRuntime, build_central
from api.settings import CentralSettings, load_central_settings
from core.db import Database, service_of
from core.queue import create_celery
from cyborg.central import Cyborg
from remediator.rules import RuleRegistry
from ticketing.lifecycle import Reactions


@functools.cache
def default_rules() -> RuleRegistry:
    """The built-in pack, loaded once per test run (as a process loads it once)."""
    return RuleRegistry()


def central(
    database: Database,
    celery: Any = None,
    *,
    settings: CentralSettings | None = None,
    cyborg: Cyborg | None = None,
    rules: RuleRegistry | None = None,
    reactions: Reactions | None = None,
    runs_actions: bool = False,
) -> CentralRuntime:
    """A central runtime around `database`, on `celery` (default: the current app, the test run's in-process one
    unless the test made another current)."""
    runtime = build_central(
        settings if settings is not None else load_central_settings(),
        database=database,
        celery=celery if celery is not None else current_app._get_current_object(),
        cyborg=cyborg,
        rules=rules if rules is not None else default_rules(),
        reactions=reactions if reactions is not None else Reactions(),
        runs_actions=runs_actions,
    )
    database.provide(CentralRuntime, runtime)  # so rewire() finds what the test runs with
    return runtime


def wired(database: Database) -> Database:
    """`database` inside a central runtime on the current app (a test's own database, e.g. the integration one)."""
    central(database)
    return database


def runtime_of(where: Database | Session) -> CentralRuntime:
    """The runtime a test's database (or a session of it) belongs to."""
    found = service_of(where, CentralRuntime) if isinstance(where, Session) else where.services.get(CentralRuntime)
    assert found is not None, "not a database the db fixture (or central()) built a runtime around"
    return found


def rewire(
    where: Database | Session,
    *,
    settings: CentralSettings | None = None,
    celery: Any = None,
    cyborg: Cyborg | None = None,
    rules: RuleRegistry | None = None,
    reactions: Reactions | None = None,
    runs_actions: bool = False,
) -> CentralRuntime:
    """The test's runtime (of its database, or of a session of it) built again with some parts of the test's
    own; the others stay."""
    old = runtime_of(where)
    return central(
        old.database,
        celery if celery is not None else old.celery,
        settings=settings if settings is not None else old.settings,
        cyborg=cyborg if cyborg is not None else (None if runs_actions else old.remediator.cyborg),
        rules=rules if rules is not None else old.remediator.rules,
        reactions=reactions if reactions is not None else old.ticketing.reactions,
        runs_actions=runs_actions,
    )


def unconnected(database: Database | None = None) -> CentralRuntime:
    """A runtime on an app that is no process's current one, and a database that is never opened (a test that
    only reads the app's routes) or the one given (one that cannot be reached)."""
    return build_central(
        load_central_settings(),
        database=database if database is not None else Database("sqlite://"),
        celery=create_celery("memory://", make_current=False),
        rules=default_rules(),
    )
