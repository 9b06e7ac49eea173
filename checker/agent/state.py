"""The agent process's running parts, for its tasks to reach."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from checker.agent.worker import CheckLoop

check_loop: CheckLoop | None = None
