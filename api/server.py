"""The ASGI application for `fleetfix api` (uvicorn imports it by name in each worker)."""

from __future__ import annotations

from api.app import create_app
from api.runtime import boot_central
from core.settings import get_settings

_settings = get_settings()
_database, _celery = boot_central(_settings)
app = create_app(_settings, _database, _celery)
