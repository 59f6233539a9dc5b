"""What ``--vllm SPEC`` names, parsed once into a value: a release, a local tree or
checkout, or a git repository at a ref. Every command that takes ``--vllm`` asks this
module which kind it has; :func:`bakery.sources.resolve.resolve` turns it into a pristine
tree. A new kind of pristine source is one class here and its case in ``resolve``.

The order is the one users rely on: ``git+URL[@REF]`` first; then a path that exists
(a folder called ``0.30.0`` in the working directory is that folder); then ``latest``;
then a release version as users type it (``0.30``, ``v0.30.0``).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from bakery.errors import SourceError
from bakery.sources import versions

GIT_PREFIX = "git+"


@dataclass(frozen=True)
class Release:
    """A release from the package index: vLLM's spelling (``0.30.0``), or ``latest``."""

    version: str

    def __str__(self) -> str:
        return self.version


@dataclass(frozen=True)
class Local:
    """A tree or git checkout on this machine, read and never changed."""

    path: Path

    def __str__(self) -> str:
        return str(self.path)


@dataclass(frozen=True)
class Git:
    """``git+URL@REF``: a repository at a ref (HEAD when none is named)."""

    url: str
    ref: str
    #: the spec as typed after ``git+`` (the cache's names derive from it)
    raw: str

    def __str__(self) -> str:
        return GIT_PREFIX + self.raw


Source = Release | Local | Git


def parse(spec: str) -> Source:
    """The source ``spec`` names; SourceError (one line) for none of them."""
    if spec.startswith(GIT_PREFIX):
        from bakery.sources.gitsource import split_spec

        url, ref = split_spec(spec[len(GIT_PREFIX) :])
        return Git(url, ref, spec[len(GIT_PREFIX) :])
    path = Path(spec).expanduser()
    if spec and path.exists():
        return Local(path)
    if spec == versions.LATEST:
        return Release(versions.LATEST)
    if versions.parse(spec) is not None:
        return Release(versions.normalize(spec))
    raise SourceError(
        f"--vllm {spec!r}: not a release version, {versions.LATEST!r}, an existing path, "
        "or git+URL@REF"
    )


def is_git(spec: str) -> bool:
    """Whether ``spec`` names a git repository (``git+URL@REF``)."""
    return spec.startswith(GIT_PREFIX)
