"""Whether an image URL a BMC is handed is content-addressed: it names the image's SHA-256, and nothing in it
lets a server resolve it to another file (review r2 finding 4). Standard library only: settings check the
reinstall ISO's URL at start-up with it, the Redfish driver every firmware and ISO URL before the fetch."""

from __future__ import annotations

import re
from urllib.parse import unquote, urlsplit

_ENCODED_SEPARATOR = re.compile(r"%(2f|5c)", re.IGNORECASE)


def not_content_addressed(url: str, sha256: str) -> str | None:
    """Why `url` is not a content-addressed URL of the image whose SHA-256 is `sha256`, or None when it is.

    The digest must be a whole path segment (`/sha256/<digest>`) or a token of one, bounded by the segment's
    ends or by `-`, `_` or `.` (`bmc-7.10-<digest>.bin`, `<digest>.iso`), not merely a substring anywhere. A
    path the server (or the BMC) would resolve elsewhere is refused whatever it names: `.` or `..` segments,
    also percent-encoded (`<digest>/%2e%2e/latest.bin` is `/latest.bin`), an encoded `/` or `\\`, a `\\`,
    and `;` path parameters (`latest.bin;<digest>`: Java servlet containers drop them)."""
    path = urlsplit(url).path
    if ";" in path or "\\" in path or _ENCODED_SEPARATOR.search(path):
        return "its path holds ';', '\\' or an encoded separator (%2f, %5c), which servers resolve as they please"
    segments = path.split("/")
    if any(unquote(segment) in (".", "..") for segment in segments):
        return "its path holds a '.' or '..' segment: the file fetched is another than the one named"
    token = re.compile(rf"(?:^|[-_.]){re.escape(sha256.lower())}(?:[-_.]|$)")
    if not any(token.search(unquote(segment).lower()) for segment in segments):
        return f"its path does not name its SHA-256 {sha256.lower()} as a segment or a file name's part"
    return None
