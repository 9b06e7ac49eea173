"""Shared test helpers: where the real tool samples are, and readers for their container formats.

The samples are read in place from $FLEETFIX_TEST_SAMPLES (never copied into the repository).
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

SAMPLES_ENV = "FLEETFIX_TEST_SAMPLES"


def samples_dir() -> Path:
    """The sample folder; a missing setting fails the test (it is never skipped)."""
    value = os.environ.get(SAMPLES_ENV)
    if not value:
        pytest.fail(f"set {SAMPLES_ENV} to the folder of real tool samples (e.g. ../shared/fixtures)", pytrace=False)
    path = Path(value)
    if not path.is_dir():
        pytest.fail(f"{SAMPLES_ENV}={value} is not a folder; set it to the real tool samples", pytrace=False)
    return path


def sample(relative: str) -> str:
    """A sample's text; a missing file fails the test."""
    path = samples_dir() / relative
    if not path.is_file():
        pytest.fail(f"sample {relative} not found under ${SAMPLES_ENV} ({path})", pytrace=False)
    return path.read_text(encoding="utf-8")


def sample_names(folder: str) -> list[str]:
    """Relative names of the samples in one category folder, for parametrisation (needs the env var)."""
    value = os.environ.get(SAMPLES_ENV)
    if not value or not (Path(value) / folder).is_dir():
        return [f"{folder}/<set {SAMPLES_ENV}>"]
    return sorted(f"{folder}/{p.name}" for p in (Path(value) / folder).iterdir() if p.is_file())


def read_ttar(text: str, strip_prefix: str = "") -> dict[str, str]:
    """Files of a Prometheus ttar archive: 'Path: p', 'Lines: n', n lines of content, 'Mode: m'
    (or 'Directory:'/'SymlinkTo:' records), separated by '# ttar - - -' lines.

    A content whose last line ends in 'EOF' had no trailing newline. Paths are returned with
    `strip_prefix` removed, so they can be made relative to the tree the parser expects.
    """
    files: dict[str, str] = {}
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("Path: "):
            path = line[len("Path: ") :]
            i += 1
            if i < len(lines) and lines[i].startswith("Lines: "):
                count = int(lines[i][len("Lines: ") :])
                body = lines[i + 1 : i + 1 + count]
                i += 1 + count
                content = "\n".join(body) + "\n"
                if body and body[-1].endswith("EOF"):
                    content = "\n".join([*body[:-1], body[-1][: -len("EOF")]])
                if path.startswith(strip_prefix):
                    path = path[len(strip_prefix) :]
                files[path] = content
                continue
        i += 1
    return files


def listing_to_files(text: str, root: str) -> dict[str, str]:
    """A terminal listing of 'path' (or '$ cat path') lines each followed by the file's content,
    as {path relative to root: content}."""
    files: dict[str, str] = {}
    current: str | None = None
    for line in text.splitlines():
        m = re.match(r"^(?:\$ cat )?(" + re.escape(root) + r"\S+)$", line.strip())
        if m is not None:
            current = m.group(1)[len(root) :]
            files[current] = ""
        elif current is not None and not line.startswith("#"):
            files[current] += line + "\n"
    return files


OURS = Path(__file__).resolve().parent / "fixtures"


def ours(name: str) -> str:
    """One of our own fixtures (tests/checker/fixtures, written in the real formats where the corpus
    has no sample), without its leading '#' lines that say so."""
    lines = (OURS / name).read_text(encoding="utf-8").splitlines(keepends=True)
    while lines and lines[0].startswith("#"):
        lines.pop(0)
    return "".join(lines)
