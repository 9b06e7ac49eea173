"""Air-gapped data centers: every asset the pages load is in the repository, as documented in docs/ui.md."""

from __future__ import annotations

import hashlib
import re

from api.web.common import STATIC_DIR, TEMPLATES
from tests.conftest import REPO

TEMPLATE_DIR = REPO / "api" / "web" / "templates"
EXTERNAL = re.compile(
    r"""(?:src|href|action|hx-get|hx-post)\s*=\s*["']?\s*(?:https?:)?//|url\(\s*["']?(?:https?:)?//""", re.I
)


def test_pages_load_nothing_from_elsewhere() -> None:
    files = [*TEMPLATE_DIR.glob("*.html"), *STATIC_DIR.glob("*.css")]
    assert len(files) >= 10
    for path in files:
        found = EXTERNAL.search(path.read_text())
        assert found is None, f"{path.name} loads {found.group(0)!r} from another host"


def test_every_static_file_a_template_names_is_vendored() -> None:
    named = set()
    for path in TEMPLATE_DIR.glob("*.html"):
        named |= set(re.findall(r"url_for\('static', path='([^']+)'\)", path.read_text()))
    assert named == {"fleetfix.css", "htmx.min.js"}
    for name in named:
        assert (STATIC_DIR / name).is_file(), name


def test_vendored_htmx_is_the_documented_release_with_its_licence() -> None:
    docs = (REPO / "docs" / "ui.md").read_text()
    script = (STATIC_DIR / "htmx.min.js").read_bytes()
    version = re.search(rb'version:"([0-9.]+)"', script)
    assert version is not None
    assert f"htmx {version.group(1).decode()}" in docs
    assert hashlib.sha256(script).hexdigest() in docs
    assert "Zero-Clause BSD" in (STATIC_DIR / "htmx.LICENSE").read_text()


def test_templates_escape_by_default() -> None:
    # Jinja2 escapes .html templates only when autoescape selects them; pages must never opt out.
    assert TEMPLATES.env.autoescape("page.html") is True  # type: ignore[operator]
    for path in TEMPLATE_DIR.glob("*.html"):
        text = path.read_text()
        assert "|safe" not in text.replace(" ", ""), path.name
        assert "autoescape false" not in text, path.name
