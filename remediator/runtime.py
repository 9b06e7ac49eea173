"""The remediator's part of a process's runtime: its database, active rules, cyborg's executor and the
host-credential cache, built once by the process's root (api/runtime.py) and handed in, never a global.

Tasks reach it through their Celery app (`Remediator.of(self.app)`); code deep in a unit of work (a step
that calls cyborg, a repair's settle period) through its session (`Remediator.in_session(session)`),
whose Database the root gave it to.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy.orm import Session

from core.db import Database, service_of
from core.queue import service
from cyborg.central import Cyborg
from remediator.hostauth import HostKeys
from remediator.rules import RuleRegistry
from remediator.settings import RemediatorSettings


@dataclass(frozen=True, eq=False)
class Remediator:
    settings: RemediatorSettings
    database: Database
    rules: RuleRegistry
    cyborg: Cyborg
    """Every action on a host goes through it (remediator.handoff); the root chooses which (a worker's
    carries out everything, an API process's only the scheduler's drain and undrain hooks)."""
    host_keys: HostKeys

    @classmethod
    def build(
        cls, settings: RemediatorSettings, database: Database, cyborg: Cyborg, *, rules: RuleRegistry | None = None
    ) -> Remediator:
        return cls(
            settings=settings,
            database=database,
            rules=rules if rules is not None else RuleRegistry(settings.rules_paths),
            cyborg=cyborg,
            host_keys=HostKeys(database),
        )

    @classmethod
    def of(cls, app: Any) -> Remediator:
        """The remediator a Celery app's tasks run with (its process's root provided it)."""
        return service(app, cls)

    @classmethod
    def in_session(cls, session: Session) -> Remediator:
        """The remediator of the runtime whose Database opened `session`."""
        found = service_of(session, cls)
        if found is None:
            raise LookupError("this session's Database carries no Remediator: build it through a runtime's root")
        return found
