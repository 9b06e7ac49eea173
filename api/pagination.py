"""Cursor pagination for every list endpoint: newest first, stable under inserts.

A page is `{"items": [...], "next_cursor": "..."}`; pass `cursor=<next_cursor>`
for the next page; `next_cursor` is null on the last page. The cursor is
opaque to clients (base64 of the last id seen), so its contents may change
without breaking them.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Callable, Sequence
from typing import Any, Generic, TypeVar

from pydantic import BaseModel
from sqlalchemy import Select
from sqlalchemy.orm import InstrumentedAttribute, Session

from core.errors import InvalidInput

T = TypeVar("T")


class Page(BaseModel, Generic[T]):
    items: list[T]
    next_cursor: str | None = None


def encode_cursor(last_id: int) -> str:
    return base64.urlsafe_b64encode(json.dumps({"id": last_id}).encode()).decode().rstrip("=")


def decode_cursor(cursor: str | None) -> int | None:
    if not cursor:
        return None
    try:
        padded = cursor + "=" * (-len(cursor) % 4)
        value = json.loads(base64.urlsafe_b64decode(padded.encode()))["id"]
    except (binascii.Error, ValueError, KeyError, TypeError) as error:
        raise InvalidInput(
            "cursor is not one this API issued", detail=[{"field": "query.cursor", "message": str(error)}]
        ) from error
    if not isinstance(value, int):
        raise InvalidInput("cursor is not one this API issued", detail=[{"field": "query.cursor", "message": "id"}])
    return value


def paginate(
    session: Session,
    query: Select[Any],
    id_column: InstrumentedAttribute[int],
    *,
    cursor: str | None,
    limit: int,
    convert: Callable[[Any], T],
) -> Page[T]:
    """Run `query` (already filtered, not ordered) newest-id first from `cursor`, `limit` rows a page."""
    after = decode_cursor(cursor)
    if after is not None:
        query = query.where(id_column < after)
    rows: Sequence[Any] = session.scalars(query.order_by(id_column.desc()).limit(limit + 1)).all()
    more = len(rows) > limit
    rows = rows[:limit]
    next_cursor = encode_cursor(getattr(rows[-1], id_column.key)) if more and rows else None
    return Page[T](items=[convert(row) for row in rows], next_cursor=next_cursor)
