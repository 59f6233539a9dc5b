"""pytest plugin that runs a series' bundled tests against a baked tree.

    python -m pytest -p bakery.testing.plugin --bakery-tree DIR [--bakery-interpret] TESTS

It hands the tree to the tests (and to the rank processes they spawn) through
``BAKERY_TREE``, offers the fixtures ``baked_tree``, ``device`` and ``interpret``,
and says in the terminal summary which ``vllm.*`` modules came from the tree and
which were stood in. ``--bakery-report FILE`` writes the same, with the counts, as
JSON for ``bakery verify``.

With ``--bakery-series DIR`` (default: the folder above the tests, when it is a
series) it reads the series' data (:mod:`bakery.testing.expect`):

- ``known-defects.toml``: a test marked ``@pytest.mark.known_defect("ID")`` (at
  collection, or at run time through ``request.applymarker``), on a bake that has the
  defect, is counted as that defect only when its call fails with the defect's
  signature (exception type and message pattern); any other failure is a plain
  failure that says so, and a setup error stays an error. When it passes, the
  defect's probe (its own minimal input) decides: the input now gives the right
  answer (the defect is gone: remove the entry), or it still does not (the test
  passes for another reason: a failure).
- ``expectations.toml``: what the bake's release has upstream (fixtures ``release``
  and ``expected``); a skip that the release's entry does not list is a failure.

A series with either file needs to know the bake's release: a tree without one (no
manifest, an unparsable version, one below every rule) is a usage error, one line,
unless ``--bakery-rules RELEASE`` names the release whose rules apply.

Knows no series: everything series-specific comes from those files and the tests.
Under pytest-xdist, workers run the tests and the controller counts and reports.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from bakery.testing import compat, expect
from bakery.testing.loader import ROOT_PACKAGE, TREE_ENV
from bakery.testing.rankpools import (
    RankPools,
)
from bakery.testing.session import SessionState


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
    group.addoption(
        "--bakery-series",
        metavar="DIR",
        help="the series folder (known-defects.toml, expectations.toml); "
        "default: the folder above the tests when it holds diffs/",
    )
    group.addoption(
        "--bakery-pristine",
        metavar="DIR",
        help="the pristine vLLM tree of the bake's release (fixture pristine_tree); "
        "bakery verify passes its cached one",
    )
    group.addoption(
        "--bakery-no-pristine",
        action="store_true",
        help="no pristine tree of the bake's release can be had: the tests that take "
        "pristine_tree are left out (deselected) and counted, never failed",
    )
    group.addoption(
        "--bakery-rules",
        metavar="RELEASE",
        help="apply the series' expectations and known defects of this vLLM release "
        "(for a tree whose manifest names none, or none the series has rules for)",
    )


_KEY = pytest.StashKey[SessionState]()


#: On a GPU host with this many cores or more, the ranks' fork server starts with the
#: session (:func:`starts_early`), so that its import of torch runs while this process
#: imports it (on the device, the first world-2 test waited 3.0 s for its ranks when the
#: server started at collection's end; with the device also chosen without torch, the
#: warm verify went from 17.5/19.0 s to 11.8/13.6 s on an H100: BENCHMARKS.md,
#: 2026-12-06). Below it, the server starts when collection ends, if a rank test was
#: collected (an import beside pytest's would slow it on 2 cores). A series' own helper
#: may follow the same rule (dcp2's TTIR probe: once the ranks warmed up before their
#: first test, the probe had become the run's last wait).
EARLY_SERVER_CORES = 4


def starts_early(config: pytest.Config) -> bool:
    """Whether the session's helpers start at its configure: the ranks' fork server
    (rather than at collection's end) and a thread making this process's CUDA context
    (rather than in the first test): on a GPU (not under Triton's interpreter), in the
    main process (not a pytest-xdist worker), with :data:`EARLY_SERVER_CORES` cores or
    more."""
    return (
        not config.getoption("--bakery-interpret")
        and not hasattr(config, "workerinput")
        and (os.cpu_count() or 1) >= EARLY_SERVER_CORES
    )


def pytest_configure(config: pytest.Config) -> None:
    value = config.getoption("--bakery-tree") or os.environ.get(TREE_ENV)
    if not value:
        raise pytest.UsageError(f"bakery: --bakery-tree DIR is required (or set {TREE_ENV})")
    tree = Path(value).resolve()
    if not (tree / ROOT_PACKAGE).is_dir():
        raise pytest.UsageError(f"bakery: {tree} is not a vLLM tree (no {ROOT_PACKAGE}/ folder)")
    interpret = bool(config.getoption("--bakery-interpret"))
    os.environ[TREE_ENV] = str(tree)
    _serve_vllm(tree)
    if interpret:
        os.environ["TRITON_INTERPRET"] = "1"
    else:
        # Kernels compiled for the GPU: a stray TRITON_INTERPRET=1 would interpret them.
        os.environ.pop("TRITON_INTERPRET", None)
        if starts_early(config):
            # the fork server imports torch while this process does (seconds each)
            from bakery.testing.dist import start_rank_server

            start_rank_server()
        import torch

        if not torch.cuda.is_available():
            from bakery.testing.dist import stop_rank_server

            stop_rank_server()
            raise pytest.UsageError(
                "bakery: no CUDA GPU is visible to torch; "
                "use --bakery-interpret (bakery verify --interpret) to run on CPU"
            )
        if starts_early(config):
            # CUDA's context and Triton's driver made while pytest collects (the thread
            # waits in the driver, not for the GIL); ranks fork from the fork server,
            # never from this process, so a context here is safe for them. Triton is
            # imported here first (the tests import it anyway): two threads importing
            # one package's circular imports at once can deadlock.
            import triton  # noqa: F401

            from bakery.testing.rank import warm_device

            threading.Thread(
                target=warm_device,
                args=(torch.device("cuda"),),
                name="bakery-warm-cuda",
                daemon=True,
            ).start()
    config.addinivalue_line(
        "markers", "xdist_group(name): run on one pytest-xdist worker (--dist loadgroup)"
    )
    config.addinivalue_line(
        "markers",
        "known_defect(id): the test hits a defect registered in the series' "
        "known-defects.toml (expected to fail with its signature where the bake has it)",
    )
    report = config.getoption("--bakery-report")
    state = SessionState(
        tree,
        interpret,
        Path(report).resolve() if report else None,
        _series_dir(config),
        worker=hasattr(config, "workerinput"),
        rules=config.getoption("--bakery-rules"),
    )
    config.stash[_KEY] = state
    config.pluginmanager.register(state, "bakery-session")


def _serve_vllm(tree: Path) -> None:
    """The tree importable as ``vllm`` from the session's start, so that a test may say
    ``from vllm.sampling_params import SamplingParams`` as vLLM's own tests do (issue
    48); load_tree_module goes on working (the same finder). Under Triton's interpreter
    its fixes come first, as load_tree_module makes them. A ``vllm`` imported before the
    session (installed beside bakery) is left alone: load_tree_module says so."""
    import sys

    from bakery.testing import loader

    if ROOT_PACKAGE in sys.modules:
        return
    finder = loader.install(tree)

    def prepare() -> None:
        if compat.interpret_mode():
            compat.fix_triton_interpreter()

    finder.prepare = prepare


def _series_dir(config: pytest.Config) -> Path | None:
    value = config.getoption("--bakery-series")
    if value:
        folder = Path(value).resolve()
        if not folder.is_dir():
            raise pytest.UsageError(f"bakery: --bakery-series {folder}: no such folder")
        return folder
    above = config.rootpath.parent
    return above if (above / "diffs").is_dir() else None


def _state(config: pytest.Config) -> SessionState:
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
def pristine_tree(pytestconfig: pytest.Config) -> Path | None:
    """The pristine tree of the bake's release (--bakery-pristine), or None: an oracle
    for what the series promises to keep of upstream."""
    value = pytestconfig.getoption("--bakery-pristine")
    if not value:
        return None
    tree = Path(value).resolve()
    if not (tree / ROOT_PACKAGE).is_dir():
        raise pytest.UsageError(f"bakery: --bakery-pristine {tree}: no {ROOT_PACKAGE}/ folder")
    return tree


@pytest.fixture(scope="session")
def release(pytestconfig: pytest.Config) -> str | None:
    """The vLLM release whose rules apply: the one the tree was baked from (its
    manifest), or the one named with --bakery-rules."""
    return _state(pytestconfig).rules


@pytest.fixture(scope="session")
def expected(pytestconfig: pytest.Config) -> expect.Expectations | None:
    """What the bake's release has upstream (the series' expectations.toml), or None."""
    return _state(pytestconfig).expected


@pytest.fixture(scope="session")
def interpret(pytestconfig: pytest.Config) -> bool:
    """Whether kernels run through the Triton interpreter (on CPU tensors)."""
    return _state(pytestconfig).interpret


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


#: Modules from the tree named in the summary's one line (pytest -v lists each).
_TREE_NAMED = 3


def _module_lines(state: SessionState, verbose: bool = False) -> list[str]:
    """The summary's lines on the code under test: a few of the tree's modules each on
    its line, more on one line (a full environment loads some 170), each on its own with
    pytest's ``-v``."""
    entries = state.module_entries()
    lines = []
    tree = [e for e in entries if e["kind"] == "tree"]
    if verbose or len(tree) <= _TREE_NAMED:
        lines += [f"from the tree  {e['name']}  ({e['detail']})" for e in tree]
    else:
        names = ", ".join(e["name"] for e in tree[:_TREE_NAMED])
        left = len(tree) - _TREE_NAMED
        lines.append(f"from the tree  {names} and {left} more (-v lists them)")
    for e in entries:
        if e["kind"] == "stand-in":
            lines.append(f"stood in       {e['name']}  ({e['detail']})")
    packages = [e["name"] for e in entries if e["kind"] == "package"]
    if packages:
        lines.append(f"light packages {', '.join(packages)}  (__init__.py not executed)")
    for fix in [*state.tool_fixes, *(f for f in compat.reported() if f not in state.tool_fixes)]:
        lines.append(f"tool fix       {fix}")
    return lines


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    state = _state(config)
    lines = _module_lines(state, verbose=config.get_verbosity() > 0)
    if state.expected is not None:
        release = state.expected.release
        lines.append(f"expectations   vLLM {release} (the bake's release: {state.bake.release})")
    for defect_id, count in sorted(state.known.items()):
        lines.append(f"known defect   {defect_id}: {count} tests")
    if state.link is not None:
        lines += [f"node           {line}" for line in state.link.summary()]
        if state.link.lost:
            lines.append(f"lost           {state.link.lost}")
    for world, failure in sorted(state.pools.warmup_failures.items()):
        lines.append(
            f"rank warm-up   world {world} failed (its tests ran on fresh ranks): {failure}"
        )
    if not lines:
        return
    terminalreporter.section("bakery: code under test")
    for line in lines:
        terminalreporter.write_line(line)
