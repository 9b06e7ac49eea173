"""Cursor pagination for every list endpoint: stable under inserts.

A page is `{"items": [...], "next_cursor": "..."}`; pass `cursor=<next_cursor>`
for the next page; `next_cursor` is null on the last page. The cursor is
opaque to clients (base64 of the sort key of the last row seen), so its
contents may change without breaking them. Keyset pagination rather than
OFFSET: a row inserted while someone pages is neither shown twice nor makes
another one skip (https://use-the-index-luke.com/no-offset).
"""

from __future__ import annotations

import base64
import binascii
import datetime as dt
import json
import uuid
from collections.abc import Callable, Sequence
from typing import Any, Generic, TypeVar

from fastapi import Query
from pydantic import BaseModel
from sqlalchemy import ColumnElement, Select, and_, or_
from sqlalchemy.orm import InstrumentedAttribute, Session

from core.errors import InvalidInput

T = TypeVar("T")

CURSOR_QUERY = Query(None, max_length=2000, description="`next_cursor` of the previous page; omit for the first page.")
INT64 = 2**63 - 1


class Page(BaseModel, Generic[T]):
    items: list[T]
    next_cursor: str | None = None


def _bad_cursor(message: str) -> InvalidInput:
    return InvalidInput("cursor is not one this API issued", detail=[{"field": "query.cursor", "message": message}])


def _encode_value(value: object) -> object:
    if isinstance(value, dt.datetime):
        return value.isoformat()
    if isinstance(value, uuid.UUID):
        return str(value)
    return value


def _decode_value(column: InstrumentedAttribute[Any], value: object) -> object:
    column_type = getattr(column.type, "impl_instance", column.type)  # a TypeDecorator's python_type is `object`
    try:
        kind = column_type.python_type
    except NotImplementedError:  # pragma: no cover - every key column here has a Python type
        kind = object
    if kind is dt.datetime and isinstance(value, str):
        parsed = dt.datetime.fromisoformat(value)
        if parsed.tzinfo is None:
            raise _bad_cursor("naive timestamp")
        return parsed
    if kind is uuid.UUID and isinstance(value, str):
        return uuid.UUID(value)
    if kind is int and type(value) is int and not -INT64 - 1 <= value <= INT64:
        raise _bad_cursor(f"{column.key}: beyond 64 bits")
    if kind is str and type(value) is str and "\x00" in value:
        raise _bad_cursor(f"{column.key}: a NUL character")
    if kind in (int, str) and type(value) is kind:
        return value
    raise _bad_cursor(f"{column.key}: {value!r}")


def encode_key(values: Sequence[object]) -> str:
    text = json.dumps({"k": [_encode_value(v) for v in values]})
    return base64.urlsafe_b64encode(text.encode()).decode().rstrip("=")


def decode_key(cursor: str | None, columns: Sequence[InstrumentedAttribute[Any]]) -> list[object] | None:
    if not cursor:
        return None
    try:
        padded = cursor + "=" * (-len(cursor) % 4)
        values = json.loads(base64.urlsafe_b64decode(padded.encode()))["k"]
    except (binascii.Error, ValueError, KeyError, TypeError, RecursionError) as error:
        raise _bad_cursor(type(error).__name__ if isinstance(error, RecursionError) else str(error)) from None
    if not isinstance(values, list) or len(values) != len(columns):
        raise _bad_cursor("wrong shape")
    try:
        return [_decode_value(column, value) for column, value in zip(columns, values, strict=True)]
    except ValueError as error:
        raise _bad_cursor(str(error)) from error


def encode_cursor(last_id: int) -> str:
    return encode_key([last_id])


def _after(columns: Sequence[InstrumentedAttribute[Any]], values: Sequence[object], descending: bool) -> Any:
    """Rows strictly after `values` in (columns) order: (a < x) or (a = x and b < y) …"""
    clauses: list[ColumnElement[bool]] = []
    for position, column in enumerate(columns):
        equal = [columns[i] == values[i] for i in range(position)]
        beyond = column < values[position] if descending else column > values[position]
        clauses.append(and_(*equal, beyond))
    return or_(*clauses)


def paginate(
    session: Session,
    query: Select[Any],
    key: InstrumentedAttribute[Any] | Sequence[InstrumentedAttribute[Any]],
    *,
    cursor: str | None,
    limit: int,
    convert: Callable[[Any], T],
    descending: bool = True,
) -> Page[T]:
    """Run `query` (already filtered, not ordered) in `key` order from `cursor`, `limit` rows a page.

    `key` is a unique column (the id) or columns whose last one is unique, e.g.
    (captured_at, id); newest first unless `descending` is False.
    """
    columns = list(key) if isinstance(key, Sequence) else [key]
    after = decode_key(cursor, columns)
    if after is not None:
        query = query.where(_after(columns, after, descending))
    order = [c.desc() if descending else c.asc() for c in columns]
    rows: Sequence[Any] = session.scalars(query.order_by(*order).limit(limit + 1)).all()
    more = len(rows) > limit
    rows = rows[:limit]
    next_cursor = encode_key([getattr(rows[-1], c.key) for c in columns]) if more and rows else None
    return Page[T](items=[convert(row) for row in rows], next_cursor=next_cursor)
