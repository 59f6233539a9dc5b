"""``bakery cache list|clean``: the cache's entries, their sizes and when each was last
used, and their removal.

An entry is what one key's lock guards (cache.py): a release (``trees/vllm-X``, its marker
and ``sdists/vllm-X.tar.gz``), a git tree (``trees/git-URL-COMMIT``), or a git mirror
(``git/git-URL``), or an upstream wheel (``wheels/NAME.whl`` and its hash stamp, under the
lock ``wheel-NAME.whl`` that wheels.fetch takes; a release's wheel listing from the index,
``wheels/vllm-X.index.json``, is an entry of its own), a full test environment
(``envs/KEY/`` and its marker ``envs/KEY.json``, under the lock ``env-KEY`` that
testing/fullenv.py takes), the verify results (``verify/*.json``, one entry: they are
reused together, see testing/reuse.py), or the Triton compile cache that bakery kept in
its cache before round 4 (``triton/``, a leftover: Triton's cache is no longer there).
Each is removed under its lock and
its hold (cache.Hold: a bake holds its entries from the lookup to the end of the copy),
both taken without waiting: an entry a bake holds is skipped and said so, never pulled
from under it. The marker goes first, so
an entry is never seen complete and half removed; a mirror goes when no tree cut from it
is left.
"""

from __future__ import annotations

import contextlib
import os
import re
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from bakery.safety import cachepolicy
from bakery.sources.cache import Cache, EntryBusy

DAY = 86400.0


@dataclass
class Item:
    key: str
    kind: str  # "release" | "git" | "mirror" | "wheel" | "env" | "verify" | "triton"
    paths: list[Path]
    size: int
    used: float  # seconds since the epoch
    meta: dict[str, str] = field(default_factory=dict)

    @property
    def complete(self) -> bool:
        if self.kind == "env":
            return any(p.name.endswith(".json") for p in self.paths)
        return self.kind in ("mirror", "wheel", "verify", "triton") or "commit" in self.meta

    def to_json(self) -> dict[str, object]:
        return {
            "key": self.key,
            "kind": self.kind,
            "version": self.meta.get("version"),
            "source": self.meta.get("source"),
            "commit": self.meta.get("upstream"),
            "complete": self.complete,
            "size": self.size,
            "used": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(self.used)),
            "paths": [str(p) for p in self.paths],
        }


def _size(path: Path) -> int:
    try:
        st = path.lstat()
    except OSError:
        return 0
    if not cachepolicy.is_real_dir(path):  # a link counts as itself, never what it names
        return st.st_size
    total = 0
    for dirpath, dirnames, filenames in os.walk(path):
        for name in filenames + dirnames:
            with contextlib.suppress(OSError):
                total += os.lstat(os.path.join(dirpath, name)).st_size
    return total


def _mtime(path: Path) -> float:
    try:
        return path.lstat().st_mtime
    except OSError:
        return 0.0


def _read_meta(marker: Path) -> dict[str, str]:
    import json

    try:
        data = json.loads(cachepolicy.read_text(marker, what="cache marker"))
    except (OSError, ValueError, RecursionError, cachepolicy.CacheRefused):
        return {}
    if not isinstance(data, dict):
        return {}
    # the strings only: a tree's file list, an environment's inventory are not shown
    return {k: v for k, v in data.items() if isinstance(v, str)}


def _tree_keys(trees: Path | None) -> Iterator[str]:
    seen = set()
    for p in sorted(trees.iterdir()) if trees is not None else []:
        key = p.name[: -len(".json")] if p.name.endswith(".json") else p.name
        plain = cachepolicy.regular(p) is not None
        if key.startswith(".") or key in seen or (plain and not p.name.endswith(".json")):
            continue
        seen.add(key)
        yield key


def _wheels(folder: Path | None) -> Iterator[Item]:
    """The upstream wheels (with their hash stamps) and the wheel listings."""
    if folder is None:
        return
    names = sorted(p.name for p in folder.iterdir())
    for name in names:
        p = folder / name
        wheel = name[: -len(".ok.json")] if name.endswith(".whl.ok.json") else name
        if name.startswith(".") or (wheel != name and wheel in names):
            continue  # a stamp goes with its wheel
        if wheel.endswith(".whl"):
            paths = [q for q in (folder / wheel, folder / f"{wheel}.ok.json") if os.path.lexists(q)]
            meta = {"source": wheel}
            if wheel.count("-") >= 2:
                meta["version"] = wheel.split("-")[1]
            yield Item(f"wheel-{wheel}", "wheel", paths, 0, _mtime(paths[0]), meta)
        elif name.startswith("vllm-") and name.endswith(".index.json"):
            version = name[len("vllm-") : -len(".index.json")]
            meta = {"version": version, "source": "wheel listing"}
            yield Item(f"wheel-list-{version}", "wheel", [p], 0, _mtime(p), meta)


def _envs(folder: Path | None) -> Iterator[Item]:
    """The full test environments: ``envs/KEY/`` with its marker ``envs/KEY.json``."""
    if folder is None:
        return
    keys = {p.name.removesuffix(".json") for p in folder.iterdir() if not p.name.startswith(".")}
    for key in sorted(keys):
        marker = folder / f"{key}.json"
        paths = [p for p in (folder / key, marker) if os.path.lexists(p)]
        used = _mtime(marker) or _mtime(folder / key)
        meta = {"source": "full test environment"}
        yield Item(f"env-{key}", "env", paths, 0, used, meta)


