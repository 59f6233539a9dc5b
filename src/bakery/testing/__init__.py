"""Run a series' bundled tests against the code of a baked tree.

``load_tree_module`` is what the bundled tests call; :mod:`bakery.testing.plugin` is
the pytest plugin that hands them the tree; :mod:`bakery.testing.dist` runs real
multi-rank cases.
"""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

from bakery.testing import compat, loader
from bakery.testing.loader import TREE_ENV, Origin, provenance

__all__ = ["TREE_ENV", "Origin", "load_tree_module", "provenance"]


def load_tree_module(name: str, tree: Path | str | None = None) -> ModuleType:
    """Import ``name`` from the baked tree (default ``$BAKERY_TREE``) under its real name.

    Under the Triton interpreter, known interpreter bugs are fixed first
    (:mod:`bakery.testing.compat`)."""
    if compat.interpret_mode():
        compat.fix_triton_interpreter()
    return loader.load_tree_module(name, tree)
