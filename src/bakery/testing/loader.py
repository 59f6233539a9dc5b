"""Load modules of a baked vLLM tree on a machine without vLLM installed.

Importing ``vllm/__init__.py`` pulls in much of vLLM, and ``vllm.triton_utils``
turns Triton off without a GPU driver. So a ``sys.meta_path`` finder serves every
``vllm.*`` name from the tree as follows, and records what it did:

- a declared stand-in that always replaces the tree (``vllm.triton_utils``,
  ``vllm.platforms``) is built from :mod:`bakery.testing.standins`;
- a folder of the tree becomes a *light package*: its ``__path__`` points into the
  tree, its ``__init__.py`` is never executed;
- a ``.py`` file of the tree is executed as is (no bytecode is written into the
  tree). If that fails and the name has a fallback stand-in, everything the attempt
  imported from ``vllm`` is rolled back and the stand-in takes its place;
- anything else is an ImportError that names the tree.

"Loads lightly" thus means: without executing any package ``__init__.py`` and
without reaching a module that is neither in the tree nor stood in.

In the full environment (``BAKERY_ENV=full``, set by ``bakery verify --env full``, which
runs the tests in an environment holding vLLM's own dependencies: see
:mod:`bakery.verifying.fullenv`) the tree is imported as vLLM itself imports it: every
package's ``__init__.py`` runs, and a declared stand-in replaces the tree only where the
host cannot run the real module (``interpreter_only`` under Triton's interpreter) or,
for a fallback stand-in, where the tree's file fails to load. Each module's origin is
recorded the same way, so verify says which modules were real and which stood in.

bakery's pytest plugin installs the finder when the session starts, so that a test may
import the tree as vLLM's own tests do (``from vllm.sampling_params import
SamplingParams``); :func:`load_tree_module` uses the same finder. Under the light
environment, a tree file whose import of a package outside vLLM fails (pydantic)
raises a ``ModuleNotFoundError`` that names ``bakery verify --env full``.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import os
import sys
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any, Literal

from bakery.testing.standins import STANDINS, StandIn

#: Environment variable that hands the baked tree to test processes (and ranks).
TREE_ENV = "BAKERY_TREE"
#: Environment variable that names the test environment: "light" (default) or "full".
ENV_MODE = "BAKERY_ENV"
ROOT_PACKAGE = "vllm"

Kind = Literal["tree", "stand-in", "package"]


@dataclass(frozen=True)
class Origin:
    """Where one ``vllm.*`` module came from."""

    kind: Kind
    #: File or folder in the tree for "tree"/"package"; why, for "stand-in".
    detail: str


#: Every ``vllm.*`` module this process imported through the finder, in import order.
PROVENANCE: dict[str, Origin] = {}
_LOCK = threading.RLock()


def _is_ours(fullname: str) -> bool:
    return fullname == ROOT_PACKAGE or fullname.startswith(ROOT_PACKAGE + ".")


#: What a light run says where a tree file imports a module bakery's environment lacks.
LIGHT_HINT = (
    "the light test environment holds bakery's own packages only: "
    '`bakery verify --env full` (or env = "full" in series.toml) installs vLLM\'s requirements'
)


class _TreeSourceLoader(importlib.machinery.SourceFileLoader):
    """Executes a tree file; falls back to a stand-in when one is declared."""

    def __init__(
        self, fullname: str, path: str, standin: StandIn | None, *, light: bool = False
    ) -> None:
        super().__init__(fullname, path)
        self._standin = standin
        #: the light environment: a missing third-party module names --env full
        self._light = light

    def set_data(self, path: str, data: Any, *, _mode: int = 0o666) -> None:
        """Never write ``__pycache__`` into the tree under test."""

    def exec_module(self, module: ModuleType) -> None:
        before = set(sys.modules)
        try:
            super().exec_module(module)
        except Exception as exc:
            if self._standin is None:
                if self._light and isinstance(exc, ModuleNotFoundError) and _foreign(exc):
                    raise ModuleNotFoundError(
                        f"{exc} (imported by {module.__name__}; {LIGHT_HINT})", name=exc.name
                    ) from exc
                raise
            _roll_back(before, keep=module.__name__)
            _reset(module)
            self._standin.build(module)
            why = f"{self._standin.reason}; the tree's file did not load lightly: {_plain(exc)!r}"
            PROVENANCE[module.__name__] = Origin("stand-in", why)
        else:
            PROVENANCE[module.__name__] = Origin("tree", self.path)


class _LightPackageLoader(importlib.abc.Loader):
    """A tree folder as a package whose ``__init__.py`` is never executed."""

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        return None

    def exec_module(self, module: ModuleType) -> None:
        locations = module.__spec__.submodule_search_locations if module.__spec__ else None
        PROVENANCE[module.__name__] = Origin("package", (locations or ["?"])[0])


class _StandInLoader(importlib.abc.Loader):
    def __init__(self, standin: StandIn) -> None:
        self._standin = standin

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        return None

    def exec_module(self, module: ModuleType) -> None:
        self._standin.build(module)
        PROVENANCE[module.__name__] = Origin("stand-in", self._standin.reason)


def _plain(exc: BaseException) -> BaseException:
    """exc without the light hint (a stand-in took the module's place: nothing to fix)."""
    cause = exc.__cause__
    hinted = isinstance(exc, ModuleNotFoundError) and LIGHT_HINT in str(exc)
    return cause if hinted and isinstance(cause, ModuleNotFoundError) else exc


def _foreign(exc: ModuleNotFoundError) -> bool:
    """A module outside vLLM is missing (not one the tree itself lacks)."""
    return bool(exc.name) and not _is_ours(exc.name or "") and LIGHT_HINT not in str(exc)


def _roll_back(before: set[str], *, keep: str) -> None:
    for name in set(sys.modules) - before:
        if _is_ours(name) and name != keep:
            del sys.modules[name]
            PROVENANCE.pop(name, None)


def _reset(module: ModuleType) -> None:
    for name in list(vars(module)):
        if not (name.startswith("__") and name.endswith("__")):
            delattr(module, name)
    module.__file__ = None


class TreeFinder(importlib.abc.MetaPathFinder):
    """Serves ``vllm`` and ``vllm.*`` from one baked tree (see the module docstring)."""

    def __init__(
        self, tree: Path, standins: Mapping[str, StandIn] = STANDINS, *, full: bool = False
    ) -> None:
        self.tree = tree
        self.standins = standins
        #: the full environment: packages run their __init__.py (see the module docstring)
        self.full = full
        #: called once, before the first ``vllm`` module is looked up (the pytest plugin:
        #: the Triton interpreter's fixes, as load_tree_module makes them)
        self.prepare: Callable[[], None] | None = None

    def _forced(self, standin: StandIn | None) -> bool:
        """Whether ``standin`` replaces the tree's module before the tree is tried."""
        if standin is None or standin.prefer_tree:
            return False
        if not self.full:
            return True
        return standin.interpreter_only and os.environ.get("TRITON_INTERPRET") == "1"

    def find_spec(
        self,
        fullname: str,
        path: object = None,
        target: ModuleType | None = None,
    ) -> importlib.machinery.ModuleSpec | None:
        if not _is_ours(fullname):
            return None
        prepare, self.prepare = self.prepare, None
        if prepare is not None:
            prepare()
        standin = self.standins.get(fullname)
        if standin is not None and self._forced(standin):
            return importlib.util.spec_from_loader(fullname, _StandInLoader(standin))
        if self.full and standin is not None and not standin.prefer_tree:
            standin = None  # the full environment runs the real module, or fails
        base = self.tree.joinpath(*fullname.split("."))
        source = base.parent / (base.name + ".py")
        init = base / "__init__.py"
        if self.full and init.is_file():
            loader = _TreeSourceLoader(fullname, str(init), standin)
            return importlib.util.spec_from_file_location(
                fullname, init, loader=loader, submodule_search_locations=[str(base)]
            )
        if init.is_file() or (base.is_dir() and not source.is_file()):
            spec = importlib.machinery.ModuleSpec(
                fullname, _LightPackageLoader(), origin=str(base), is_package=True
            )
            spec.submodule_search_locations = [str(base)]
            return spec
        if source.is_file():
            loader = _TreeSourceLoader(fullname, str(source), standin, light=not self.full)
            return importlib.util.spec_from_file_location(fullname, source, loader=loader)
        if standin is not None:
            return importlib.util.spec_from_loader(fullname, _StandInLoader(standin))
        if self.full:
            # as any finder: "not here" (find_spec probes of compiled extensions such as
            # vllm._C, which a source tree lacks, must see None, as vLLM's code expects)
            return None
        raise ModuleNotFoundError(
            f"{fullname} is neither in the tree {self.tree} nor declared as a stand-in "
            "in bakery.testing.standins",
            name=fullname,
        )


def install(tree: Path | str) -> TreeFinder:
    """Put a finder for ``tree`` first on ``sys.meta_path`` (idempotent per tree)."""
    tree = Path(tree).resolve()
    with _LOCK:
        for finder in sys.meta_path:
            if isinstance(finder, TreeFinder):
                if finder.tree != tree:
                    raise RuntimeError(
                        f"bakery.testing already serves vllm from {finder.tree}, not {tree}"
                    )
                return finder
        if not (tree / ROOT_PACKAGE).is_dir():
            raise FileNotFoundError(f"{tree} holds no {ROOT_PACKAGE}/ folder: not a vLLM tree")
        loaded = sys.modules.get(ROOT_PACKAGE)
        if loaded is not None:
            raise RuntimeError(
                f"{ROOT_PACKAGE} is already imported from {getattr(loaded, '__file__', '?')}; "
                "bakery.testing must be installed before anything imports vllm"
            )
        finder = TreeFinder(tree, full=os.environ.get(ENV_MODE) == "full")
        sys.meta_path.insert(0, finder)
        return finder


def tree_from_env() -> Path:
    """The tree handed to this process through ``BAKERY_TREE``."""
    value = os.environ.get(TREE_ENV)
    if not value:
        raise RuntimeError(
            f"{TREE_ENV} is not set: run the tests through `bakery verify` or "
            "`pytest -p bakery.testing.plugin --bakery-tree DIR`"
        )
    return Path(value)


def load_tree_module(name: str, tree: Path | str | None = None) -> ModuleType:
    """Import ``name`` from the baked tree (default: ``$BAKERY_TREE``), never a stand-in."""
    install(tree if tree is not None else tree_from_env())
    with _LOCK:
        module = importlib.import_module(name)
    origin = PROVENANCE.get(name)
    if origin is None or origin.kind != "tree":
        what = origin.kind if origin else "not loaded by bakery.testing"
        raise ImportError(f"{name} must come from the tree under test, but it is {what}")
    return module


def provenance() -> dict[str, Origin]:
    """A copy of :data:`PROVENANCE`."""
    with _LOCK:
        return dict(PROVENANCE)
