"""What the package index answers, checked and bounded before bakery acts on it.

The index is not trusted beyond the hash it gives: an answer of the wrong shape, or an
answer or a download larger than stated or than the limits (bakery.safety.limits), is one
line, exit 2; a relative URL (PEP 691 allows them) is resolved against the page. Error
lines carry the URL redacted (bakery.safety.urls). index.py reads the index through these.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import IO
from urllib.parse import urljoin

from bakery.errors import SourceError
from bakery.safety import limits
from bakery.safety.urls import redact

_SHA256 = re.compile(r"[0-9a-f]{64}")


@dataclass(frozen=True)
class IndexFile:
    """One file of a project page (index.py reads both formats into these)."""

    filename: str
    url: str  # absolute (resolved against its page); index.Session.open checks the scheme
    sha256: str | None
    size: int | None = None
    yanked: bool = False


def read_bounded(resp: IO[bytes], limit: int, what: str) -> bytes:
    """All of resp, refused once it passes limit bytes."""
    data = resp.read(limit + 1)
    if len(data) > limit:
        raise SourceError(f"{redact(what)}: the answer is larger than {limit} bytes")
    return data


def checked_files(data: object, page: str) -> list[IndexFile]:
    """The ``files`` of a PEP 691 JSON answer, each checked for shape."""
    bad = SourceError(f"{redact(page)}: unexpected answer from the index (not a PEP 691 project)")
    if not isinstance(data, dict) or not isinstance(data.get("files"), list):
        raise bad
    out = []
    for f in data["files"]:
        if not isinstance(f, dict):
            raise bad
        filename, url = f.get("filename"), f.get("url")
        hashes = f.get("hashes") or {}
        size = f.get("size")
        if (
            not isinstance(filename, str)
            or not isinstance(url, str)
            or not isinstance(hashes, dict)
        ):
            raise bad
        sha = hashes.get("sha256")
        if sha is not None and not isinstance(sha, str):
            raise SourceError(f"{redact(page)}: {filename[:100]!r}: a malformed sha256")
        if size is not None and (not isinstance(size, int) or isinstance(size, bool) or size < 0):
            raise SourceError(f"{redact(page)}: {filename[:100]!r}: a malformed size")
        out.append(
            IndexFile(
                filename,
                url if unsafe_url(url) else urljoin(page, url),  # refused when used
                sha.lower() if isinstance(sha, str) else None,
                size,
                bool(f.get("yanked")),
            )
        )
    return out


def unsafe_url(url: str) -> bool:
    """A URL holding a control character or a space (urljoin would silently drop a CR or
    newline, so the check is on the index's own text)."""
    return any(ord(c) < 33 or ord(c) == 127 for c in url)


def checked_sha256(f: IndexFile, where: str) -> str:
    """The sha256 the index gives for the file bakery is about to download (a file's hash is
    checked when it is used: a bad entry for another file does not stop a bake)."""
    if not f.sha256:
        raise SourceError(f"{f.filename[:100]!r}: the index {where} gives no sha256")
    if unsafe_url(f.url):  # a URL never holds these
        raise SourceError(
            f"{redact(where)}: {f.filename[:100]!r}: the index gives a URL with a control "
            "character or space"
        )
    if not _SHA256.fullmatch(f.sha256):
        raise SourceError(f"{redact(where)}: {f.filename[:100]!r}: a malformed sha256")
    return f.sha256


def download_limit(size: int | None) -> int:
    """The most bytes a download may bring: the index's size when it states one."""
    return min(size, limits.MAX_ARCHIVE) if size is not None else limits.MAX_ARCHIVE
