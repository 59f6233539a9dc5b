"""Packages that every test process compiles again, for want of byte code.

A Python image may ship packages without byte code (no ``__pycache__``) and set
``PYTHONDONTWRITEBYTECODE``, so that nothing is ever written: then each process that
imports torch compiles its 2141 modules from source. A GPU verify starts several such
processes (pytest, the ranks' fork server, a series' own helpers); on the device's H100
it cost 1.5-3 s of a 12 s warm verify (BENCHMARKS.md, 2026-12-06). bakery does not keep byte code
of its own for them (its cache holds nothing that runs: SECURITY.md); verify says once
what the host could do instead. Hand-written: a stat per package, located with
:func:`importlib.util.find_spec` (nothing is imported).
"""

from __future__ import annotations

import importlib.util
from collections.abc import Mapping, Sequence
from pathlib import Path

#: The heavy packages every test process of a verify imports.
PACKAGES = ("torch", "triton")


def package_dir(name: str) -> Path | None:
    """The folder of an installed package, without importing it; None if absent."""
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)))


def has_byte_code(package: Path) -> bool:
    """Whether the package's ``__init__.py`` has byte code where this Python reads it."""
    try:
        cached = importlib.util.cache_from_source(str(package / "__init__.py"))
    except NotImplementedError:  # an implementation without byte code
        return True
    return Path(cached).is_file()


def recompiled(env: Mapping[str, str], packages: Sequence[str] | None = None) -> list[str]:
    """The packages (default :data:`PACKAGES`) that a process with ``env`` (this Python)
    compiles at each import: no byte code beside them while ``PYTHONDONTWRITEBYTECODE``
    keeps any from being written. Empty where byte code is written (the first run writes
    it), or kept under ``PYTHONPYCACHEPREFIX`` (not looked at)."""
    if not env.get("PYTHONDONTWRITEBYTECODE") or env.get("PYTHONPYCACHEPREFIX"):
        return []
    found = [(name, package_dir(name)) for name in (PACKAGES if packages is None else packages)]
    return [name for name, where in found if where is not None and not has_byte_code(where)]


def hint(names: Sequence[str]) -> str:
    """One line: what the host costs and the command that saves it."""
    dirs = " ".join(str(package_dir(name)) for name in names)
    has, them = ("has", "it") if len(names) == 1 else ("have", "them")
    return (
        f"{' and '.join(names)} {has} no byte code here and PYTHONDONTWRITEBYTECODE is set: "
        f"each test process compiles {them} again (seconds); "
        f"`python -m compileall -q {dirs}` once saves it"
    )
