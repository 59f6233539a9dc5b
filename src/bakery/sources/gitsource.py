"""``--vllm git+URL@REF``: a commit of a git repository, as a cached pristine tree.

The remote is mirrored (bare) once under ``git/`` and fetched again when a bake names a
branch or tag; the tree is cached by the commit REF resolves to (``trees/git-URL-COMMIT``).
A REF that is a commit id (full, or abbreviated and known to the mirror) is looked up in
the cache first and never fetched: a pinned commit rebakes offline. Every fetch, lookup
and archive goes through git/remote.py (the one git door's policy, the transport narrowed
to the URL's); a mirror whose configuration holds more than bakery wrote is fetched again.
"""

from __future__ import annotations

import hashlib
import os
import re
from pathlib import Path

from bakery.errors import SourceError
from bakery.git import cmd as gitutil
from bakery.safety.urls import redact_url, split_userinfo
from bakery.sources.cache import Cache, Entry, discard
from bakery.sources.pristine import Pristine, local_version, unpack_archive

_HEX = re.compile(r"[0-9a-f]{7,40}")
_FULL = re.compile(r"[0-9a-f]{40}")


def split_spec(spec: str) -> tuple[str, str]:
    """(URL, REF) of ``URL@REF`` (REF: HEAD when absent). The ``@`` of REF is looked for
    after the host, as pip does, so ``ssh://git@host/repo`` has no REF."""
    if "://" in spec:
        scheme, _, rest = spec.partition("://")
        host, slash, path = rest.partition("/")
        url, sep, ref = path.rpartition("@")
        if sep and url:
            return f"{scheme}://{host}{slash}{url}", ref
        return spec, "HEAD"
    url, sep, ref = spec.rpartition("@")  # a path, or scp-like user@host:path
    if sep and url and ref and ":" not in ref:
        return url, ref
    return spec, "HEAD"


def _label(url: str, ref: str) -> str:
    return f"git+{redact_url(url)}@{ref}"


def _mirror_commit(url: str, ref: str, cache: Cache, mirror_key: str) -> tuple[Path, str]:
    """The mirror (cloned or fetched as needed) and the commit ref names in it."""
    from bakery.git import remote

    mirror = cache.path("git") / mirror_key
    pinned = _HEX.fullmatch(ref.lower()) is not None

    def lookup() -> str | None:
        # a commit id names a commit that starts with it, never a branch or tag of
        # that name; any other ref is what git resolves it to
        return remote.commit_by_id(mirror, ref) if pinned else remote.resolve(mirror, ref)

    try:
        remote.scheme(url)  # a transport bakery refuses is refused even when cached
        if os.path.lexists(mirror) and not remote.mirror_intact(mirror):
            discard(mirror)  # not what bakery wrote (a restored cache): fetched again
        known = mirror.exists() and lookup() is not None
        if not (pinned and known):
            remote.fetch(url, mirror)
        commit = lookup()
    except gitutil.GitError as e:
        raise SourceError(f"{_label(url, ref)}: {e.message}") from None
    if commit is None:
        raise SourceError(f"{_label(url, ref)}: the repository has no commit {ref!r}")
    cache.touch(mirror)
    return mirror, commit


def _mirror_key(url: str) -> str:
    return "git-" + hashlib.sha256(split_userinfo(url)[0].encode()).hexdigest()[:16]


def git_mirror(url: str, cache: Cache) -> Path:
    """The cached bare mirror that ``git+URL@REF`` sources are read from, for reading
    history (bakery upstream); nothing of it is written here. A mirror holding more than
    bakery wrote (configuration, hooks: a restored cache) is refused, never read."""
    from bakery.git import remote

    mirror = cache.path("git") / _mirror_key(url)
    if mirror.exists() and not remote.mirror_intact(mirror):
        raise SourceError(
            f"{mirror}: this git mirror holds configuration or hooks bakery did not write; "
            f"bake git+{redact_url(url)} again to fetch it anew"
        )
    return mirror


def git_source(spec: str, cache: Cache, defer_check: bool = False) -> Pristine:
    url, ref = split_spec(spec)
    if not url:
        raise SourceError(f"git+{spec}: expected git+URL@REF")
    mirror_key = _mirror_key(url)
    pinned = ref.lower() if _FULL.fullmatch(ref.lower()) else None
    entry = None
    if pinned is not None:  # a commit id: the cached tree, without a look at the remote
        key = f"{mirror_key}-{pinned[:16]}"
        with cache.lock(key):
            entry = cache.tree_entry(key, defer=defer_check)
            hold = cache.hold(key) if entry is not None else None
    if entry is None:
        with cache.lock(mirror_key):
            mirror, commit = _mirror_commit(url, ref, cache, mirror_key)
            mirror_hold = cache.hold(mirror_key)  # read below: cache clean waits for it
        try:
            key = f"{mirror_key}-{commit[:16]}"
            with cache.lock(key):
                entry = cache.tree_entry(key, defer=defer_check)
                if entry is None:
                    entry = _build(cache, key, mirror, url, commit)
                hold = cache.hold(key)
        finally:
            mirror_hold.release()
    return Pristine(
        entry.tree,
        entry.meta.get("version"),
        entry.meta["source"],
        None,
        True,
        commit=entry.meta.get("upstream"),
        describe=entry.meta.get("describe"),
        pending=(cache, key, entry) if entry.check else None,
        hold=hold,
    )


def _build(cache: Cache, key: str, mirror: Path, url: str, commit: str) -> Entry:
    """The tree of commit, extracted from the mirror (git archive) and committed."""

    with cache.building(key) as tmp:
        top = tmp / "tree"
        top.mkdir()
        from bakery.git import remote

        try:
            archive = remote.archive(mirror, commit)
        except gitutil.GitError as e:
            raise SourceError(f"{_label(url, commit)}: {e.message}") from None
        shown = redact_url(url)
        unpack_archive(archive, top, f"vLLM {shown}@{commit}", strip_top=False)
        meta: dict[str, str | None] = {
            "source": f"{shown}@{commit}",
            "sha256": None,
            "version": local_version(top),
            "upstream": commit,
            "describe": _describe(mirror, commit),
        }
        return cache.commit_tree(key, top, meta)


def _describe(mirror: Path, commit: str) -> str | None:
    """``git describe --tags --long`` of the commit (v0.31.0-12-g<abbrev>): the release
    it claims to follow, for its identity (sources/identity.py); None without a tag."""
    out = gitutil.git(
        mirror, "describe", "--tags", "--long", "--match", "v[0-9]*", commit, check=False
    ).strip()
    return out or None


def mirror_commit(url: str, ref: str, cache: Cache) -> tuple[Path, str]:
    """The cached mirror of url (fetched as a bake would) and the commit ref names in it:
    for commands that walk history (bakery bisect); the mirror is only read."""
    key = _mirror_key(url)
    with cache.lock(key):
        return _mirror_commit(url, ref, cache, key)
