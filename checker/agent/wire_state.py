"""What the agent remembers of the centre's state, to send a report as a delta (checker.wire).

Only acknowledged state is a base: a report the centre named in its answer (IngestResult.bases) as
the host's stored state. Until it names one the agent sends in full: a centre that does not know
deltas names none, so this is the capability's negotiation too. Full as well on the first cycle
after a start, every `full_every` cycles, and right after the centre refused a delta (the HTTP
delivery then resends the same report whole). After `REFUSALS_BEFORE_BACKOFF` refusals in a row
(a centre whose schema digests differently, a proxy without the route) the agent sends whole for
`BACKOFF_S`, so a lasting refusal costs one extra POST per hour, not one per cycle.

Of a report sent, its id, capture time, per-section digests and section values are kept
(checker.wire.SentState: the values are what a section's patch is relative to, about the report's
JSON size), for the last KEEP_SENT reports that went over HTTP (the only answers read). The base is
kept in STATE_DIR/wire_base.json, so after a restart the centre's answer to the first (full) report
can name it again (a base stored without values, by stage 1, sends its moved sections whole).
"""

from __future__ import annotations

import logging
import os
import time
import uuid
from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from checker.schemas import Report
from checker.wire import SentState, encode_delta, section_values, sent_state

log = logging.getLogger(__name__)
KEEP_SENT = 4  # reports sent and not yet named: the centre names the one it stored, or an earlier base
# Refusals in a row before the agent stops trying deltas for BACKOFF_S. Three: one refusal is the ordinary
# answer to a pruned base; three in a row, each after a full report the centre then named, means the centre
# (or a proxy) will not take this agent's deltas: wrong if a centre refuses at random, which it does not.
REFUSALS_BEFORE_BACKOFF = 3
BACKOFF_S = 3600.0  # an hour of whole reports: the cost of a full report each cycle, not of two POSTs


class WireState:
    def __init__(
        self,
        hostname: str,
        *,
        path: Path | None,
        full_every: int = 60,
        enabled: bool = True,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.hostname = hostname
        self.path = path
        self.full_every = full_every
        self.enabled = enabled
        self.clock = clock
        self.base: SentState | None = None
        self.known: OrderedDict[uuid.UUID, SentState] = OrderedDict()  # may become the base when named
        self.deltas_since_full = 0
        self.first = True
        self.took_delta = False  # whether the centre took this cycle's report as its delta
        self.refusals = 0  # deltas refused in a row
        self.backoff_until: float | None = None
        if enabled and path is not None and path.exists():
            try:
                stored = SentState.model_validate_json(path.read_bytes())
            except (OSError, ValidationError):
                log.warning("checker.wire.base_unreadable", extra={"fields": {"path": str(path)}})
            else:
                self.known[stored.report_id] = stored  # a base again only when the centre names it

    def prepare(self, report: Report) -> dict[str, Any] | None:
        """This cycle's report as a delta against the acknowledged base, or None: send it in full. Called where
        the report goes over HTTP only; its digests are kept: the centre's answer may name it as the next base."""
        first, self.first, self.took_delta = self.first, False, False
        if not self.enabled:
            return None
        values = section_values(report)
        state = sent_state(report, values)
        self.known[state.report_id] = state
        self.known.move_to_end(state.report_id)
        while len(self.known) > KEEP_SENT:
            self.known.popitem(last=False)
        if first or self.base is None or self.deltas_since_full + 1 >= self.full_every or self.backing_off():
            return None
        return encode_delta(report, self.base, values=values, state=state)

    def backing_off(self) -> bool:
        if self.backoff_until is None:
            return False
        if self.clock() < self.backoff_until:
            return True
        self.backoff_until = None
        return False

    def taken(self) -> None:
        """The centre took this cycle's delta."""
        self.took_delta = True
        self.refusals = 0

    def finish(self) -> None:
        """The cycle's report was delivered, spooled or dropped: count the deltas since the last full one."""
        self.deltas_since_full = self.deltas_since_full + 1 if self.took_delta else 0
        self.took_delta = False  # a cycle the broker delivers does not prepare: no delta taken then

    def answered(self, answer: dict[str, Any]) -> None:
        """The centre's answer to a report (IngestResult): the base it names for this host, if any."""
        for base in answer.get("bases") or []:
            if base.get("hostname") != self.hostname:
                continue
            try:
                report_id = uuid.UUID(str(base.get("report_id")))
            except ValueError:
                return
            if self.base is not None and self.base.report_id == report_id:
                return
            named = self.known.get(report_id)
            self.base = named  # None: the centre holds a state this agent no longer has; full until it names one
            if named is not None:
                self._store(named)
            return

    def refused(self, reason: str) -> None:
        """The centre did not take the delta (send full, malformed, no route): forget the base; after
        REFUSALS_BEFORE_BACKOFF in a row, send whole for BACKOFF_S."""
        self.refusals += 1
        log.info("checker.wire.send_full", extra={"fields": {"reason": reason[:300], "in_a_row": self.refusals}})
        if self.refusals >= REFUSALS_BEFORE_BACKOFF:
            self.backoff_until = self.clock() + BACKOFF_S
            log.warning(
                "checker.wire.backoff",
                extra={"fields": {"refusals": self.refusals, "seconds": BACKOFF_S, "reason": reason[:300]}},
            )
        if self.base is not None:
            self.known.pop(self.base.report_id, None)
        self.base = None
        self.took_delta = False

    def _store(self, base: SentState) -> None:
        if self.path is None:
            return
        tmp = self.path.with_suffix(".tmp")
        try:
            tmp.write_bytes(base.model_dump_json().encode())
            os.replace(tmp, self.path)
        except OSError as error:
            log.warning("checker.wire.base_write_failed", extra={"fields": {"error": str(error)}})
