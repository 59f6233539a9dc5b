"""A release's upstream wheels: found on the package index, downloaded once, hash-checked.

The index is the one sdists come from (``resolve.index_files``: PEP 691 JSON). A wheel for
a platform is the release's ``manylinux`` wheel for that machine (vLLM publishes one per
platform, ``manylinux_2_28``); tags are read with ``packaging.utils``.

Cache layout (beside ``sdists/``)::

    wheels/vllm-X.index.json    the release's wheels as the index listed them (filename,
                                url, sha256, size): later runs find them without the network
    wheels/FILENAME             the wheel, downloaded by resolve._download (sha256 and size
                                checked against the index as it streams in)
    wheels/FILENAME.ok.json     its verification stamp: sha256, size, mtime, ctime, inode

A cached wheel is hashed again whenever its stamp no longer matches its ``stat()`` (it was
replaced, written, touched or truncated: a write always moves ctime, which no tool
sets back), and downloaded again if the hash is wrong. An unchanged
stamp is trusted, the same trust the cached trees get from ``git status`` (which also
compares stat data): hashing 239 MB on every run would cost more than writing the
baked wheel does.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from pathlib import Path

from packaging.tags import Tag
from packaging.utils import InvalidWheelFilename, parse_wheel_filename
from packaging.version import Version

from bakery.errors import SourceError
from bakery.outputs import replace_bytes
from bakery.safety import cachepolicy, limits
from bakery.safety.urls import MASK, redact, redact_url
from bakery.sources import bounded, resolve
from bakery.sources.bounded import IndexFile
from bakery.sources.cache import Cache
from bakery.sources.pipconf import configured_index
from bakery.sources.pristine import Progress

#: The machines bakery builds wheels for, as wheel platform tags end.
PLATFORMS = ("x86_64", "aarch64")

_MANYLINUX = re.compile(r"manylinux_(\d+)_(\d+)_(x86_64|aarch64)")
#: A wheel file name bakery uses (it names files in the cache and in dist/): the
#: characters of PEP 427's names, versions and tags only (no control character or ESC
#: from the index's answer).
_FILENAME = re.compile(r"[A-Za-z0-9_.+!]+(?:-[A-Za-z0-9_.+!]+){4,5}\.whl")
_SHA256 = re.compile(r"[0-9a-f]{64}")


@dataclass(frozen=True)
class WheelFile:
    """One wheel of a release, as the index lists it."""

    filename: str
    url: str
    sha256: str
    size: int | None

    @property
    def tags(self) -> frozenset[Tag]:
        return parse_wheel_filename(self.filename)[3]

    def glibc(self, platform: str) -> tuple[int, int] | None:
        """The oldest glibc among its manylinux tags for platform, or None."""
        found = [
            (int(m.group(1)), int(m.group(2)))
            for t in self.tags
            if (m := _MANYLINUX.fullmatch(t.platform)) and m.group(3) == platform
        ]
        return min(found) if found else None


def default_platform() -> str | None:
    """This machine's platform, where bakery builds wheels for it."""
    machine = os.uname().machine
    machine = {"arm64": "aarch64", "amd64": "x86_64"}.get(machine.lower(), machine)
    return machine if machine in PLATFORMS else None


def valid_name(name: object) -> bool:
    """name is a wheel file name made only of PEP 427's characters (see _FILENAME)."""
    if not isinstance(name, str) or not _FILENAME.fullmatch(name):
        return False
    try:
        parse_wheel_filename(name)
    except InvalidWheelFilename:
        return False
    return True


def _cached_listing(listing: Path) -> list[WheelFile] | None:
    """The kept listing, or None where it is missing, not a regular file (a FIFO is never
    opened), too large, or holds an entry that is not a wheel bakery would list."""
    try:
        data = json.loads(cachepolicy.read_text(listing, limits.MAX_INDEX_ANSWER, "listing"))
        found = [WheelFile(**w) for w in data]
    except (OSError, ValueError, TypeError, RecursionError, cachepolicy.CacheRefused):
        return None
    ok = all(
        valid_name(w.filename)
        and isinstance(w.url, str)
        and isinstance(w.sha256, str)
        and _SHA256.fullmatch(w.sha256)
        and (w.size is None or isinstance(w.size, int))
        for w in found
    )
    return found if ok else None


