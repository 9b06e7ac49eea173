"""The remediator's section of the settings: unreachable hosts, signed reports, retention, rule packs, and the
repair policy its reactions to tickets apply (the settle period, the reopen window).

A subclass of the shared section (core.settings), so it reads `environment` too; the central root loads it
with the other stages' sections in one class (api/settings.py). The variables keep their FLEETFIX_ names.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import Field, field_validator

from core.settings import Settings
from remediator.baselines import BaselinesError, load_baselines


class RemediatorSettings(Settings):
    stale_after_intervals: int = Field(
        3, ge=2, le=100, description="A host with no report for this many intervals is unreachable."
    )
    require_signed_reports: bool | None = Field(
        None,
        description=(
            "Refuse reports (and cyborg's results, starts and refusals) from the broker that no host credential "
            "signed. Empty: on in production, off in development."
        ),
    )
    report_retention_days: int = Field(
        30,
        ge=1,
        le=3650,
        description="Raw reports and signals older than this many days are pruned (hourly, by the scheduler).",
    )
    rules_paths: list[Path] = Field(
        default_factory=list,
        description="Rule-pack YAML files or directories loaded after the built-in default pack.",
    )
    baselines_path: Path | None = Field(
        None,
        description=(
            "Your fleet's class baselines (firmware, the kernels CPU errata need), in the format of the built-in "
            "remediator/firmware_baselines.yaml: each hardware class it names replaces the built-in one. Empty: "
            "the built-in file alone (the simulated fleet's classes); `fleetfix up --simulate` uses the demo's."
        ),
    )
    # The repair policy: ticketing records a ticket's changes; when a repair is verified and when a
    # returning fault reopens a ticket is the remediator's call (remediator.repairs), so they live here.
    ticket_settle_s: int = Field(
        1800,
        ge=0,
        le=7 * 86400,
        description=(
            "After a technician resolves a ticket, the host must keep reporting this long without the fault "
            "before the ticket closes and the host goes back in service."
        ),
    )
    ticket_reopen_window_s: int = Field(
        30 * 86400,
        ge=0,
        le=365 * 86400,
        description="The same fault on the same host and part within this long after closing reopens the ticket.",
    )
    # A DIMM ticket's resolve also runs the memory under load on the host (remediator.repair_load).
    repair_load_test_s: int = Field(
        600,
        ge=10,
        le=3600,
        description=(
            "After a DIMM ticket is resolved, stressapptest runs this long on the host (verify_memory_under_load) "
            "before the ticket may close."
        ),
    )
    repair_load_test_memory_percent: int = Field(
        60, ge=1, le=90, description="Memory that load test takes, as a share of the host's MemAvailable."
    )
    repair_load_test_stall_ms: float = Field(
        100.0, ge=1, le=10_000, description="A stall this long on the probed CPUs during that load test fails it."
    )

    @field_validator("baselines_path")
    @classmethod
    def _baselines_load(cls, path: Path | None) -> Path | None:
        """A broken baselines file is refused at start-up (file:line: field: why), not at every report."""
        if path is not None:
            try:
                load_baselines(path)
            except BaselinesError as error:
                raise ValueError(str(error)) from None
        return path

    @property
    def signed_reports_required(self) -> bool:
        if self.require_signed_reports is not None:
            return self.require_signed_reports
        return self.environment == "production"
