"""The report's Redfish additions (docs/report-schema.md, "Additions within version 1"): a report that
carries them validates and round-trips; their bounds hold; a report without them is what it was."""

from __future__ import annotations

import datetime as dt

import pytest
from pydantic import ValidationError

from checker.schemas import (
    HostIdentity,
    Observations,
    RedfishLogService,
    RedfishMemoryModule,
    RedfishState,
    Report,
    SelEntry,
    SelState,
)

NOW = dt.datetime(2026, 11, 27, 9, 0, tzinfo=dt.UTC)
SERVICE = "/redfish/v1/Managers/iDRAC.Embedded.1/LogServices/Sel/Entries"


def report(observations: Observations) -> Report:
    return Report(host=HostIdentity(hostname="h1"), captured_at=NOW, observations=observations)


def test_a_report_with_the_redfish_section_round_trips() -> None:
    entry = SelEntry(
        record_id=17,
        timestamp=NOW,
        sensor_type="Memory",
        event="Correctable ECC",
        direction="asserted",
        component="DIMMB1",
        log_service=SERVICE,
        entry_id="ab-12",
    )
    section = RedfishState(
        service="https://10.0.0.5",
        log_services=[RedfishLogService(entries_uri=SERVICE, newest_id="ab-12", newest_created=NOW, read=1)],
        memory=[RedfishMemoryModule(uri="/redfish/v1/Systems/1/Memory/3", id="3", kind="dimm", ce_lifetime=5)],
    )
    sent = report(Observations(sel=SelState(entries=[entry], last_record_id=17), redfish=section))
    back = Report.model_validate_json(sent.model_dump_json())
    assert back == sent
    assert back.observations.redfish is not None
    assert back.observations.redfish.protocol == "redfish"
    assert back.observations.sel is not None
    assert back.observations.sel.entries[0].entry_id == "ab-12"


def test_reports_without_the_additions_still_validate() -> None:
    plain = {"sensor_type": "Memory", "record_id": 3}
    assert SelEntry.model_validate(plain).log_service is None
    assert report(Observations()).observations.redfish is None


@pytest.mark.parametrize(
    "bad",
    [
        {"service": "x", "log_services": [{"entries_uri": "u"}] * 17},
        {"service": "x", "memory": [{"uri": "u", "id": "i", "kind": "dimm", "ce_lifetime": -1}]},
        {"service": "x", "memory": [{"uri": "u", "id": "i", "kind": "dimm", "ce_lifetime": 1.5}]},
        {"service": "x", "psus": [{"member_id": "0", "health": "Fine"}]},
        {"service": "x", "sensors_absent": True},
        {"service": "x" * 257},
        {"service": "x", "unknown": 1},
    ],
)
def test_the_section_is_bounded(bad: dict[str, object]) -> None:
    with pytest.raises(ValidationError):
        RedfishState.model_validate(bad)
    with pytest.raises(ValidationError):
        SelEntry.model_validate({"sensor_type": "Memory", "record_id": 1, "entry_id": "x" * 129})
