"""Errors every stage raises; the API maps each to one HTTP status and body shape."""

from __future__ import annotations


class FleetfixError(Exception):
    status_code = 400
    code = "bad_request"

    def __init__(self, message: str, *, detail: object = None) -> None:
        super().__init__(message)
        self.message = message
        self.detail = detail


class NotFound(FleetfixError):
    status_code = 404
    code = "not_found"


class Forbidden(FleetfixError):
    status_code = 403
    code = "forbidden"


class Conflict(FleetfixError):
    status_code = 409
    code = "conflict"


class SendFullReport(FleetfixError):
    """A delta report the centre cannot rebuild exactly from the base it names: the agent sends it in full."""

    status_code = 409
    code = "send_full"


class InvalidInput(FleetfixError):
    status_code = 422
    code = "invalid"
