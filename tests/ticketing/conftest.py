"""The remediator's reaction to ticket changes, installed as start-up installs it (api.runtime), for the
tests that go through the whole stack; the tests of ticketing alone run without it."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from api.runtime import wire_repairs
from remediator import repairs
from ticketing import lifecycle


@pytest.fixture
def remediator_reacts() -> Iterator[None]:
    wire_repairs()
    try:
        yield
    finally:
        lifecycle.remove_reaction(repairs.on_ticket_change)
