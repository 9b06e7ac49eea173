"""The static checks run with the tests: ruff, ruff format, mypy (strict on core
and parsers), and the import-linter contracts that keep the layers apart."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO

BIN = Path(sys.executable).parent


@pytest.mark.parametrize(
    "argv",
    [
        ["ruff", "check", "."],
        ["ruff", "format", "--check", "."],
        ["mypy"],
        ["lint-imports"],
    ],
    ids=["ruff", "ruff-format", "mypy", "import-linter"],
)
def test_static_check(argv: list[str]) -> None:
    done = subprocess.run([str(BIN / argv[0]), *argv[1:]], cwd=REPO, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, f"{' '.join(argv)} failed:\n{done.stdout[-6000:]}\n{done.stderr[-2000:]}"
