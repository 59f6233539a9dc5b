"""What runs inside the pytest process of a series' tests, and the one API those tests
import: every name in ``__all__`` (tests/testing/test_series_api.py holds every series
of the project to it).

``load_tree_module`` is what the bundled tests call; :mod:`bakery.testing.plugin` is
the pytest plugin that hands them the tree; :mod:`bakery.testing.dist` runs real
multi-rank cases. What runs in bakery's own process to start pytest is
:mod:`bakery.verifying`.

- ``load_tree_module(name)``, ``provenance()``, ``Origin``, ``TREE_ENV``: the tree's modules;
- ``tree_from_env()``: the baked tree this run tests (``$BAKERY_TREE``);
- ``Bake``: what the tree's manifest says of its bake (release, diffs), read leniently;
- ``StandIn``, ``declare``: a declared stand-in for a module the light environment lacks;
- ``starts_early``: a helper the plugin starts with the session on a GPU host.

The last four load their modules on first use (PEP 562), so that importing
``bakery.testing`` stays as light as the loader.
"""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

from bakery.testing import compat, loader
from bakery.testing.loader import TREE_ENV, Origin, provenance

__all__ = [
    "TREE_ENV",
    "Bake",
    "Origin",
    "StandIn",
    "declare",
    "load_tree_module",
    "provenance",
    "starts_early",
    "tree_from_env",
]

#: The names loaded on first use, and their modules.
_LAZY = {
    "Bake": "bakery.testing.expect",
    "StandIn": "bakery.testing.standins",
    "declare": "bakery.testing.standins",
    "starts_early": "bakery.testing.plugin",
    "tree_from_env": "bakery.testing.loader",
}


def __getattr__(name: str) -> object:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def load_tree_module(name: str, tree: Path | str | None = None) -> ModuleType:
    """Import ``name`` from the baked tree (default ``$BAKERY_TREE``) under its real name.

    Under the Triton interpreter, known interpreter bugs are fixed first
    (:mod:`bakery.testing.compat`)."""
    if compat.interpret_mode():
        compat.fix_triton_interpreter()
    return loader.load_tree_module(name, tree)
