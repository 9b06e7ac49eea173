"""docs/api.md's table of routes and roles is the application's: a route added, removed or re-roled fails here.

`python -m tests.api.test_docs_roles` prints the method, path and role columns as the app declares them.
"""

from __future__ import annotations

import re

from tests.api.helpers import api_routes, requirement
from tests.conftest import REPO


def declared() -> dict[str, str]:
    """`METHOD /path` -> the role column, for every /api route."""
    table = {}
    for route in api_routes():
        if not str(route.path).startswith("/api/"):
            continue
        [required] = requirement(route.dependant) or [None]
        role = "none" if required is None else required.required_role.value
        if required is not None and required.admits_hosts:
            role += " or the host itself"
        for method in sorted(set(route.methods or []) - {"HEAD"}):
            table[f"{method} {route.path}"] = role
    return table


def documented() -> dict[str, str]:
    doc = (REPO / "docs" / "api.md").read_text()
    section = doc[doc.index("## Routes and roles") :]
    section = section[: section.index("\n## ", 1)] if "\n## " in section[1:] else section
    rows = re.findall(r"^\| `((?:GET|POST|PUT|PATCH|DELETE) /api/[^`]+)` \| ([^|]+?) \|", section, flags=re.M)
    return dict(rows)


def test_api_doc_lists_every_route_with_its_role() -> None:
    expected, found = declared(), documented()
    missing = {k: v for k, v in expected.items() if found.get(k) != v}
    extra = sorted(set(found) - set(expected))
    assert not missing, "docs/api.md is out of step with the app; rows to add or fix:\n" + "\n".join(
        f"| `{route}` | {role} | … |" for route, role in missing.items()
    )
    assert not extra, f"docs/api.md lists routes that do not exist: {extra}"


if __name__ == "__main__":
    for route, role in declared().items():
        print(f"| `{route}` | {role} | |")