def _verify(folder: Path | None) -> Iterator[Item]:
    """The verify results, as one entry (testing/reuse.py)."""
    records = sorted(folder.glob("*.json")) if folder is not None else []
    if records:
        used = max(_mtime(p) for p in records)
        meta = {"source": f"{len(records)} verify result{'s' if len(records) != 1 else ''}"}
        yield Item("verify", "verify", records, 0, used, meta)


def items(cache: Cache) -> list[Item]:
    """Every entry, the one used last first."""
    root = cache.root
    found: dict[str, Item] = {}
    # a top folder that is a link lists nothing: what it names is not the cache's
    trees = cachepolicy.top(root, "trees", repair=False)
    for key in _tree_keys(trees):
        assert trees is not None
        marker = trees / f"{key}.json"
        paths = [p for p in (trees / key, marker) if os.path.lexists(p)]
        kind = "release" if key.startswith("vllm-") else "git"
        used = _mtime(marker) or _mtime(trees / key)
        found[key] = Item(key, kind, paths, 0, used, _read_meta(marker))
    sdists = cachepolicy.top(root, "sdists", repair=False)
    for p in sorted(sdists.glob("vllm-*.tar.gz")) if sdists is not None else []:
        key = p.name[: -len(".tar.gz")]
        item = found.setdefault(key, Item(key, "release", [], 0, _mtime(p)))
        item.paths.append(p)
    mirrors = cachepolicy.top(root, "git", repair=False)
    for p in sorted(mirrors.glob("git-*")) if mirrors is not None else []:
        found[p.name] = Item(p.name, "mirror", [p], 0, _mtime(p))
    found.update((i.key, i) for i in _wheels(cachepolicy.top(root, "wheels", repair=False)))
    found.update((i.key, i) for i in _envs(cachepolicy.top(root, "envs", repair=False)))
    found.update((i.key, i) for i in _verify(cachepolicy.top(root, "verify", repair=False)))
    triton = root / "triton"
    if os.path.lexists(triton):  # a leftover of bakery before round 4, or a planted link
        meta = {"source": "Triton compile cache (no longer used)"}
        found["triton"] = Item("triton", "triton", [triton], 0, _mtime(triton), meta)
    for item in found.values():
        item.size = sum(_size(p) for p in item.paths)
    return sorted(found.values(), key=lambda i: (-i.used, i.key))


@dataclass
class Cleaned:
    removed: list[Item] = field(default_factory=list)
    kept: list[Item] = field(default_factory=list)
    #: entries a running bake holds (their lock was taken): left alone
    busy: list[Item] = field(default_factory=list)

    @property
    def freed(self) -> int:
        return sum(i.size for i in self.removed)


def select(all_items: list[Item], keep: int | None, older_than: float | None) -> list[Item]:
    """The entries to remove: beyond the ``keep`` used last, or unused for ``older_than``
    days (neither: all). A mirror goes with the last tree cut from it."""
    trees = [i for i in all_items if i.kind != "mirror"]  # used last first
    if keep is not None:
        doomed = trees[keep:]
    elif older_than is not None:
        cutoff = time.time() - older_than * DAY
        doomed = [i for i in trees if i.used < cutoff]
    else:
        doomed = list(trees)
    left = {i.key for i in trees} - {i.key for i in doomed}
    for mirror in (i for i in all_items if i.kind == "mirror"):
        if not any(k.startswith(mirror.key + "-") for k in left):
            doomed.append(mirror)
    return doomed


def _remove(item: Item, root: Path) -> None:
    """Remove an entry's paths: only where their folder is a real folder of the cache
    (looked at again here), a link unlinked, never followed."""
    for p in sorted(item.paths, key=lambda p: not p.name.endswith(".json")):  # marker first
        if cachepolicy.real_dir(root, p.parent):
            cachepolicy.remove(p)


def _leftovers(cache: Cache, key: str) -> list[Path]:
    """What a killed build or download of key left (the caller holds key's lock)."""
    trees = cachepolicy.top(cache.root, "trees", repair=False)
    sdists = cachepolicy.top(cache.root, "sdists", repair=False)
    build = re.compile(re.escape(f".build-{key}-") + r"[a-z0-9_]{8}")
    part = re.compile(re.escape(f"{key}.tar.gz.") + r"\d+\.part")
    out = [p for p in trees.iterdir() if build.fullmatch(p.name)] if trees else []
    out += [p for p in sdists.iterdir() if part.fullmatch(p.name)] if sdists else []
    return out


def clean(
    cache: Cache, *, keep: int | None = None, older_than: float | None = None, dry_run: bool = False
) -> Cleaned:
    all_items = items(cache)
    if not dry_run:  # a top folder that is a link or a file: the link goes, never its target
        for name in cachepolicy.TOPS:
            if os.path.lexists(cache.root / name):
                cachepolicy.top(cache.root, name, repair=True)
    doomed = select(all_items, keep, older_than)
    result = Cleaned(kept=[i for i in all_items if i not in doomed])
    for item in doomed:
        if dry_run:
            result.removed.append(item)
            continue
        try:
            with cache.lock(item.key, wait=False):
                hold = cache.hold(item.key, exclusive=True)  # no bake copies from it now
                try:
                    item.paths += _leftovers(cache, item.key)
                    _remove(item, cache.root)
                finally:
                    hold.release()
        except EntryBusy:
            result.busy.append(item)
            continue
        result.removed.append(item)
    return result
