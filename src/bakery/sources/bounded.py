"""What the package index answers, checked and bounded before bakery acts on it.

The index is not trusted beyond the hash it gives: an answer of the wrong shape, a
relative URL (PEP 691 allows them: resolved against the page), a URL of another scheme
(``file://`` would read the local disk), an answer or a download larger than stated or
than the limits (bakery.safety.limits) are each one line, exit 2. Error lines carry the
URL redacted (bakery.safety.urls).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import IO, TYPE_CHECKING
from urllib.parse import unquote, urljoin, urlsplit, urlunsplit

if TYPE_CHECKING:
    import urllib.request

from bakery.errors import SourceError
from bakery.safety import limits
from bakery.safety.urls import redact

_SHA256 = re.compile(r"[0-9a-f]{64}")


@dataclass(frozen=True)
class IndexFile:
    filename: str
    url: str  # absolute, http or https
    sha256: str | None
    size: int | None
    yanked: bool


def request(url: str, accept: str | None = None) -> urllib.request.Request:
    """A request for url; userinfo in it (``https://user:token@host/``) is sent as Basic
    authorization, never as part of the address (urllib would take it for the host)."""
    import base64
    import urllib.request  # here: urllib slows every start, and only downloads need it

    parts = urlsplit(url)
    headers = {"Accept": accept} if accept else {}
    if "@" in parts.netloc:
        userinfo, _, host = parts.netloc.rpartition("@")
        user, _, password = userinfo.partition(":")
        pair = f"{unquote(user)}:{unquote(password)}".encode()
        headers["Authorization"] = "Basic " + base64.b64encode(pair).decode()
        url = urlunsplit(parts._replace(netloc=host))
    return urllib.request.Request(url, headers=headers)


def read_bounded(resp: IO[bytes], limit: int, what: str) -> bytes:
    """All of resp, refused once it passes limit bytes."""
    data = resp.read(limit + 1)
    if len(data) > limit:
        raise SourceError(f"{redact(what)}: the answer is larger than {limit} bytes")
    return data


def file_url(raw: str, page: str) -> str:
    """A file's URL from an index page: resolved against the page, http(s) only."""
    url = urljoin(page, raw)
    scheme = urlsplit(url).scheme.lower()
    if scheme not in ("https", "http"):
        raise SourceError(
            f"{redact(page)}: the index gives a {scheme or 'schemeless'} URL "
            f"({redact(url)[:200]}); bakery only downloads over http(s)"
        )
    return url


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
        if sha is not None and not (isinstance(sha, str) and _SHA256.fullmatch(sha.lower())):
            raise SourceError(f"{redact(page)}: {filename[:100]!r}: a malformed sha256")
        if size is not None and (not isinstance(size, int) or isinstance(size, bool) or size < 0):
            raise SourceError(f"{redact(page)}: {filename[:100]!r}: a malformed size")
        out.append(
            IndexFile(
                filename,
                url,
                sha.lower() if isinstance(sha, str) else None,
                size,
                bool(f.get("yanked")),
            )
        )
    return out


def download_limit(size: int | None) -> int:
    """The most bytes a download may bring: the index's size when it states one."""
    return min(size, limits.MAX_ARCHIVE) if size is not None else limits.MAX_ARCHIVE
