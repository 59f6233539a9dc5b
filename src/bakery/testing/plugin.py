"""pytest plugin that runs a series' bundled tests against a baked tree.

    python -m pytest -p bakery.testing.plugin --bakery-tree DIR [--bakery-interpret] TESTS

It hands the tree to the tests (and to the rank processes they spawn) through
``BAKERY_TREE``, offers the fixtures ``baked_tree``, ``device`` and ``interpret``,
and says in the terminal summary which ``vllm.*`` modules came from the tree and
which were stood in. ``--bakery-report FILE`` writes the same, with the counts, as
JSON for ``bakery verify``.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from bakery.testing import compat
from bakery.testing.loader import ROOT_PACKAGE, TREE_ENV, provenance

_COUNTS = ("passed", "failed", "error", "skipped", "xfailed", "xpassed")


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("bakery", "bakery: bundled tests of a baked tree")
    group.addoption(
        "--bakery-tree",
        metavar="DIR",
        help=f"the baked vLLM tree whose code is under test (default: ${TREE_ENV})",
    )
    group.addoption(
        "--bakery-interpret",
        action="store_true",
        help="run Triton kernels through its CPU interpreter (TRITON_INTERPRET=1), CPU tensors",
    )
    group.addoption(
        "--bakery-report",
        metavar="FILE",
        help="write counts and module provenance as JSON (used by `bakery verify`)",
    )


class _SessionState:
    """This session's settings, and a plugin object that counts outcomes."""

    def __init__(self, tree: Path, interpret: bool, report: Path | None) -> None:
        self.tree = tree
        self.interpret = interpret
        self.report = report
        self.counts = dict.fromkeys(_COUNTS, 0)
        self.pools = RankPools()

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        # Spawn the ranks now, so that they start up while single-rank tests run.
        if any("rank_pool" in getattr(item, "fixturenames", ()) for item in session.items):
            self.pools(2).start()

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if hasattr(report, "wasxfail"):
            if report.skipped:
                self.counts["xfailed"] += 1
            elif report.when == "call":
                self.counts["xpassed"] += 1
        elif report.failed:
            self.counts["failed" if report.when == "call" else "error"] += 1
        elif report.skipped:
            self.counts["skipped"] += 1
        elif report.when == "call":
            self.counts["passed"] += 1

    def pytest_collectreport(self, report: pytest.CollectReport) -> None:
        if report.failed:
            self.counts["error"] += 1

    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        self.pools.close()
        if self.report is None:
            return
        data = {
            "tree": str(self.tree),
            "interpret": self.interpret,
            "exitstatus": int(exitstatus),
            "counts": self.counts,
            "modules": [
                {"name": name, "kind": origin.kind, "detail": origin.detail}
                for name, origin in provenance().items()
            ],
            "tool_fixes": list(compat.APPLIED),
        }
        tmp = self.report.with_name(self.report.name + ".tmp")
        tmp.write_text(json.dumps(data, indent=2) + "\n")
        os.replace(tmp, self.report)


_KEY = pytest.StashKey[_SessionState]()


def pytest_configure(config: pytest.Config) -> None:
    value = config.getoption("--bakery-tree") or os.environ.get(TREE_ENV)
    if not value:
        raise pytest.UsageError(f"bakery: --bakery-tree DIR is required (or set {TREE_ENV})")
    tree = Path(value).resolve()
    if not (tree / ROOT_PACKAGE).is_dir():
        raise pytest.UsageError(f"bakery: {tree} is not a vLLM tree (no {ROOT_PACKAGE}/ folder)")
    interpret = bool(config.getoption("--bakery-interpret"))
    os.environ[TREE_ENV] = str(tree)
    if interpret:
        os.environ["TRITON_INTERPRET"] = "1"
    else:
        # Kernels compiled for the GPU: a stray TRITON_INTERPRET=1 would interpret them.
        os.environ.pop("TRITON_INTERPRET", None)
        import torch

        if not torch.cuda.is_available():
            raise pytest.UsageError(
                "bakery: no CUDA GPU is visible to torch; "
                "use --bakery-interpret (bakery verify --interpret) to run on CPU"
            )
    report = config.getoption("--bakery-report")
    state = _SessionState(tree, interpret, Path(report).resolve() if report else None)
    config.stash[_KEY] = state
    config.pluginmanager.register(state, "bakery-session")


def _state(config: pytest.Config) -> _SessionState:
    return config.stash[_KEY]


def pytest_report_header(config: pytest.Config) -> list[str]:
    state = _state(config)
    if state.interpret:
        mode = "Triton interpreter (TRITON_INTERPRET=1), CPU tensors, ranks over gloo"
    else:
        import torch

        gpus = torch.cuda.device_count()
        mode = f"GPU: {torch.cuda.get_device_name(0)} x{gpus}, CUDA tensors"
    return [f"bakery: tree {state.tree}", f"bakery: {mode}"]


@pytest.fixture(scope="session")
def baked_tree(pytestconfig: pytest.Config) -> Path:
    """The baked tree under test."""
    return _state(pytestconfig).tree


@pytest.fixture(scope="session")
def interpret(pytestconfig: pytest.Config) -> bool:
    """Whether kernels run through the Triton interpreter (on CPU tensors)."""
    return _state(pytestconfig).interpret


class RankPools:
    """One :class:`~bakery.testing.dist.RankPool` per world size, shared by the session.

    Spawning ranks (Python, torch, Triton, the test module) costs seconds; sharing a
    pool across test modules pays that once. A pool that had to be killed restarts
    on its next task."""

    def __init__(self) -> None:
        self._pools: dict[int, Any] = {}

    def __call__(self, world_size: int = 2) -> Any:
        from bakery.testing.dist import RankPool

        if world_size not in self._pools:
            self._pools[world_size] = RankPool(world_size)
        return self._pools[world_size]

    def close(self) -> None:
        for pool in self._pools.values():
            pool.close()
        self._pools.clear()


@pytest.fixture(scope="session")
def rank_pool(pytestconfig: pytest.Config) -> Iterator[RankPools]:
    """``rank_pool(world_size)``: real ranks joined by torch.distributed (see dist.py)."""
    pools = _state(pytestconfig).pools
    yield pools
    pools.close()


@pytest.fixture(scope="session")
def device(interpret: bool) -> Any:
    """``torch.device``: ``cpu`` under the interpreter, else ``cuda``."""
    import torch

    return torch.device("cpu" if interpret else "cuda")


def _module_lines() -> list[str]:
    origins = provenance()
    lines = []
    for name, origin in origins.items():
        if origin.kind == "tree":
            lines.append(f"from the tree  {name}  ({origin.detail})")
    for name, origin in origins.items():
        if origin.kind == "stand-in":
            lines.append(f"stood in       {name}  ({origin.detail})")
    packages = [name for name, origin in origins.items() if origin.kind == "package"]
    if packages:
        lines.append(f"light packages {', '.join(packages)}  (__init__.py not executed)")
    for fix in compat.APPLIED:
        lines.append(f"tool fix       {fix}")
    return lines


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    lines = _module_lines()
    if not lines:
        return
    terminalreporter.section("bakery: code under test")
    for line in lines:
        terminalreporter.write_line(line)
