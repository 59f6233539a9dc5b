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

import json
import os
import threading
from collections.abc import Generator, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from bakery.testing import compat, expect
from bakery.testing.loader import ROOT_PACKAGE, TREE_ENV, provenance

_COUNTS = ("passed", "failed", "error", "skipped", "xfailed", "xpassed")
#: The user property that tags a report with the known defect its test hits.
_DEFECT_PROPERTY = "bakery_known_defect"


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


class _SessionState:
    """This session's settings, and a plugin object that counts outcomes."""

    def __init__(
        self,
        tree: Path,
        interpret: bool,
        report: Path | None,
        series: Path | None,
        worker: bool,
        rules: str | None = None,
    ) -> None:
        self.tree = tree
        self.interpret = interpret
        self.report = report
        self.series = series
        self.worker = worker
        self.counts = dict.fromkeys(_COUNTS, 0)
        from bakery.testing.headlink import HeadLink

        #: the other nodes of a multi-node verify (bakery verify --nnodes), or None
        self.link = None if worker else HeadLink.from_env()
        self.pools = RankPools(self.link)
        try:
            self.bake = expect.Bake.of(tree, series)
            #: the release whose rules apply: the bake's, or the one the user named
            self.rules = rules or self.bake.release
            self.defects = expect.load_defects(series) if series else {}
            self.expected = (
                expect.load_expectations(series, self.rules, interpret=interpret)
                if series
                else None
            )
        except expect.SeriesDataError as e:
            raise pytest.UsageError(f"bakery: {e}") from None
        self._need_rules(series)
        #: known defect id -> what its probe said (None: the input gives the right answer)
        self.probed: dict[str, str | None] = {}
        #: known defect id -> tests that hit it (counted where reports are logged)
        self.known: dict[str, int] = {}
        self.unexpected_skips = 0
        #: tests of the pristine oracle left out (--bakery-no-pristine)
        self.pristine_left_out = 0
        #: module provenance and tool fixes, this process's and the xdist workers'
        self.modules: dict[str, dict[str, str]] = {}
        self.tool_fixes: list[str] = []

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        # Spawn the ranks now, so that they start up while single-rank tests run
        # (not in pytest-xdist workers: only the one that gets rank tests needs them).
        if self.worker:
            return
        if self.link is not None:  # a lost node ends the run after the test under way
            self.link.on_lost(lambda line: setattr(session, "shouldstop", line))
        self.pools.prestart(
            prestart_worlds(session.items, os.cpu_count() or 1),
            rank_modules(session.items),
            # under the interpreter a warm-up saves no compile: it would only add CPU
            () if self.interpret else rank_warmups(session.items),
        )

    def _need_rules(self, series: Path | None) -> None:
        """Without a release the series has rules for, one line (expect.no_rules)."""
        why = expect.no_rules(series, self.tree, self.rules) if series else None
        if why:
            raise pytest.UsageError(f"bakery: {why}")

    def pytest_collection_modifyitems(self, config: pytest.Config, items: list[Any]) -> None:
        if config.getoption("--bakery-no-pristine"):  # issue 45: said, not an error
            oracle = [i for i in items if "pristine_tree" in getattr(i, "fixturenames", ())]
            if oracle:
                config.hook.pytest_deselected(items=oracle)
                items[:] = [i for i in items if i not in oracle]
                self.pristine_left_out += len(oracle)
        items[:] = ranks_last(items)
        for item in items:
            if "rank_pool" in getattr(item, "fixturenames", ()):
                # pytest-xdist (--dist loadgroup): one worker runs every multi-rank
                # test, so that one set of rank processes serves them all.
                item.add_marker(pytest.mark.xdist_group("bakery-ranks"))
            for mark in item.iter_markers("known_defect"):
                unknown = self._unknown_defect(mark)
                if unknown:
                    raise pytest.UsageError(f"bakery: {item.nodeid}: {unknown}")

    def _unknown_defect(self, mark: Any) -> str | None:
        (defect_id,) = mark.args
        if defect_id in self.defects:
            return None
        where = self.series / expect.DEFECTS_FILE if self.series else "no series"
        return f"known_defect({defect_id!r}) is not in {where}"

    def _active_defects(self, item: pytest.Item) -> list[expect.Defect]:
        bake = expect.Bake(self.rules, self.bake.diffs)
        ids = dict.fromkeys(m.args[0] for m in item.iter_markers("known_defect"))
        return [
            self.defects[i]
            for i in ids
            if i in self.defects and expect.active(self.defects[i], bake)
        ]

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_makereport(self, item: pytest.Item, call: Any) -> Generator[None, Any, None]:
        # A test that may show a known defect raised: pytest's traceback of it (source
        # read and parsed per entry, about 60 ms a test, BENCHMARKS.md) waits until the
        # failure turns out not to be the defect.
        deferred = (
            call.when == "call" and call.excinfo is not None and bool(self._active_defects(item))
        )
        if deferred:
            item.repr_failure = lambda excinfo, style=None: excinfo.exconly()  # type: ignore[method-assign]
        try:
            outcome = yield
        finally:
            if deferred:
                del item.repr_failure
        report: pytest.TestReport = outcome.get_result()
        if report.when == "call" and not hasattr(report, "wasxfail"):
            self._known_defect_outcome(item, call, report)
            if deferred and report.failed and report.longrepr == call.excinfo.exconly():
                report.longrepr = item.repr_failure(call.excinfo)
        if report.skipped and not hasattr(report, "wasxfail"):
            self._check_skip(report, item.nodeid)

    def _known_defect_outcome(
        self, item: pytest.Item, call: Any, report: pytest.TestReport
    ) -> None:
        """The call of a test that hits a known defect: the defect (its signature), a
        plain failure that names what happened instead, or a pass diagnosed by the
        defect's probe."""
        for mark in item.iter_markers("known_defect"):
            unknown = self._unknown_defect(mark)  # a marker added at run time
            if unknown:
                report.outcome = "failed"
                report.longrepr = f"bakery: {unknown}"
                return
        defects = self._active_defects(item)
        if not defects or report.skipped:
            return
        if report.passed:
            report.outcome = "failed"
            report.longrepr = self._passed_anyway(item, defects)
            return
        exc = call.excinfo.value if call.excinfo is not None else None
        for defect in defects:
            if exc is not None and defect.shows_in(exc):
                report.outcome = "skipped"
                report.wasxfail = f"known defect {defect.id}"
                report.user_properties.append((_DEFECT_PROPERTY, defect.id))
                return
        names = ", ".join(f"{d.id} ({d.signature})" for d in defects)
        what = _first_line(exc) if exc is not None else "no exception"
        if call.excinfo is not None and report.longrepr == call.excinfo.exconly():
            report.longrepr = item.repr_failure(call.excinfo)  # the deferred traceback
        report.longrepr = (
            f"bakery: expected known defect {names}, but the test failed otherwise: {what}\n\n"
            f"{report.longrepr}"
        )

    def _passed_anyway(self, item: pytest.Item, defects: list[expect.Defect]) -> str:
        """A test expected to show a defect passed: the defect is gone only when its
        own input (the probe) now gives the right answer."""
        where = self.series / expect.DEFECTS_FILE if self.series else "known-defects"
        lines = []
        for defect in defects:
            said = self._probe(item, defect)
            if said is None:
                lines.append(
                    f"known defect {defect.id} no longer shows: its input gives the right "
                    f"answer on this bake. Remove its entry from {where} (or, if the fix "
                    "stays out of the series, take this release off the entry's releases)."
                )
            else:
                lines.append(
                    f"known defect {defect.id} still shows on its input ({said}), but this "
                    "test passes: it passes for another reason (the case no longer reaches "
                    "the defect, or the test checks less than it did)."
                )
        return "\n".join(lines)

    def _probe(self, item: pytest.Item, defect: expect.Defect) -> str | None:
        if defect.id in self.probed:
            return self.probed[defect.id]
        if defect.probe is None:
            said: str | None = "the entry names no probe, so nothing shows the defect is gone"
        else:
            said = _run_probe(item.config, defect.probe, self)
        self.probed[defect.id] = said
        return said

    def _check_skip(self, report: pytest.TestReport, nodeid: str) -> None:
        """A skip the release's expectations do not list is a failure."""
        if self.expected is None or self.expected.allows_skip(nodeid):
            return
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else ""
        report.outcome = "failed"
        report.longrepr = (
            f"unexpected skip on vLLM {self.bake.release} (the expectations of "
            f"{self.expected.release} list no such skip): {reason}"
        )
        report.user_properties.append(("bakery_unexpected_skip", True))

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        defect_id = dict(report.user_properties).get(_DEFECT_PROPERTY)
        if hasattr(report, "wasxfail"):
            if report.skipped:
                if defect_id is not None:
                    self.known[str(defect_id)] = self.known.get(str(defect_id), 0) + 1
                else:
                    self.counts["xfailed"] += 1
            elif report.when == "call":
                self.counts["xpassed"] += 1
        elif report.failed:
            if dict(report.user_properties).get("bakery_unexpected_skip"):
                self.unexpected_skips += 1
                self.counts["failed"] += 1
            else:
                self.counts["failed" if report.when == "call" else "error"] += 1
        elif report.skipped:
            self.counts["skipped"] += 1
        elif report.when == "call":
            self.counts["passed"] += 1

    def pytest_collectreport(self, report: pytest.CollectReport) -> None:
        if report.failed:
            self.counts["error"] += 1

    @pytest.hookimpl(optionalhook=True)
    def pytest_testnodedown(self, node: Any, error: Any) -> None:
        """pytest-xdist controller: a worker's module provenance and tool fixes."""
        output = getattr(node, "workeroutput", {})
        for entry in output.get("bakery_modules", []):
            self.modules.setdefault(entry["name"], entry)
        for fix in output.get("bakery_tool_fixes", []):
            if fix not in self.tool_fixes:
                self.tool_fixes.append(fix)

    def module_entries(self) -> list[dict[str, str]]:
        here = [
            {"name": name, "kind": origin.kind, "detail": origin.detail}
            for name, origin in provenance().items()
        ]
        for entry in here:
            self.modules.setdefault(entry["name"], entry)
        return list(self.modules.values())

    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        self.pools.close()
        if self.link is not None:
            self.link.close()
        if self.worker:
            output = session.config.workeroutput  # type: ignore[attr-defined]
            output["bakery_modules"] = self.module_entries()
            output["bakery_tool_fixes"] = list(compat.APPLIED)
            return
        for fix in compat.APPLIED:
            if fix not in self.tool_fixes:
                self.tool_fixes.append(fix)
        if self.report is None:
            return
        data = {
            "tree": str(self.tree),
            "interpret": self.interpret,
            "exitstatus": int(exitstatus),
            "counts": self.counts,
            "known_defects": self.known,
            "unexpected_skips": self.unexpected_skips,
            "pristine_left_out": self.pristine_left_out,
            "release": self.bake.release,
            "rules": self.rules,
            "expectations": self.expected.release if self.expected else None,
            "modules": self.module_entries(),
            "tool_fixes": self.tool_fixes,
            "device": _device_words(self.interpret),
            "nodes": self.link.summary() if self.link is not None else [],
        }
        from bakery.outputs import replace_bytes

        replace_bytes(self.report, (json.dumps(data, indent=2) + "\n").encode())


