"""The central processes' settings: the shared section and every stage's, assembled here, in the root.

Each stage declares its own section beside its code (remediator/settings.py, ticketing/settings.py,
cyborg/central/settings.py), each a subclass of the shared one (core.settings.Settings); this class is
all of them, so one load reads every FLEETFIX_* variable of a central process, runs every section's checks
(the cross-section ones too: an alert URL's scheme depends on ENVIRONMENT) and refuses any name that no
section declares. The root hands the one object to each stage, which sees it as its own section.
"""

from __future__ import annotations

from core.settings import Settings, load_settings
from cyborg.central.settings import CyborgSettings
from remediator.settings import RemediatorSettings
from ticketing.settings import TicketingSettings

SECTIONS: tuple[type[Settings], ...] = (Settings, RemediatorSettings, TicketingSettings, CyborgSettings)
"""Every section a central process reads: the shared one first, then the stages'."""


class CentralSettings(RemediatorSettings, TicketingSettings, CyborgSettings):
    """Every section of a central process in one object (a new stage's section is added to the bases)."""


def load_central_settings(**overrides: object) -> CentralSettings:
    """The settings of a central process from the environment and FLEETFIX_CONFIG, or SettingsError."""
    return load_settings(CentralSettings, **overrides)
