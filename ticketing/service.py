"""Ticketing's operations under one name, for other stages' callers: opening with dedup
(ticketing.opening), the lifecycle and the reactions to it (ticketing.lifecycle), reads and the
repair history (ticketing.queries). New code may import those modules directly."""

from __future__ import annotations

from ticketing.history import SYNC_TASK
from ticketing.lifecycle import (
    WORK_STATES,
    LifecycleEvent,
    Reaction,
    Reactions,
    assign,
    begin_verification,
    cancel,
    check_scope,
    claim,
    close,
    comment,
    reopen,
    resolve,
    start,
)
from ticketing.opening import (
    DETECTION_EVERY,
    MAX_DETECTIONS_KEPT,
    note_detection,
    open_ticket,
    ticket_for_detection,
)
from ticketing.queries import (
    find_open,
    get_ticket,
    holding_tickets_of_host,
    list_tickets,
    lock_ticket,
    open_tickets_of_host,
    repair_query,
    repair_stats,
    ticket_query,
    tickets_in,
    tracker_link,
)

__all__ = [
    "DETECTION_EVERY",
    "MAX_DETECTIONS_KEPT",
    "SYNC_TASK",
    "WORK_STATES",
    "LifecycleEvent",
    "Reaction",
    "Reactions",
    "assign",
    "begin_verification",
    "cancel",
    "check_scope",
    "claim",
    "close",
    "comment",
    "find_open",
    "get_ticket",
    "holding_tickets_of_host",
    "list_tickets",
    "lock_ticket",
    "note_detection",
    "open_ticket",
    "open_tickets_of_host",
    "reopen",
    "repair_query",
    "repair_stats",
    "resolve",
    "start",
    "ticket_for_detection",
    "ticket_query",
    "tickets_in",
    "tracker_link",
]
