"""Optimistic concurrency: two people cannot silently overwrite each other.

Every object that people change (tickets, remediations, rules) carries a
version. GET returns it as a strong ETag (`"<kind>-<id>-v<version>"`); a
write must send it back in `If-Match`. A stale version gets 412 with the
current one; a write without `If-Match` gets 428.
"""

from __future__ import annotations

from fastapi import Request, Response

from core.errors import FleetfixError


class PreconditionFailed(FleetfixError):
    status_code = 412
    code = "precondition_failed"


class PreconditionRequired(FleetfixError):
    status_code = 428
    code = "precondition_required"


def etag(kind: str, object_id: object, version: int) -> str:
    return f'"{kind}-{object_id}-v{version}"'


def set_etag(response: Response, kind: str, object_id: object, version: int) -> None:
    response.headers["ETag"] = etag(kind, object_id, version)


def check_if_match(request: Request, kind: str, object_id: object, version: int) -> None:
    """Refuse the write unless the client saw the current version."""
    sent = request.headers.get("if-match")
    current = etag(kind, object_id, version)
    if sent is None:
        raise PreconditionRequired(
            f"send If-Match: {current} (the ETag of your last GET) so that a concurrent change is not overwritten",
            detail={"current": current},
        )
    if sent.strip() != "*" and current not in [tag.strip() for tag in sent.split(",")]:
        raise PreconditionFailed(
            f"{kind} {object_id} changed since you read it (now {current}); reload and try again",
            detail={"current": current},
        )
