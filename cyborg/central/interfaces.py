"""What the remediator asks of cyborg and what it gets back: the `Cyborg` Protocol and its orders.

The remediator decides what a step is; cyborg carries it out. An `Order` names the host (`Target`),
the step and the action with its parameters; `Cyborg.execute` either finishes it here (`Done`) or
hands it over (`HandedOver`: the step then waits for the host's result, or for a reinstalled host's
first report, until its deadline), or raises `StepFailed` with the command log so far. The other
methods are what waiting needs: a silent host's power cycle (`revive`), the end of a reinstall
(`finish_reimage`), and a look at a silent host from outside (`look`). Plain data both ways: nothing
here knows the database.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from celery import Signature

HostSend = Callable[[Signature], None]
"""Queues a message for a host's agent. The remediator's sends it when the step's transaction commits."""


@dataclass(frozen=True)
class Target:
    """The host an action is for, as the inventory knows it."""

    hostname: str
    datacenter: str = ""
    cluster: str = ""
    labels: Mapping[str, Any] = field(default_factory=dict)
    hardware_class: str = ""
    """The host's hardware class (FLEETFIX_BMC_PROTOCOL_BY_CLASS chooses its BMC protocol by it); "" unknown."""

    @property
    def address(self) -> str:
        """What to ping: the `address` label, else the host's name."""
        label = self.labels.get("address")
        return str(label) if label else self.hostname


@dataclass(frozen=True)
class Order:
    """One action for cyborg to carry out: a step of a plan, or a drain/undrain around one (`step` None)."""

    target: Target
    remediation_id: int
    step: int | None
    attempt: int
    action: str
    params: Mapping[str, Any] = field(default_factory=dict)
    """The step's parameters, bookkeeping (timeout_s, dry_run, priority) included."""
    evidence: Mapping[str, Any] = field(default_factory=dict)
    """What justified the plan: where the targets a plan leaves to cyborg are pinned from."""

    @property
    def dry_run(self) -> bool:
        return bool(self.params.get("dry_run", False))


@dataclass(frozen=True)
class Done:
    """Finished here: the step's result (outcome, what changed, the command log)."""

    result: dict[str, Any]


@dataclass(frozen=True)
class HandedOver:
    """On its way: the step waits for `awaits` until `deadline`; `record` (what was sent, the log) is kept on it."""

    awaits: Literal["host", "first_report"]
    deadline: dt.datetime
    record: dict[str, Any]
    envelope_id: str | None = None


class StepFailed(Exception):
    """Cyborg could not carry out the order; `detail` holds what it ran (the command log)."""

    def __init__(self, message: str, detail: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.detail = detail or {}


class HostFoundOff(StepFailed):
    """A power cycle found the host off and was not to turn it on (its `if_off` is refuse): nothing was sent.
    Not the fix failing: the remediator ends the remediation and has the host probed as a silent one, whose
    `powered_off` verdict is the host-powered-off rule's (review r2 finding 6)."""


@dataclass(frozen=True)
class Sighting:
    """A silent host seen from outside: what its BMC says of the chassis power, and whether it answers a ping."""

    power: str  # on, off, unknown
    ping: str  # answered, no_answer, not_probed
    bmc: str | None  # the BMC's address, if one is known
    address: str
    notes: list[str]
    commands: list[dict[str, Any]]


class Cyborg(Protocol):
    """Carries out every action the remediator plans, on the host (signed envelopes) or centrally."""

    def runs(self, action: str) -> bool:
        """Whether `execute` carries out this action here (a process that started no worker runs only the
        scheduler's drain and undrain hooks)."""
        ...

    def execute(self, order: Order, send: HostSend | None = None) -> Done | HandedOver:
        """Hand a host action to its host through `send`, or run a central one; raises StepFailed."""
        ...

    def finish_reimage(self, order: Order) -> dict[str, Any]:
        """The reinstalled host reported from its new image: boot from disk again. Returns the command log
        (`commands`) and a `warning` when the boot device could not be reset; never raises."""
        ...

    def revive(self, order: Order) -> dict[str, Any] | None:
        """The host did not come back from `order.action` by its deadline: one cold power cycle through its BMC.
        None when that cannot help (the action does not restart the host) or no BMC reaches it; else what
        was done (`error` when it failed) and the command log (`commands`)."""
        ...

    def look(self, target: Target) -> Sighting:
        """Ask the host's BMC for the chassis power state and ping the host; never raises."""
        ...