def release_wheels(version: str, cache: Cache, *, fresh: bool = False) -> list[WheelFile]:
    """Every wheel of the release on the index (listed once, then read from the cache;
    fresh: from the index again). The kept listing holds the URLs redacted (an index's
    token or a signed URL's signature is never stored): a wheel not yet downloaded whose
    URL had a secret is listed again (upstream_wheel)."""
    listing = cache.path("wheels") / f"vllm-{version}.index.json"
    if not fresh:
        kept = _cached_listing(listing)
        if kept is not None:
            return kept
    found = []
    for f in resolve.index_files():
        name = f.filename
        if not name.endswith(".whl") or f.yanked or not valid_name(name):
            continue
        try:
            _, ver, _, _ = parse_wheel_filename(name)
        except InvalidWheelFilename:
            continue
        if ver != Version(version):
            continue
        bounded.checked_sha256(
            f, redact_url(configured_index().url)
        )  # its URL and hash, before anything is fetched
        assert f.sha256 is not None
        found.append(WheelFile(name, f.url, f.sha256, f.size))
    found.sort(key=lambda w: w.filename)
    if found:  # an empty answer is not kept: the wheels may be uploaded later
        stored = [{**w.__dict__, "url": redact(w.url)} for w in found]
        replace_bytes(listing, json.dumps(stored, indent=1).encode())
    return found


def pick(wheels: list[WheelFile], version: str, platform: str) -> WheelFile:
    """The release's manylinux wheel for platform: the one that needs the oldest glibc
    where there are several."""
    fits = [(w.glibc(platform), w.filename, w) for w in wheels if w.glibc(platform) is not None]
    if not fits:
        index = redact_url(configured_index().url)
        raise SourceError(f"vLLM {version} has no manylinux wheel for {platform} on {index}")
    return min(fits, key=lambda t: (t[0], t[1]))[2]


def _stamp(path: Path, sha256: str) -> dict[str, object]:
    st = cachepolicy.regular(path)
    if st is None:
        raise OSError(f"{path}: not a regular file")
    return {
        "sha256": sha256,
        "size": st.st_size,
        "mtime_ns": st.st_mtime_ns,
        "ctime_ns": st.st_ctime_ns,
        "ino": st.st_ino,
    }


def _trusted(path: Path, stamp_file: Path, wheel: WheelFile) -> bool:
    try:
        stamp = json.loads(cachepolicy.read_text(stamp_file, 1 << 16, "stamp"))
        return bool(stamp == _stamp(path, wheel.sha256))
    except (OSError, ValueError, RecursionError, cachepolicy.CacheRefused):
        return False


def fetch(wheel: WheelFile, cache: Cache, progress: Progress | None = None) -> Path:
    """The wheel in the cache, downloaded and hash-checked if it is not there (or changed)."""
    if not valid_name(wheel.filename):
        raise SourceError(f"{wheel.filename!r}: not a wheel file name")
    folder = cache.path("wheels")
    path = folder / wheel.filename
    stamp_file = folder / f"{wheel.filename}.ok.json"
    with cache.lock(f"wheel-{wheel.filename}"):
        if _trusted(path, stamp_file, wheel):
            return path
        if resolve.cached_sha256(path) != wheel.sha256:
            if MASK in wheel.url:  # the kept listing's redacted URL: the index's own
                wheel = _listed_again(wheel)
            entry = IndexFile(wheel.filename, wheel.url, wheel.sha256, wheel.size)
            resolve._download(entry, path, progress)
        replace_bytes(stamp_file, json.dumps(_stamp(path, wheel.sha256)).encode())
    return path


def _listed_again(wheel: WheelFile) -> WheelFile:
    """wheel as the index lists it now (its URL with the credentials the kept listing
    does not hold)."""
    for f in resolve.index_files():
        if f.filename == wheel.filename and f.sha256 == wheel.sha256:
            return WheelFile(f.filename, f.url, wheel.sha256, f.size)
    raise SourceError(f"{wheel.filename}: no longer on the index")


def upstream_wheel(
    version: str, platform: str, cache: Cache, progress: Progress | None = None
) -> tuple[WheelFile, Path]:
    try:
        wheel = pick(release_wheels(version, cache), version, platform)
    except SourceError:  # uploaded since the listing was kept?
        wheel = pick(release_wheels(version, cache, fresh=True), version, platform)
    return wheel, fetch(wheel, cache, progress)


def upstream_sdist(version: str, cache: Cache, progress: Progress | None = None) -> Path:
    """The release's source distribution in the cache (the file resolve.release extracts),
    downloaded and hash-checked again if it is missing or changed."""
    entry = resolve._sdist_entry(version)
    path = cache.path("sdists") / f"vllm-{version}.tar.gz"
    with cache.lock(f"vllm-{version}"):
        if resolve.cached_sha256(path) != entry.sha256:
            resolve._download(entry, path, progress)
    return path
