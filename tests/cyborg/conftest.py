"""Fixtures of the hand-off tests (test_handoff, test_lost_results): cyborg's central executor as a
worker installs it, on settings of the test's own."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from core.settings import Settings
from cyborg.central import CentralCyborg
from remediator import handoff
from tests.cyborg.fakes import ScriptedCyborg


@pytest.fixture
def settings(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Settings:
    """The settings cyborg's executor reads (a process with no worker: the scheduler's hooks only)."""
    configured = Settings(data_dir=tmp_path, scheduler_hooks={})
    monkeypatch.setattr(handoff, "get_settings", lambda: configured)
    monkeypatch.setattr(handoff, "_installed", None)
    return configured


@pytest.fixture
def cyborg_installed(settings: Settings, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """Cyborg's executor as a worker installs it; a test may script actions into the dict it returns."""
    scripted = ScriptedCyborg(CentralCyborg(settings))
    monkeypatch.setattr(handoff, "_installed", scripted)
    return scripted.scripts
