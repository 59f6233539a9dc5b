"""What bakery's pytest plugin knows of one session (:mod:`bakery.testing.plugin`): the
tree, the series' data and expectations, the probes, the counts and known defects, and the
modules the tests loaded, from configure to the terminal summary and the JSON report."""

from __future__ import annotations

import json
import os
import re
from collections.abc import Generator
from pathlib import Path
from typing import Any

import pytest

from bakery.testing import compat, expect
from bakery.testing.loader import LIGHT_HINT, provenance
from bakery.testing.rankpools import (
    RankPools,
    prestart_worlds,
    rank_modules,
    rank_warmups,
    ranks_last,
)

_COUNTS = ("passed", "failed", "error", "skipped", "xfailed", "xpassed")


#: The user property that tags a report with the known defect its test hits.
_DEFECT_PROPERTY = "bakery_known_defect"


class SessionState:
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
        #: light runs: "MODULE (imported by TREE_MODULE)" for each test module that could
        #: not be collected because the light environment lacks a module
        self.light_missing: list[str] = []

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
                self._light_missing(report)
        elif report.skipped:
            self.counts["skipped"] += 1
        elif report.when == "call":
            self.counts["passed"] += 1

    def pytest_collectreport(self, report: pytest.CollectReport) -> None:
        if report.failed:
            self.counts["error"] += 1
            self._light_missing(report)

    def _light_missing(self, report: pytest.CollectReport | pytest.TestReport) -> None:
        """A failure from a module the light environment lacks (the loader's message)."""
        found = _LIGHT_MISSING.search(str(report.longrepr))
        said = f"{found[1]} (imported by {found[2]})" if found else None
        if said and said not in self.light_missing:
            self.light_missing.append(said)

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
            output["bakery_tool_fixes"] = compat.reported()
            return
        for fix in compat.reported():
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
            "light_missing": self.light_missing,
            "device": _device_words(self.interpret),
            "nodes": self.link.summary() if self.link is not None else [],
        }
        from bakery.outputs import replace_bytes

        replace_bytes(self.report, (json.dumps(data, indent=2) + "\n").encode())


#: The loader's error for a module the light environment lacks (loader.LIGHT_HINT).
_LIGHT_MISSING = re.compile(
    rf"No module named '([\w.]+)' \(imported by ([\w.]+); {re.escape(LIGHT_HINT[:40])}"
)


def _first_line(exc: BaseException) -> str:
    """The exception's type and first line; and its last line where it carries a
    traceback (a rank's error ends with the rank's own exception)."""
    lines = [line.strip() for line in str(exc).strip().splitlines() if line.strip()]
    text = lines[0] if lines else ""
    if len(lines) > 1 and "Traceback" in str(exc):
        text += f" ... {lines[-1]}"
    return f"{type(exc).__name__}: {text}"


def _run_probe(config: pytest.Config, probe: str, state: SessionState) -> str | None:
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


def _device_words(interpret: bool) -> str:
    """The device as this process's torch sees it, in reuse.device's words: the runner
    records a result for reuse only where its key named this device."""
    from bakery.testing import gpus

    if interpret:
        return gpus.INTERPRETER
    import torch

    n = torch.cuda.device_count()
    return gpus.Gpus(tuple(map(torch.cuda.get_device_name, range(n))), "torch").describe()
