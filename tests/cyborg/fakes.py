"""A stand-in for cyborg's central executor, through its Protocol (cyborg.central.Cyborg): the actions a
test scripts answer as it says, the rest go to the executor it wraps. Installed by building the test's
runtime again with it (tests/builders/runtime.py): the runtime ends with the test's database."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from typing import Any

from core.db import Database
from cyborg.central import Cyborg, Done, HandedOver, HostSend, Order, Sighting, Target
from tests.builders.runtime import rewire, runtime_of

Script = Callable[[Order], Done | HandedOver | dict[str, Any] | None]
"""A scripted action: a result dict (done here), None (handed to the host, which reports later), an
outcome, or cyborg's StepFailed raised."""


class ScriptedCyborg:
    def __init__(self, then: Cyborg, scripts: dict[str, Script] | None = None) -> None:
        self.then = then
        self.scripts: dict[str, Script] = scripts if scripts is not None else {}
        self.orders: list[Order] = []

    def runs(self, action: str) -> bool:
        return action in self.scripts or self.then.runs(action)

    def execute(self, order: Order, send: HostSend | None = None) -> Done | HandedOver:
        self.orders.append(order)
        script = self.scripts.get(order.action)
        if script is None:
            return self.then.execute(order, send)
        outcome = script(order)
        if outcome is None:
            return HandedOver("host", dt.datetime.now(dt.UTC) + dt.timedelta(hours=1), {})
        if isinstance(outcome, dict):
            return Done(outcome)
        return outcome

    def finish_reimage(self, order: Order) -> dict[str, Any]:
        return self.then.finish_reimage(order)

    def revive(self, order: Order) -> dict[str, Any] | None:
        return self.then.revive(order)

    def look(self, target: Target) -> Sighting:
        return self.then.look(target)


def install_scripted(db: Database, **scripts: Script) -> ScriptedCyborg:
    """Script some actions over the executor the test's runtime has now (by default: the scheduler's hooks)."""
    scripted = ScriptedCyborg(runtime_of(db).remediator.cyborg, dict(scripts))
    rewire(db, cyborg=scripted)
    return scripted
