"""The ASGI application for `fleetfix api` (uvicorn imports it by name in each worker): the process's
runtime, built once at import by its root (api/runtime.py), and the app that serves it."""

from __future__ import annotations

from api.app import create_app
from api.runtime import build_central
from api.settings import load_central_settings

app = create_app(build_central(load_central_settings()))
