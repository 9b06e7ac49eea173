"""The remediator's reaction to ticket changes, in the test's runtime as a process's root wires it
(api.runtime), for the tests that go through the whole stack; the tests of ticketing alone run without it."""

from __future__ import annotations

import pytest

from api.runtime import repair_reactions
from core.db import Database
from tests.builders.runtime import rewire


@pytest.fixture
def remediator_reacts(request: pytest.FixtureRequest) -> None:
    """Marks whole modules: a test without a database has no runtime to wire (and gets none)."""
    if "db" in request.fixturenames:
        db: Database = request.getfixturevalue("db")
        rewire(db, reactions=repair_reactions())
