"""The test environments a series' tests may run in: one protocol and a small registry,
as pre-commit keeps its languages (``lang_base.py`` + ``all_languages.py``).

An environment turns a baked tree into the interpreter the tests run with and the loader
mode that interpreter's plugin uses (:data:`bakery.testing.loader.ENV_MODE`):

- ``light``: bakery's own interpreter (torch, Triton); the tree's modules are loaded
  without running its packages' ``__init__.py`` (:mod:`bakery.testing.loader`);
- ``full``: vLLM's runtime requirements installed once into a cached environment layered
  on bakery's (:mod:`bakery.verifying.fullenv`), so that ``import vllm.X`` works.

A new environment is one class with ``name``, ``summary`` and ``prepare``, added to
:data:`ENVIRONMENTS`; the plan (``plan.py``) is its only caller.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar, Protocol

from bakery.errors import UsageError

if TYPE_CHECKING:
    from bakery.sources.cache import Cache

_log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Prepared:
    """A test environment made ready for one tree: its name (the loader's mode) and the
    interpreter the tests run with (None: bakery's own)."""

    name: str
    python: str | None = None


class TestEnvironment(Protocol):
    name: ClassVar[str]
    summary: ClassVar[str]

    def prepare(self, tree: Path, *, gpu: bool, cache: Cache) -> Prepared:
        """Make the environment ready for ``tree`` (build or find it in ``cache``);
        ``gpu``: the tests run on a CUDA GPU (the requirements of a CPU host otherwise)."""
        ...


class Light:
    name: ClassVar[str] = "light"
    summary: ClassVar[str] = "bakery's own (torch, Triton); packages' __init__.py not run"

    def prepare(self, tree: Path, *, gpu: bool, cache: Cache) -> Prepared:
        return Prepared(self.name)


class Full:
    name: ClassVar[str] = "full"
    summary: ClassVar[str] = "vLLM's requirements installed once, cached; import vllm.X works"

    def prepare(self, tree: Path, *, gpu: bool, cache: Cache) -> Prepared:
        from bakery.verifying import fullenv

        found = fullenv.ensure(tree, cpu=not gpu, cache=cache)
        how = f"built in {found.seconds:.0f}s" if found.built else "cached"
        _log.info(
            f"full test environment {found.key} ({how}, {found.size / 1e6:.0f} MB): "
            "vLLM's requirements, with bakery's torch and Triton",
            extra={"event": "env", "loud": found.built},  # a build's end, as its start
        )
        return Prepared(self.name, str(found.python))


#: Every environment by name: ``series.toml``'s ``env`` and ``bakery verify --env`` name one.
ENVIRONMENTS: dict[str, TestEnvironment] = {e.name: e for e in (Light(), Full())}


def get(name: str) -> TestEnvironment:
    """The environment called ``name``; a UsageError (one line) for any other name."""
    try:
        return ENVIRONMENTS[name]
    except KeyError:
        raise UsageError(f"--env {name!r}: use {' or '.join(ENVIRONMENTS)}") from None


def default(*, interpret: bool) -> str:
    """The environment of a series that names none: full on a GPU (where vLLM's tests
    run), light under the interpreter (kernels only, no download)."""
    return Light.name if interpret else Full.name
