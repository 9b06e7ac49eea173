"""Reports as real agents send them: an EDAC report of one host, its JSON payload, a CE storm."""

from __future__ import annotations

import datetime as dt
import uuid
from typing import Any

from checker.schemas import (
    CpuIdentity,
    DimmInventory,
    EdacController,
    EdacDimm,
    EdacState,
    HostIdentity,
    Identity,
    Observations,
    Report,
)

T0 = dt.datetime(2026, 3, 1, 12, 0, tzinfo=dt.UTC)
LABEL = "CPU_SrcID#0_Ha#0_Chan#2_DIMM#0"


def dimm_inventory_labels(dimms: int = 1) -> dict[str, str]:
    """The inventory labels of a test host placed in a real hardware class: these reports list `dimms` DIMMs
    (edac_report lists one) where the class's capacity block says how many it fills (compute-skx-2s: 12). The
    host's inventory says what it has, as an operator's does for a host run short on purpose, so
    capacity-dimm-missing has nothing to report (docs/rules.md, "Lost capacity")."""
    return {"capacity.dimms": str(dimms)}


def edac_report(
    hostname: str = "web-001",
    *,
    at: dt.datetime = T0,
    ce: int = 0,
    ue: int = 0,
    label: str = LABEL,
    boot_id: str = "boot-1",
    report_id: uuid.UUID | None = None,
) -> Report:
    return Report(
        report_id=report_id or uuid.uuid4(),
        host=HostIdentity(hostname=hostname, boot_id=boot_id),
        captured_at=at,
        observations=Observations(
            edac=EdacState(
                controllers=[
                    EdacController(
                        mc=0,
                        mc_name="Skylake Socket#0 IMC#0",
                        ce_count=ce,
                        ue_count=ue,
                        dimms=[
                            EdacDimm(mc=0, name="dimm2", layout="dimm", label=label, ce_count=ce, ue_count=ue),
                            EdacDimm(
                                mc=0,
                                name="dimm3",
                                layout="dimm",
                                label="CPU_SrcID#0_Ha#0_Chan#3_DIMM#0",
                                ce_count=0,
                                ue_count=0,
                            ),
                        ],
                    )
                ]
            ),
            identity=Identity(
                kernel="6.1.0-28-amd64",
                cpus=[CpuIdentity(socket=0, vendor="GenuineIntel", family=6, model=85, stepping=4)],
                dimms=[
                    DimmInventory(
                        locator="Chan#2_DIMM#0",
                        bank_locator="NODE 0 CHANNEL 2 DIMM 0",
                        size_mb=32768,
                        part_number="M393A4K40CB2-CVF",
                        serial="1A2B3C4D",
                    )
                ],
            ),
        ),
    )


def payload(report: Report) -> dict[str, Any]:
    return report.model_dump(mode="json")


def storm_reports(hostname: str = "web-001", *, start: dt.datetime = T0, ce_per_s: float = 50.0) -> list[Report]:
    """Three reports a minute apart with a sustained CE storm: enough for dimm-ce-storm's `for: 30s`."""
    return [edac_report(hostname, ce=int(ce_per_s * 60 * i), at=start + dt.timedelta(seconds=60 * i)) for i in range(3)]
