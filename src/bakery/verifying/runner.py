"""The core of ``bakery verify``: run a series' bundled tests against a baked tree.

pytest runs in a subprocess so that its environment (``TRITON_INTERPRET=1``,
``BAKERY_TREE``) is in place before anything imports Triton, and so that the tree's
modules never enter bakery's own process. pytest prints its own progress; the
counts and where each ``vllm.*`` module came from come back through the plugin's
JSON report. Nothing here prints or exits.

With ``jobs`` above 1 and pytest-xdist installed, the tests spread over that many
worker processes (``--dist loadgroup``: the plugin keeps every multi-rank test on one
worker, so that one set of rank processes serves them).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import sys
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import msgspec

from bakery import process
from bakery.errors import VerifyError
from bakery.model import records
from bakery.testing.loader import ENV_MODE, TREE_ENV
from bakery.verifying import verdict
from bakery.verifying.plan import Reuse, VerifyPlan

PLUGIN = "bakery.testing.plugin"
PYTEST_MAIN = "bakery.testing.pytest_main"

_log = logging.getLogger(__name__)

#: pytest's exit codes (pytest.ExitCode), kept here to not import pytest for them.
_PYTEST_OK, _PYTEST_FAILED, _PYTEST_INTERRUPTED, _PYTEST_NO_TESTS = 0, 1, 2, 5
_PYTEST_TROUBLE = {_PYTEST_INTERRUPTED: "interrupted", 3: "internal error", 4: "usage error"}


@dataclass(frozen=True)
class ModuleOrigin:
    """Where a ``vllm.*`` module of the test run came from."""

    name: str
    kind: str  # "tree" | "stand-in" | "package"
    detail: str


@dataclass(frozen=True)
class VerifyResult:
    #: 0: every test passed; 1: a test failed or errored, or none ran.
    exit_code: int
    pytest_exit_code: int
    passed: int = 0
    failed: int = 0
    errors: int = 0
    skipped: int = 0
    xfailed: int = 0
    xpassed: int = 0
    modules: tuple[ModuleOrigin, ...] = ()
    #: Fixes bakery applied to the test tools (not the tree), e.g. Triton's interpreter.
    tool_fixes: tuple[str, ...] = ()
    #: --env light: the modules the light environment lacked, that test modules needed
    #: ("pydantic (imported by vllm.sampling_params)"); --env full would have them.
    light_missing: tuple[str, ...] = ()
    #: Registered defects of the series that this bake has: id -> tests that hit it
    #: (strict expected failures; neither passed nor failed).
    known_defects: dict[str, int] = field(default_factory=dict)
    #: Skips that the release's expectations do not list (counted in ``failed`` too).
    unexpected_skips: int = 0
    #: why the pristine oracle's tests were left out (no pristine tree could be had)
    pristine_not_run: str | None = None
    #: The release the expectations came from (None: the series has none for this bake).
    expectations: str | None = None
    #: pytest-xdist workers (1: one process).
    jobs: int = 1
    #: The test environment: "light" (bakery's own, the light loader) or "full"
    #: (vLLM's dependencies installed: bakery.verifying.fullenv).
    env: str = "light"
    elapsed: float = 0.0
    junit: Path | None = None
    command: tuple[str, ...] = field(default=(), repr=False)
    #: The verification's key in bakery's cache (None: not recorded).
    key: str | None = None
    #: When the result was reused from an earlier run with the same inputs: its date.
    reused: str | None = None
    #: verify --pristine: how the tests split between the baked and the pristine tree
    pristine: tuple[str, ...] = ()
    #: The device in words as the pytest process's torch saw it (reuse.device's form).
    device_seen: str | None = field(default=None, repr=False)

    @property
    def no_tests(self) -> bool:
        return self.pytest_exit_code == _PYTEST_NO_TESTS

    @property
    def from_tree(self) -> tuple[ModuleOrigin, ...]:
        return tuple(m for m in self.modules if m.kind == "tree")

    @property
    def stood_in(self) -> tuple[ModuleOrigin, ...]:
        return tuple(m for m in self.modules if m.kind == "stand-in")


def pytest_command(
    plan: VerifyPlan, *, report: Path | None = None, empty_ini: Path | None = None
) -> list[str]:
    """The pytest command line that :func:`run_verify` runs for ``plan`` (for display, too).

    The tests folder's own ``pytest.ini`` is the only pytest configuration: without
    one, ``empty_ini`` stands in, so that no configuration of a folder above (bakery's
    own ``pyproject.toml``, say) changes how the bundled tests run."""
    # bakery.testing.pytest_main: pytest's entry, ended without Python's slow teardown
    python = plan.env.python or sys.executable
    command = [python, "-m", PYTEST_MAIN, "-p", PLUGIN, "-p", "no:cacheprovider"]
    ini = plan.tests / "pytest.ini"
    if ini.is_file() or empty_ini is not None:
        command.append(f"-c={ini if ini.is_file() else empty_ini}")
    # ``--opt=value``: a separate value would count as a path when pytest picks its rootdir.
    command += [f"--rootdir={plan.tests}", f"--bakery-tree={plan.tree}"]
    if plan.interpret:
        command.append("--bakery-interpret")
    if report is not None:
        command.append(f"--bakery-report={report}")
    if plan.series_dir is not None:
        command.append(f"--bakery-series={plan.series_dir}")
    if plan.jobs > 1:
        command += [f"--numprocesses={plan.jobs}", "--dist=loadgroup"]
    if plan.junit is not None:
        command.append(f"--junitxml={plan.junit}")
    command += [*plan.pytest_args, str(plan.tests)]
    return command


def verify_environment(plan: VerifyPlan, base: Mapping[str, str] | None = None) -> dict[str, str]:
    """The subprocess environment: the tree, the loader's mode (the test environment's
    name), Triton's interpreter on or off. Triton's compile cache stays where Triton keeps
    it (``~/.triton/cache``, or the user's ``TRITON_CACHE_DIR``), never in bakery's cache:
    Triton loads the launcher ``.so`` it finds there, and bakery's cache may be restored
    from another job (SECURITY.md)."""
    env = dict(os.environ if base is None else base)
    env[TREE_ENV] = str(plan.tree)
    env[ENV_MODE] = plan.env.name
    if plan.interpret:
        env["TRITON_INTERPRET"] = "1"
    else:
        env.pop("TRITON_INTERPRET", None)
    return env


def run_verify(plan: VerifyPlan) -> VerifyResult:
    """:func:`_run_verify`, and why the pristine oracle's tests did not run, where they
    did not (issue 45: ``verified, pristine oracle not run``). A run of the whole suite
    with the cache on records its verdict for the tree's content (:mod:`.verdict`)."""
    result = _run_verify(plan)
    if plan.pristine_missing is not None:
        result = replace(result, pristine_not_run=plan.pristine_missing)
    if plan.cache_root is not None and verdict.whole_suite(plan.pytest_args):
        # the whole suite's verdict is the content's, whichever command ran it (issue 45)
        verdict.record_result(plan.cache_root, plan.tree, result, plan.device)
    return result


def _run_verify(plan: VerifyPlan) -> VerifyResult:
    """Run the plan's tests against its tree; pytest prints as it goes (or, with
    ``plan.log``, writes to that file: parallel matrix workers).

    Raises :class:`~bakery.errors.VerifyError` when pytest itself cannot run (usage or
    internal error, interrupted); a test that fails, or no test at all, is ``exit_code``
    1. Bad input was refused when the plan was made (:mod:`bakery.verifying.plan`).

    Unless ``plan.reuse`` is off, the result is recorded in bakery's cache
    (:mod:`bakery.testing.reuse`) and, with ``Reuse.REUSE``, an earlier result whose
    inputs all equal this run's is returned instead of running (``reused`` says when it
    ran). A run asked for a JUnit file always runs.
    """
    static = device = None
    if plan.cache_root is not None:
        from bakery.testing import reuse as reuses

        device = reuses.device(plan.interpret)
        static = reuses.static_key(
            reuses.inputs(
                reuses.Run(
                    plan.tests,
                    plan.tree,
                    plan.interpret,
                    plan.pytest_args,
                    plan.series_dir,
                    device_name=device,
                    env_mode=plan.env.name,
                    python=plan.env.python,
                )
            )
        )
        if plan.reuse is Reuse.REUSE and plan.junit is None:
            record = reuses.lookup(plan.cache_root, static, plan.tree)
            if record is not None:
                with contextlib.suppress(_BadRecord):  # a damaged record: run again
                    return _from_record(record, plan.tree, plan.jobs)
    env = verify_environment(plan)
    if plan.env.python is None:  # the tests run with this Python: its packages are theirs
        from bakery.verifying import bytecode

        slow = bytecode.recompiled(env)
        if slow:
            _log.info(bytecode.hint(slow), extra={"event": "detected"})
    result = _run(plan, env)
    if plan.cache_root is not None and static is not None:
        from bakery.testing import reuse as reuses

        if result.device_seen is not None and result.device_seen != device:
            # the key named a device the tests did not run on (gpus.py asked the driver,
            # not torch): a result no later run may take for its own
            _log.warning(
                f"not recorded for reuse: the tests ran on {result.device_seen}, "
                f"the driver showed {device}"
            )
            return result
        names = [m.name for m in result.modules]
        key = reuses.store(plan.cache_root, static, plan.tree, names, _to_record(result, plan.tree))
        result = replace(result, key=key)
    return result


class _Module(msgspec.Struct, omit_defaults=True):
    """A module's origin as recorded: ``detail`` relative to the tree, or absolute
    (``absolute = "1"``) where it lies outside (a stand-in, a package)."""

    name: str
    kind: str
    detail: str
    absolute: str | None = None


class _Counts(msgspec.Struct):
    passed: int
    failed: int
    errors: int
    skipped: int
    xfailed: int
    xpassed: int
    unexpected_skips: int


class _Record(msgspec.Struct):
    """A verify's result as the reuse store keeps it (``reuse.py``): read back checked,
    a record of another shape is a run."""

    exit_code: int
    pytest_exit_code: int
    counts: _Counts
    modules: list[_Module]
    tool_fixes: list[str]
    known_defects: dict[str, int]
    expectations: str | None
    elapsed: float


def _to_record(r: VerifyResult, tree: Path) -> dict[str, Any]:
    def rel(m: ModuleOrigin) -> _Module:
        detail = Path(m.detail)
        if m.kind != "stand-in" and detail.is_relative_to(tree):
            return _Module(m.name, m.kind, detail.relative_to(tree).as_posix())
        return _Module(m.name, m.kind, m.detail, "1")

    counts = _Counts(
        r.passed, r.failed, r.errors, r.skipped, r.xfailed, r.xpassed, r.unexpected_skips
    )
    record = _Record(
        r.exit_code,
        r.pytest_exit_code,
        counts,
        [rel(m) for m in r.modules],
        list(r.tool_fixes),
        dict(r.known_defects),
        r.expectations,
        r.elapsed,
    )
    plain: dict[str, Any] = records.plain(record)
    return plain


def _from_record(record: Any, tree: Path, jobs: int) -> VerifyResult:
    """A recorded result, its module paths in ``tree`` (another folder may hold the same
    bytes: a port candidate, a matrix row). A record of another shape is a run."""
    try:
        d = records.load(record.result, _Record)
    except records.RecordError:
        raise _BadRecord from None
    modules = tuple(
        ModuleOrigin(m.name, m.kind, m.detail if m.absolute else str(tree / m.detail))
        for m in d.modules
    )
    return VerifyResult(
        exit_code=d.exit_code,
        pytest_exit_code=d.pytest_exit_code,
        modules=modules,
        tool_fixes=tuple(d.tool_fixes),
        known_defects=d.known_defects,
        expectations=d.expectations,
        jobs=jobs,
        elapsed=d.elapsed,
        key=record.key,
        reused=record.date,
        passed=d.counts.passed,
        failed=d.counts.failed,
        errors=d.counts.errors,
        skipped=d.counts.skipped,
        xfailed=d.counts.xfailed,
        xpassed=d.counts.xpassed,
        unexpected_skips=d.counts.unexpected_skips,
    )


class _BadRecord(Exception):
    pass


def _run(plan: VerifyPlan, env: dict[str, str]) -> VerifyResult:
    with tempfile.TemporaryDirectory(prefix="bakery-verify-") as tmp:
        report = Path(tmp) / "report.json"
        empty_ini = Path(tmp) / "pytest.ini"
        empty_ini.write_text("[pytest]\n")
        command = pytest_command(plan, report=report, empty_ini=empty_ini)
        started = time.monotonic()
        try:
            code = process.run_shown(command, env=env, log=plan.log)
        except process.ProcessFailed as exc:
            raise VerifyError(f"cannot start pytest: {exc.message}") from None
        elapsed = time.monotonic() - started
        data = json.loads(report.read_text()) if report.is_file() else None
    counts = (data or {}).get("counts", {})
    # pytest stops with "interrupted" on collection errors: a test module that cannot
    # import the tree's code is a failed test, not a usage error.
    collection_failed = code == _PYTEST_INTERRUPTED and counts.get("error", 0) > 0
    if code in _PYTEST_TROUBLE and not collection_failed:
        raise VerifyError(f"pytest stopped: {_PYTEST_TROUBLE[code]} (exit code {code})")
    if code not in (_PYTEST_OK, _PYTEST_FAILED, _PYTEST_NO_TESTS) and not collection_failed:
        raise VerifyError(f"pytest exited with code {code}")
    return VerifyResult(
        exit_code=0 if code == _PYTEST_OK else 1,
        pytest_exit_code=code,
        passed=counts.get("passed", 0),
        failed=counts.get("failed", 0),
        errors=counts.get("error", 0),
        skipped=counts.get("skipped", 0),
        xfailed=counts.get("xfailed", 0),
        xpassed=counts.get("xpassed", 0),
        modules=tuple(ModuleOrigin(**m) for m in (data or {}).get("modules", [])),
        tool_fixes=tuple((data or {}).get("tool_fixes", [])),
        light_missing=tuple((data or {}).get("light_missing", [])),
        known_defects=dict((data or {}).get("known_defects", {})),
        unexpected_skips=int((data or {}).get("unexpected_skips", 0)),
        expectations=(data or {}).get("expectations"),
        device_seen=(data or {}).get("device"),
        jobs=plan.jobs,
        env=plan.env.name,
        elapsed=elapsed,
        junit=plan.junit,
        command=tuple(command),
    )
