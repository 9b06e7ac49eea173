"""The host page says how the host reports corrected errors and how fast its SMI counter runs."""

from __future__ import annotations

import datetime as dt

from fastapi.testclient import TestClient

from api.web.reporting import reporting_fact
from core.db import Database
from core.models import Role
from remediator.models import Host, Signal
from tests.web.helpers import signed_in

AT = dt.datetime(2026, 9, 1, 8, 0, tzinfo=dt.UTC)


def test_the_facts_line_shows_the_mode_against_the_class_and_the_smi_rate(client: TestClient, db: Database) -> None:
    with db.session() as session:
        host = Host(hostname="smi-01", hardware_class="compute-icx-2s")
        session.add(host)
        session.flush()
        mode = {"mode": "firmware_first", "by": "errors", "expected_mode": "cmci", "evidence": [], "ppr_active": False}
        rate = {"baseline": 0.02, "errors_arriving": True, "error_sources": ["ghes"], "delta": 180, "elapsed_s": 60}
        session.add(
            Signal(host_id=host.id, kind="error_reporting_mode", subject="host", value=1.0, detail=mode, observed_at=AT)
        )
        session.add(Signal(host_id=host.id, kind="smi_rate", subject="host", value=3.0, detail=rate, observed_at=AT))
        session.commit()
    signed_in(client, db, "vic", Role.viewer)
    page = client.get("/hosts/smi-01").text
    assert (
        '<dd id="error-reporting">firmware-first (SMI) (by errors); class expects CMCI — MISMATCH · '
        "3.00 SMI/s (baseline 0.02/s), errors arriving: ghes</dd>"
    ) in page


def test_no_signals_no_line() -> None:
    assert reporting_fact([]) is None


def test_unknown_arrivals_say_why_and_smis_that_track_the_ces_say_so() -> None:
    class Row:
        def __init__(self, kind: str, value: float, detail: dict[str, object]) -> None:
            self.kind, self.value, self.detail = kind, value, detail

    blind = {"errors_arriving": None, "blind_spots": ["ignore_ce=1"], "baseline": None}
    assert reporting_fact([Row("smi_rate", 2.0, blind)]) == "2.00 SMI/s, errors may go unseen: ignore_ce=1"  # type: ignore[list-item]
    tracks = {"errors_arriving": True, "error_sources": ["edac"], "tracks_ce_rate": True, "ce_rate": 2.5}
    line = reporting_fact([Row("smi_rate", 3.0, tracks)])  # type: ignore[list-item]
    assert line == "3.00 SMI/s, errors arriving: edac, tracks the CE rate (2.50/s)"
