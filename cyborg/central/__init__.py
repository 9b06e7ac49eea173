"""Cyborg's central entry point: every action the remediator plans is carried out through here.

`Cyborg` (interfaces.py) is the one Protocol and `CentralCyborg` (executor.py) fleetfix's own: a host
action is signed (issuing.py) and handed to the host's queue through the `send` the remediator
passes; a central one (BMC power cycle, reimage, the scheduler's drain/undrain hooks, an agent
restart, a look at a silent host) runs here. The remediator imports only this package and
`cyborg.actions` (an import-linter contract): drivers, commands and envelopes stay cyborg's.
Nothing here touches the database.
"""

from cyborg.central.events import envelope_refused, message_refused
from cyborg.central.executor import SCHEDULER_ACTIONS, CentralCyborg, deadline_grace
from cyborg.central.interfaces import (
    Cyborg,
    Done,
    HandedOver,
    HostFoundOff,
    HostSend,
    Order,
    Sighting,
    StepFailed,
    Target,
)
from cyborg.central.issuing import (
    DELIVERY_GRACE_S,
    SigningKeyMissing,
    issue,
    message_expires_s,
    resolve_params,
    signer_for,
)

__all__ = [
    "DELIVERY_GRACE_S",
    "SCHEDULER_ACTIONS",
    "CentralCyborg",
    "Cyborg",
    "Done",
    "HandedOver",
    "HostFoundOff",
    "HostSend",
    "Order",
    "Sighting",
    "SigningKeyMissing",
    "StepFailed",
    "Target",
    "deadline_grace",
    "envelope_refused",
    "issue",
    "message_expires_s",
    "message_refused",
    "resolve_params",
    "signer_for",
]
