"""What the agent remembers of the centre's state, to send a report as a delta (checker.wire).

Only acknowledged state is a base: a report the centre named in its answer (IngestResult.bases) as
the host's stored state. Until it names one the agent sends in full: a centre that does not know
deltas names none, so this is the capability's negotiation too. Full as well on the first cycle
after a start, every `full_every` cycles, and right after the centre answered "send full" (the
HTTP delivery then resends the same report whole). The base is kept in STATE_DIR/wire_base.json,
so after a restart the centre's answer to the first (full) report can name it again.
"""

from __future__ import annotations

import logging
import os
import uuid
from collections import OrderedDict
from pathlib import Path
from typing import Any

import orjson
from pydantic import ValidationError

from checker.schemas import Report
from checker.wire import encode_delta

log = logging.getLogger(__name__)
KEEP_SENT = 4  # reports sent and not yet named: the centre names the one it stored, or an earlier base


class WireState:
    def __init__(self, hostname: str, *, path: Path | None, full_every: int = 60, enabled: bool = True) -> None:
        self.hostname = hostname
        self.path = path
        self.full_every = full_every
        self.enabled = enabled
        self.base: Report | None = None
        self.known: OrderedDict[uuid.UUID, Report] = OrderedDict()  # may become the base when named
        self.deltas_since_full = 0
        self.first = True
        self.took_delta = False  # whether the centre took this cycle's report as its delta
        if path is not None and path.exists():
            try:
                stored = Report.model_validate_json(path.read_bytes())
            except (OSError, ValidationError):
                log.warning("checker.wire.base_unreadable", extra={"fields": {"path": str(path)}})
            else:
                self.known[stored.report_id] = stored  # a base again only when the centre names it

    def prepare(self, report: Report) -> dict[str, Any] | None:
        """This cycle's report as a delta against the acknowledged base, or None: send it in full. The report
        is kept: the centre's answer may name it as the next base."""
        first, self.first, self.took_delta = self.first, False, False
        delta = None
        if self.enabled and not first and self.base is not None and self.deltas_since_full + 1 < self.full_every:
            delta = encode_delta(report, self.base)
        self.known[report.report_id] = report
        self.known.move_to_end(report.report_id)
        while len(self.known) > KEEP_SENT:
            self.known.popitem(last=False)
        return delta

    def finish(self) -> None:
        """The cycle's report was delivered, spooled or dropped: count the deltas since the last full one."""
        self.deltas_since_full = self.deltas_since_full + 1 if self.took_delta else 0

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
        """The centre answered "send full": its base is gone or differs; forget it."""
        log.info("checker.wire.send_full", extra={"fields": {"reason": reason[:300]}})
        if self.base is not None:
            self.known.pop(self.base.report_id, None)
        self.base = None
        self.took_delta = False

    def _store(self, base: Report) -> None:
        if self.path is None:
            return
        tmp = self.path.with_suffix(".tmp")
        try:
            tmp.write_bytes(orjson.dumps(base.model_dump(mode="json")))
            os.replace(tmp, self.path)
        except OSError as error:
            log.warning("checker.wire.base_write_failed", extra={"fields": {"error": str(error)}})