_KEY = pytest.StashKey[_SessionState]()


def _first_line(exc: BaseException) -> str:
    """The exception's type and first line; and its last line where it carries a
    traceback (a rank's error ends with the rank's own exception)."""
    lines = [line.strip() for line in str(exc).strip().splitlines() if line.strip()]
    text = lines[0] if lines else ""
    if len(lines) > 1 and "Traceback" in str(exc):
        text += f" ... {lines[-1]}"
    return f"{type(exc).__name__}: {text}"


def _run_probe(config: pytest.Config, probe: str, state: _SessionState) -> str | None:
    """Run ``module:function`` from the tests folder on a :class:`expect.ProbeContext`;
    its answer, or what went wrong running it (never None then)."""
    import importlib
    import sys

    module_name, function = probe.split(":")
    folder = str(config.rootpath)
    if folder not in sys.path:
        sys.path.insert(0, folder)
    ctx = expect.ProbeContext(state.pools, "cpu" if state.interpret else "cuda", state.interpret)
    try:
        answer = getattr(importlib.import_module(module_name), function)(ctx)
    except Exception as e:  # the probe itself broke: that is not "the defect is gone"
        return f"its probe {probe} raised {_first_line(e)}"
    return None if answer is None else str(answer)


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

            from bakery.testing.dist import warm_device

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
    state = _SessionState(
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


def _state(config: pytest.Config) -> _SessionState:
    return config.stash[_KEY]


def _device_words(interpret: bool) -> str:
    """The device as this process's torch sees it, in reuse.device's words: the runner
    records a result for reuse only where its key named this device."""
    from bakery.testing import gpus

    if interpret:
        return gpus.INTERPRETER
    import torch

    n = torch.cuda.device_count()
    return gpus.Gpus(tuple(map(torch.cuda.get_device_name, range(n))), "torch").describe()


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


def rank_world(item: Any) -> int | None:
    """The world size a collected test's ranks have (its ``ranks`` parameter; 2 where it
    names none), or None for a test without ``rank_pool``."""
    if "rank_pool" not in getattr(item, "fixturenames", ()):
        return None
    callspec = getattr(item, "callspec", None)
    world = callspec.params.get("ranks") if callspec is not None else None
    return world if isinstance(world, int) else 2


def ranks_last(items: Sequence[Any]) -> list[Any]:
    """The tests in their order, but every multi-rank test after the single-rank ones,
    by world size (a stable sort): the ranks, spawned when collection ends, start up
    while the single-rank tests run instead of keeping the first multi-rank test
    waiting, and each world's tests run together."""
    return sorted(items, key=lambda item: rank_world(item) or 0)


def rank_modules(items: Sequence[Any]) -> list[tuple[str, str | None]]:
    """The modules of the collected multi-rank tests, in order, each once: every rank
    imports them while it starts (dist.warm_rank), not in its first task."""
    found: dict[str, str | None] = {}
    for item in items:
        module = getattr(item, "module", None)
        if rank_world(item) is not None and module is not None:
            found.setdefault(module.__name__, getattr(module, "__file__", None))
    return list(found.items())


#: A module of multi-rank tests may define this ``fn(ctx)``: on a GPU, every rank of the
#: worlds started early runs it once before its first test (RankPool.warm_up).
WARMUP = "bakery_rank_warmup"


def rank_warmups(items: Sequence[Any]) -> list[Any]:
    """The :data:`WARMUP` functions of the collected multi-rank tests' modules, each once."""
    found: dict[str, Any] = {}
    for item in items:
        module = getattr(item, "module", None)
        warmup = getattr(module, WARMUP, None)
        if module is not None and rank_world(item) is not None and callable(warmup):
            found.setdefault(module.__name__, warmup)
    return list(found.values())


def prestart_worlds(items: Sequence[Any], cores: int) -> list[int]:
    """The world sizes whose ranks start when collection ends, smallest first: every size
    the collected rank tests use while their processes fit the cores beside pytest's
    own, else the smallest alone (on 2 cores a world 4 that starts early slows the
    single-rank tests down by as much as it saves its first test: 38.4 s against 37.9 s
    of a 0.34.0 verify's wall)."""
    ordered = sorted({w for w in map(rank_world, items) if w is not None})
    return ordered if sum(ordered) < cores else ordered[:1]


class RankPools:
    """One :class:`~bakery.testing.dist.RankPool` per world size, shared by the session.

    Spawning ranks (Python, torch, Triton, the test module) costs seconds; sharing a
    pool across test modules pays that once. A pool that had to be killed restarts
    on its next task."""

    def __init__(self, link: Any = None) -> None:
        #: the other nodes (bakery.testing.headlink.HeadLink): some ranks run there
        self.link = link
        self._pools: dict[int, Any] = {}
        #: world size -> the thread starting (and warming up) its ranks
        self._starting: dict[int, threading.Thread] = {}
        #: what every rank imports while it starts (:func:`rank_modules`)
        self._modules: tuple[tuple[str, str | None], ...] = ()
        #: world size -> what went wrong in its warm-up (RankPool.warm_up)
        self.warmup_failures: dict[int, str] = {}

    def prestart(
        self,
        worlds: Sequence[int],
        modules: Sequence[tuple[str, str | None]] = (),
        warmups: Sequence[Any] = (),
    ) -> None:
        """Start these worlds' ranks, each world from a thread of its own: a rank's start
        waits for the fork server's imports (seconds of torch), which the tests need not
        wait for, and a world's first test waits only for its own. Every rank of the
        session, these and any started later, imports ``modules`` before its first task
        (dist.warm_rank); these run ``warmups`` too (:func:`rank_warmups`)."""
        self._modules = tuple(modules)
        if not worlds:
            return
        from bakery.testing.dist import start_rank_server

        start_rank_server()
        for world in worlds:
            thread = threading.Thread(
                target=self._start,
                args=(world, self(world), tuple(warmups)),
                name=f"bakery-rank-start-{world}",
                daemon=True,
            )
            self._starting[world] = thread
            thread.start()

    def _start(self, world: int, pool: Any, warmups: Sequence[Any]) -> None:
        try:
            pool.start()
            failure = pool.warm_up(warmups) if warmups else None
        except Exception as e:  # the world's first test starts it again, and meets it
            pool.close(polite=False)
            lines = str(e).strip().splitlines()
            failure = f"{type(e).__name__}: {lines[0] if lines else ''}"
        if failure is not None:
            self.warmup_failures[world] = failure

    def _started(self, world: int | None = None) -> None:
        """Wait for the start of this world's ranks (of every world: None)."""
        for w in [world] if world is not None else list(self._starting):
            thread = self._starting.get(w)
            if thread is not None and thread is not threading.current_thread():
                thread.join()
                self._starting.pop(w, None)

    def __call__(self, world_size: int = 2) -> Any:
        from bakery.testing.dist import RankPool

        self._started(world_size)
        if world_size not in self._pools:
            self._pools[world_size] = RankPool(world_size, modules=self._modules, link=self.link)
        return self._pools[world_size]

    def close(self) -> None:
        """The session is over: every pool's ranks are killed at once (BENCHMARKS.md:
        their polite shutdown took a second of every verify's wall)."""
        from bakery.testing.dist import stop_rank_server

        self._started()
        for pool in self._pools.values():
            pool.kill()
        for pool in self._pools.values():
            pool.close(polite=False)
        self._pools.clear()
        stop_rank_server()


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


def _module_lines(state: _SessionState, verbose: bool = False) -> list[str]:
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
    for fix in [*state.tool_fixes, *(f for f in compat.APPLIED if f not in state.tool_fixes)]:
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
