"""What a bake starts from: a pristine tree (``Pristine``), and the two steps every
source that builds one shares: an archive unpacked with its one commit
(``unpack_archive``) and the version a tree's PKG-INFO names (``local_version``).

resolve.py (releases, local paths) and gitsource.py (``git+`` URLs) both build trees;
this module is below both, so neither imports the other's internals.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from bakery.errors import SourceError
from bakery.safety import cachepolicy, limits, paths
from bakery.sources.cache import Cache, Entry, Hold

if TYPE_CHECKING:
    from bakery.model.identity import Identity

#: (bytes done, bytes total or None) while downloading.
Progress = Callable[[int, int | None], None]


@dataclass
class Pristine:
    """A pristine tree to bake from. ``repo`` is true when ``tree`` holds a .git whose HEAD
    is the pristine commit (cached releases and refs): bakes clone it instead of committing
    the whole tree again."""

    tree: Path
    version: str | None
    source: str
    sha256: str | None
    repo: bool = False
    #: Set for an installed package folder: it is copied to <tree>/vllm.
    package_dir: Path | None = None
    #: The upstream commit of a git+ source or a local checkout (the manifest records it).
    commit: str | None = None
    #: ``git describe --tags --long`` of a git+ source's commit, where it has a release tag.
    describe: str | None = None
    #: What the tree is (sources/identity.py), once commands ask; None until then.
    identity: Identity | None = field(default=None, compare=False)
    #: resolve(defer_check=True) of a cached tree: its look for changed files, running.
    pending: tuple[Cache, str, Entry] | None = field(default=None, repr=False, compare=False)
    #: A cached tree's entry, held in use until close() (cache clean leaves it alone).
    hold: Hold | None = field(default=None, repr=False, compare=False)

    def confirm(self) -> None:
        """Wait for the cached tree's look for changed files (a no-op for other trees);
        raises cache.CacheChanged if the tree had been changed."""
        if self.pending is not None:
            cache, key, entry = self.pending
            self.pending = None
            cache.confirm(key, entry)

    def close(self) -> None:
        """Stop a look that nobody waited for (the bake failed before its copy), and let
        the cache entry go."""
        if self.pending is not None and self.pending[2].check is not None:
            self.pending[2].check.cancel()
        self.pending = None
        if self.hold is not None:
            self.hold.release()
            self.hold = None

    def file(self, rel: str) -> Path:
        if self.package_dir is not None:
            head, _, rest = rel.partition("/")
            if head == "vllm":
                return self.package_dir / rest
        return self.tree / rel


def unpack_archive(archive: Path | bytes, dest: Path, label: str, *, strip_top: bool = True) -> str:
    """The archive unpacked into dest with its one commit (see unpack.py); the commit id."""
    from bakery.formats import unpack  # tarfile and threading: only a cold bake needs them

    if isinstance(archive, Path):
        name = archive.name
        try:
            data = cachepolicy.read_bytes(archive, limits.MAX_ARCHIVE, "archive")
        except OSError as e:
            raise SourceError(f"{name}: {e.strerror}") from None
    else:
        name, data = "git archive", archive
    try:
        return unpack.unpack(
            data, dest, name=name, message=f"pristine {label}\n", strip_top=strip_top
        )
    except MemoryError:  # one line, never a traceback (the limits should stop it first)
        raise SourceError(f"{name}: cannot extract: out of memory") from None


def local_version(root: Path) -> str | None:
    """PKG-INFO's Version; it names folders (build/<series>-<version>, a port), so it
    must be a plain name (refused otherwise)."""
    pkg = root / "PKG-INFO"
    if pkg.is_file() and not pkg.is_symlink():
        with pkg.open("rb") as fh:
            head = fh.read(64 * 1024).decode(errors="replace")
        for line in head.splitlines()[:20]:
            if line.startswith("Version:"):
                return paths.name(line.split(":", 1)[1].strip(), f"{pkg}: Version")
    return None
