"""Ticketing's part of a process's runtime: its database, the external tracker, the Slack sender, and
what other stages handed in (the alerts' subject look-ups, the reactions to ticket changes). Built once by
the process's root (api/runtime.py), never a global; tasks reach it through their Celery app
(`Ticketing.of(self.app)`), the lifecycle and the alerts' flush through their session (the root gives the
reactions and the look-ups to the Database).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any

from core.db import Database
from core.queue import service
from ticketing.backends import Tracker, make_tracker
from ticketing.lifecycle import Reactions
from ticketing.notify.events import Subjects
from ticketing.notify.slack import Redactor, Sender, sender_for
from ticketing.settings import TicketingSettings


@dataclass(eq=False)
class Ticketing:
    settings: TicketingSettings
    database: Database
    subjects: Subjects = field(default_factory=Subjects)
    reactions: Reactions = field(default_factory=Reactions)
    tracker_factory: Any = make_tracker
    """TicketingSettings -> Tracker; called once, when the first sync needs the tracker (after a worker forked)."""
    sender_factory: Any = sender_for
    """TicketingSettings -> (Sender, Redactor); called once, when the first alert is delivered."""
    _tracker: Tracker | None = field(default=None, init=False, repr=False)
    _sender: tuple[Sender, Redactor] | None = field(default=None, init=False, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False)

    @property
    def tracker(self) -> Tracker:
        """One tracker (one HTTP client) per runtime, built on first use."""
        with self._lock:
            if self._tracker is None:
                self._tracker = self.tracker_factory(self.settings)
            return self._tracker

    @property
    def sender(self) -> tuple[Sender, Redactor]:
        """One Slack client per runtime, not one per message."""
        with self._lock:
            if self._sender is None:
                self._sender = self.sender_factory(self.settings)
            return self._sender

    @classmethod
    def of(cls, app: Any) -> Ticketing:
        """The ticketing a Celery app's tasks run with (its process's root provided it)."""
        return service(app, cls)
