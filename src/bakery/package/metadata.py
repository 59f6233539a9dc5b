"""What a baked wheel says of itself: METADATA's version rewritten to the local
version, ``bakery.json`` (the series, its diffs and the upstream wheel it was made from),
and ``vllm/_version.py``'s version strings carrying the same local label."""

from __future__ import annotations

import json
import re

from packaging.version import InvalidVersion, Version

from bakery import __version__
from bakery.errors import SourceError
from bakery.package.baked import Baked

#: ``__version__ = version = '0.32.0'``, as setuptools-scm writes vLLM's ``_version.py``
#: (one name or both, either quote).
_VERSION_ASSIGNED = rb"^((?:(?:__version__|version)[ \t]*=[ \t]*)+)(['\"])%s\2"


def version_module(data: bytes, old: str, new: str) -> bytes | None:
    """``_version.py`` with the version strings assigned to ``__version__``/``version``
    changed from old to new; None where it assigns none (the upstream bytes stay)."""
    pattern = re.compile(_VERSION_ASSIGNED % re.escape(old.encode()), re.MULTILINE)
    text, count = pattern.subn(lambda m: m.group(1) + m.group(2) + new.encode() + m.group(2), data)
    return text if count else None


def parse_version(text: str) -> Version | str:
    try:
        return Version(text)
    except InvalidVersion:
        return text


def metadata(data: bytes, old: str, new: str, wheel: str) -> bytes:
    """METADATA with its Version header set to new (the headers end at the first blank line)."""
    head, sep, body = data.partition(b"\n\n")
    pattern = re.compile(rb"^Version:[ \t]*(\S*)[ \t]*(\r?)$", re.MULTILINE)
    found = pattern.findall(head)
    if len(found) != 1 or parse_version(found[0][0].decode(errors="replace")) != parse_version(old):
        raise SourceError(f"{wheel}: METADATA does not state Version: {old} once")
    head = pattern.sub(lambda m: b"Version: " + new.encode() + m.group(2), head)
    return head + sep + body


def bakery_json(baked: Baked, version: str, upstream: str, sha256: str | None) -> bytes:
    data = {
        "bakery": __version__,
        "series": baked.series,
        "series_sha256": baked.digest,
        "version": version,
        "vllm": baked.vllm,
        "upstream": {"filename": upstream, "sha256": sha256},
        "port": baked.port,
        "diffs": baked.diffs,
        "pristine_commit": baked.pristine_commit,
        "head": baked.head,
        "changed": {c.path: c.status for c in baked.changes},
        "proof": baked.proof,
    }
    return (json.dumps(data, indent=2, sort_keys=True) + "\n").encode()
