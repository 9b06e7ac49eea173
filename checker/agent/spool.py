"""The agent's report spool: reports kept on local disk while the central side is unreachable.

One JSON file per report, named by capture order, written atomically (temporary file, then
rename) so a crash never leaves half a report. Bounded: when full, the oldest reports are dropped
and counted in a persisted total that every later report carries (AgentStatus.spool_dropped_total).
"""

from __future__ import annotations

import json
import logging
import os
import time
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

DROPPED_FILE = "dropped_total"


class Spool:
    def __init__(self, directory: Path, max_reports: int) -> None:
        self.directory = directory
        self.max_reports = max_reports
        directory.mkdir(parents=True, exist_ok=True)
        for stale in directory.glob("*.tmp"):  # a write a crash interrupted
            stale.unlink(missing_ok=True)

    def files(self) -> list[Path]:
        """Spooled reports, oldest first."""
        return sorted(self.directory.glob("*.json"))

    def __len__(self) -> int:
        return len(self.files())

    @property
    def dropped_total(self) -> int:
        try:
            return int((self.directory / DROPPED_FILE).read_text(encoding="utf-8").strip() or 0)
        except (OSError, ValueError):
            return 0

    def count_dropped(self, count: int) -> None:
        if count <= 0:
            return
        total = self.dropped_total + count
        tmp = self.directory / f"{DROPPED_FILE}.tmp"
        tmp.write_text(str(total), encoding="utf-8")
        os.replace(tmp, self.directory / DROPPED_FILE)
        log.warning("checker.spool.dropped", extra={"fields": {"dropped": count, "dropped_total": total}})

    def put(self, payload: dict[str, Any]) -> None:
        """Keep one report; drop the oldest ones beyond max_reports."""
        name = f"{time.time_ns():020d}-{payload.get('report_id', 'report')}"
        tmp = self.directory / f"{name}.tmp"
        tmp.write_text(json.dumps(payload, separators=(",", ":")), encoding="utf-8")
        os.replace(tmp, self.directory / f"{name}.json")
        files = self.files()
        excess = files[: max(0, len(files) - self.max_reports)]
        for path in excess:
            path.unlink(missing_ok=True)
        self.count_dropped(len(excess))

    def load(self, path: Path) -> dict[str, Any] | None:
        """A spooled report; an unreadable one is removed and counted as dropped."""
        try:
            payload = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            payload = None
        if not isinstance(payload, dict):
            path.unlink(missing_ok=True)
            self.count_dropped(1)
            return None
        return payload

    def remove(self, paths: list[Path]) -> None:
        for path in paths:
            path.unlink(missing_ok=True)
