"""One error body for every failure: {"error": {"code", "message", "detail"}}."""

from __future__ import annotations

import logging
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from sqlalchemy.exc import DataError
from starlette.exceptions import HTTPException as StarletteHTTPException

from core.errors import FleetfixError

log = logging.getLogger(__name__)


def error_body(code: str, message: str, detail: Any = None) -> dict[str, Any]:
    return {"error": {"code": code, "message": message, "detail": detail}}


def install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(FleetfixError)
    async def _fleetfix_error(_: Request, exc: FleetfixError) -> JSONResponse:
        return JSONResponse(error_body(exc.code, exc.message, exc.detail), status_code=exc.status_code)

    @app.exception_handler(RequestValidationError)
    async def _validation_error(_: Request, exc: RequestValidationError) -> JSONResponse:
        problems = [
            {"field": ".".join(str(p) for p in item["loc"]), "message": item["msg"]} for item in exc.errors()[:50]
        ]
        message = "; ".join(f"{p['field']}: {p['message']}" for p in problems[:5])
        return JSONResponse(error_body("invalid", message, problems), status_code=422)

    @app.exception_handler(DataError)
    async def _data_error(_: Request, exc: DataError) -> JSONResponse:
        # A value the database cannot hold (an id past its integer type, a text it refuses) that
        # validation let through: the client's, so a 422, never a 500 with the store's words.
        log.warning("api.request.data_error", extra={"fields": {"error": str(exc.orig).splitlines()[0][:200]}})
        return JSONResponse(error_body("invalid", "a value is out of the range the service can store"), status_code=422)

    @app.exception_handler(OverflowError)
    async def _overflow(_: Request, exc: OverflowError) -> JSONResponse:
        return JSONResponse(error_body("invalid", f"a value is out of range: {exc}"), status_code=422)

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(_: Request, exc: StarletteHTTPException) -> JSONResponse:
        return JSONResponse(error_body("http_error", str(exc.detail)), status_code=exc.status_code, headers=exc.headers)
