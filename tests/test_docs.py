"""The README and the deployment files stay true to the code."""

from __future__ import annotations

import inspect
import re

import yaml

from api.cli import app as cli
from api.settings import SECTIONS, CentralSettings
from tests.conftest import REPO

README = (REPO / "README.md").read_text()


def test_readme_configuration_table_lists_every_setting() -> None:
    documented = set(re.findall(r"^\| `(FLEETFIX_[A-Z_]+)` \|", README, flags=re.M))
    actual = {f"FLEETFIX_{name.upper()}" for name in CentralSettings.model_fields}
    assert documented == actual


def test_readme_configuration_tables_follow_the_settings_sections() -> None:
    """One table per section, headed by the file that declares it, listing that section's settings."""
    configuration = README[README.index("## Configuration") : README.index("## Production")]
    parts = re.split(r"^### .*?\(`([a-z_/]+\.py)`\).*$", configuration, flags=re.M)
    tables = {
        parts[i]: set(re.findall(r"^\| `(FLEETFIX_[A-Z_]+)` \|", parts[i + 1], flags=re.M))
        for i in range(1, len(parts), 2)
    }
    sections = {
        section.__module__.replace(".", "/") + ".py": {
            f"FLEETFIX_{name.upper()}" for name in inspect.get_annotations(section)
        }
        for section in SECTIONS
    }
    assert tables == sections


def test_readme_names_every_command() -> None:
    import typer.main

    group = typer.main.get_command(cli)
    commands = set(group.commands)  # type: ignore[attr-defined]
    for name in commands:
        assert f"`fleetfix {name}" in README, name


def test_compose_services_run_real_commands() -> None:
    import typer.main

    compose = yaml.safe_load((REPO / "docker-compose.yml").read_text())
    group = typer.main.get_command(cli)
    services = compose["services"]
    assert {"postgres", "redis", "migrate", "api", "worker", "scheduler", "agent"} <= set(services)
    for name in ("migrate", "api", "worker", "scheduler", "agent"):
        command = services[name]["command"]
        assert command[0] in group.commands, (name, command)  # type: ignore[attr-defined]
    assert services["migrate"]["command"] == ["db", "upgrade"]
    assert services["api"]["depends_on"]["migrate"]["condition"] == "service_completed_successfully"


def test_rules_doc_lists_the_default_pack() -> None:
    from remediator.rules import DEFAULT_PACK, load_pack

    doc = (REPO / "docs" / "rules.md").read_text()
    section = doc[doc.index("## The default pack") :]
    documented = set(re.findall(r"^\| `([a-z0-9-]+)` \|", section, flags=re.M))
    assert documented == {r.id for r in load_pack(DEFAULT_PACK).rules}


def test_rules_doc_table_is_the_pack_itself() -> None:
    """docs/rules.md's table is what `fleetfix rules doc` prints for the default pack, source and all."""
    from remediator.rules import DEFAULT_PACK, load_pack
    from remediator.rules_doc import table

    doc = (REPO / "docs" / "rules.md").read_text()
    assert table(load_pack(DEFAULT_PACK)) in doc


def test_signals_doc_names_every_signal_the_default_pack_uses() -> None:
    from remediator.rules import DEFAULT_PACK, load_pack

    doc = (REPO / "docs" / "signals.md").read_text()
    for rule in load_pack(DEFAULT_PACK).rules:
        assert f"`{rule.when.signal}`" in doc, rule.when.signal
