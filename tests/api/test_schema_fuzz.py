"""Every operation of the OpenAPI schema, fuzzed with a token of each role (issue 13's API fuzzing, small).

schemathesis generates requests from the live schema (valid ones, and invalid ones that the API must
refuse with a 4xx), and each response is checked: never a 5xx, and the status, content type and body
are those the schema declares. bench/api_fuzz.py runs the same against a running `fleetfix api` at
5,000+ cases; this run is the one `make test` keeps.
"""

from __future__ import annotations

from collections import Counter

import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis.errors import Unsatisfiable
from schemathesis import GenerationMode
from schemathesis import checks as st_checks

from api.app import create_app
from core.db import Database
from core.models import Role
from tests.builders.people import bearer
from tests.builders.runtime import runtime_of

CHECKS = [st_checks.not_a_server_error, st_checks.response_schema_conformance, st_checks.content_type_conformance]
EXAMPLES = {GenerationMode.POSITIVE: 5, GenerationMode.NEGATIVE: 2}  # per operation


def test_no_operation_answers_5xx_or_outside_its_schema_for_any_role(db: Database) -> None:
    app = create_app(runtime_of(db))
    schema = schemathesis.openapi.from_asgi("/openapi.json", app)
    headers = {role: bearer(db, role) for role in Role}
    failures: list[str] = []
    statuses: Counter[tuple[Role, int]] = Counter()
    operations = [result.ok() for result in schema.get_all_operations()]
    for operation in operations:
        for mode, examples in EXAMPLES.items():

            @settings(max_examples=examples, deadline=None, database=None, suppress_health_check=list(HealthCheck))
            @given(case=operation.as_strategy(generation_mode=mode))
            def run(case: schemathesis.Case) -> None:
                for role in Role:
                    response = case.call(headers=headers[role])
                    statuses[(role, response.status_code)] += 1
                    try:
                        case.validate_response(response, checks=CHECKS, headers=headers[role])
                    except AssertionError as error:  # schemathesis raises its failures as AssertionErrors
                        failures.append(f"{role.value} {case.method} {case.formatted_path}: {str(error)[:400]}")

            try:
                run()
            except Unsatisfiable:
                assert mode is GenerationMode.NEGATIVE, operation.label  # no parameter to make invalid
    assert not failures, "\n".join(failures[:20])
    assert len(operations) >= 40  # the whole API was walked, not an empty schema
    for role in Role:  # every role's token was accepted somewhere: the walk was not 401s throughout
        assert sum(n for (r, code), n in statuses.items() if r == role and 200 <= code < 300) > 0, role
